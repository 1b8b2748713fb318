"""Watch the distributed step's ranks while it runs: who stopped answering, and where.

Every worker rewrites ``<folder>/rank-<R>.json`` each second from a thread (``worker.Heartbeat``):
its pid, the phase it is in, the last collective it entered and whether that returned. The
thread keeps beating while the rank waits inside a collective, so a rank whose file goes stale
is one that stopped (SIGSTOP, a debugger), was killed, or is wedged holding the interpreter.

``Watchdog`` reads the files during the run. When a rank has been silent for ``stall_after``
seconds it keeps that picture, ends the local workers (by pid, only processes running this
run's worker script) and sets ``cancel`` so the runner stops torchrun: a hung collective ends
in about ``stall_after`` seconds instead of at the run's whole timeout. At the deadline it keeps
the last picture taken before the stop. ``describe_hang`` turns a picture into one paragraph.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SILENT_AFTER", "Beat", "Watchdog", "describe_hang", "end_workers", "read_beats"]

SILENT_AFTER = 5.0  # seconds without a heartbeat after which a rank counts as not answering


@dataclass(frozen=True)
class Beat:
    rank: int
    pid: int
    host: str
    phase: str
    op: str | None
    op_seq: int
    in_op: bool
    age: float  # seconds since the rank last wrote its file

    @property
    def collective(self) -> str:
        if not self.op:
            return "no collective yet"
        return f"{self.op} #{self.op_seq}" + (" (still inside it)" if self.in_op else " (returned)")


def read_beats(folder: Path, now: float | None = None) -> list[Beat]:
    """The ranks' last heartbeats, by rank; unreadable or half-written files are skipped."""
    now = time.time() if now is None else now
    beats = []
    for path in sorted(folder.glob("rank-*.json")):
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            beats.append(
                Beat(
                    rank=int(d["rank"]),
                    pid=int(d["pid"]),
                    host=str(d.get("host", "")),
                    phase=str(d.get("phase", "")),
                    op=d.get("op"),
                    op_seq=int(d.get("op_seq", 0)),
                    in_op=bool(d.get("in_op")),
                    age=max(0.0, now - float(d["time"])),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(beats, key=lambda b: b.rank)


def _is_our_worker(pid: int, marker: str) -> bool:
    """Only a process whose command line names this run's worker and its result file."""
    try:
        cmdline = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return False
    return marker in cmdline and "worker.py" in cmdline


def end_workers(beats: list[Beat], marker: str) -> list[int]:
    """SIGKILL the local workers still alive (a stopped one ignores SIGTERM until it is continued,
    and torchrun gives up on its children before it kills them all). Returns the pids ended."""
    ended = []
    for b in beats:
        if _is_our_worker(b.pid, marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(b.pid, signal.SIGKILL)
                ended.append(b.pid)
    return ended


class Watchdog(threading.Thread):
    """Reads the heartbeats every ``interval`` s until ``stop()``, the deadline, or a stall."""

    def __init__(
        self,
        folder: Path,
        *,
        marker: str,
        stall_after: float,
        deadline: float,
        cancel: threading.Event,
        interval: float = 0.5,
    ) -> None:
        super().__init__(daemon=True, name="envbuild-dist-watchdog")
        self.folder, self.marker, self.stall_after, self.deadline = (
            folder,
            marker,
            stall_after,
            deadline,
        )
        self.cancel, self.interval = cancel, interval
        self.picture: list[Beat] = []  # the last heartbeats read before the run was stopped
        self.stalled: list[Beat] = []  # set when the watchdog itself stopped the run
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        while not self._halt.is_set():
            beats = read_beats(self.folder)
            if time.monotonic() >= self.deadline - self.interval:
                if beats:
                    self.picture = beats
                return  # the runner stops the run now: keep the picture from before the stop
            self.picture = beats or self.picture
            silent = [b for b in beats if b.age > self.stall_after]
            if silent:
                self.stalled = silent
                end_workers(beats, self.marker)
                self.cancel.set()
                return
            self._halt.wait(self.interval)


def describe_hang(
    picture: list[Beat], *, seconds: float, why: str, expected_ranks: int | None
) -> str:
    """One paragraph: which ranks stopped answering, their last phase and collective, what the
    others were waiting in."""
    if not picture:
        return (
            f"The distributed step {why} ({seconds:.0f} s into the run) and no rank ever sent a"
            " heartbeat: it hung before the workers started their work (the rendezvous, or"
            " process-group initialisation)."
        )
    silent = [b for b in picture if b.age > SILENT_AFTER]
    alive = [b for b in picture if b.age <= SILENT_AFTER]
    seen = {b.rank for b in picture}
    parts = [f"The distributed step {why} ({seconds:.0f} s into the run)."]
    if silent:
        parts.append(
            "Stopped answering: "
            + "; ".join(
                f"rank {b.rank} (pid {b.pid} on {b.host}: no heartbeat for {b.age:.0f} s, in"
                f" '{b.phase}', last collective {b.collective})"
                for b in silent
            )
            + "."
        )
    else:
        parts.append(
            "Every rank was still answering (a collective that never completes on all of them, "
            "or a step slower than the timeout)."
        )
    if expected_ranks is not None and len(seen) < expected_ranks:
        missing = sorted(set(range(expected_ranks)) - seen)
        if missing:
            parts.append(f"Never reported: rank(s) {', '.join(map(str, missing))}.")
    if alive:
        parts.append(
            "Waiting: "
            + "; ".join(
                f"rank {b.rank} in '{b.phase}', last collective {b.collective}" for b in alive
            )
            + "."
        )
    return " ".join(parts)
