#!/usr/bin/env python3
"""Where a ``provision --lock`` spends its wall time: every child process and event, timestamped.

    python bench/trace_lock.py TRACE.jsonl -- provision --lock uv.lock --root R ...

Runs envbuild's CLI in this process with two taps and nothing else changed: each child process
(``subprocess.Popen``: uv, the venv's Python, the guard's helpers) is logged with its start, end
and argv head, and each progress event (``envbuild.events``) with its time. Prints a timeline
(seconds from the start, gaps where this process itself worked between children; each child's CPU
seconds, user + system, with its waited-for descendants) and writes every record to TRACE.jsonl.
Nothing here is a test (bench/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

T0 = time.monotonic()
RECORDS: list[dict[str, Any]] = []
_LOCK = threading.Lock()


def _now() -> float:
    return round(time.monotonic() - T0, 3)


def _short(argv: object) -> str:
    parts = [str(a) for a in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
    head = [Path(parts[0]).name, *parts[1:4]]
    return " ".join(p if len(p) < 60 else p[:57] + "..." for p in head)


class _Tapped(subprocess.Popen):  # type: ignore[type-arg]
    def __init__(self, args: Any, *a: Any, **kw: Any) -> None:
        self._rec = {
            "kind": "proc",
            "argv": _short(args),
            "start": _now(),
            "thread": threading.current_thread().name,
        }
        super().__init__(args, *a, **kw)

    def _ended(self, rc: int | None) -> None:
        with _LOCK:
            if rc is not None and "end" not in self._rec:
                self._rec["end"] = _now()
                self._rec["rc"] = rc
                RECORDS.append(self._rec)

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        # os.wait4 in place of waitpid: the child's CPU seconds (its own and its waited-for
        # descendants') come with its exit status
        try:
            pid, sts, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            return self.pid, 0
        if pid == self.pid:
            self._rec["cpu"] = round(usage.ru_utime + usage.ru_stime, 2)
        return pid, sts

    def wait(self, timeout: float | None = None) -> int:
        rc = super().wait(timeout)
        self._ended(rc)
        return rc

    def poll(self) -> int | None:
        rc = super().poll()
        self._ended(rc)
        return rc


def main() -> int:
    out = Path(sys.argv[1])
    argv = sys.argv[sys.argv.index("--") + 1 :]
    subprocess.Popen = _Tapped  # type: ignore[misc]
    from envbuild import events

    real_set_sink = events.set_sink

    def set_sink(sink: Any) -> None:
        def tapped(event: events.Event) -> None:
            if event.level != "debug":
                with _LOCK:
                    RECORDS.append(
                        {
                            "kind": "event",
                            "level": event.level,
                            "at": _now(),
                            "message": event.message[:100],
                        }
                    )
            if sink is not None:
                sink(event)

        real_set_sink(tapped)

    events.set_sink = set_sink  # type: ignore[assignment]
    from envbuild.cli import main as cli

    RECORDS.append({"kind": "event", "level": "start", "at": _now(), "message": "cli imported"})
    try:
        rc = cli(argv)
    finally:
        RECORDS.append({"kind": "event", "level": "end", "at": _now(), "message": "cli returned"})
        out.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
        rows = sorted(RECORDS, key=lambda r: r.get("start", r.get("at", 0)))
        for r in rows:
            if r["kind"] == "proc":
                cpu = f"{r['cpu']:6.1f}c" if "cpu" in r else " " * 7
                print(
                    f"{r['start']:8.2f} {r['end']:8.2f} {r['end'] - r['start']:7.2f}s {cpu}  "
                    f"{r['argv']}",
                    file=sys.stderr,
                )
            else:
                print(
                    f"{r['at']:8.2f}                   [{r['level']}] {r['message']}",
                    file=sys.stderr,
                )
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
