"""Benchmark: a relock of an unchanged spec (``envbuild lock``) and ``envbuild lock --check``.

    python bench/bench_relock.py [--profile cpu] [--repeat N] [--out results.json]

The lock is current for its spec, so nothing is resolved and nothing written: the run reads the
spec, ``lock.json`` and the step files' sha256. Timed two ways, median and worst of N:

- the library call (``lock_stack``, ``lock_status``), what a tool embedding envbuild pays;
- the whole CLI in a subprocess (``python -m envbuild lock --profile P``), interpreter start
  and imports included, what a person or CI pays.

The budget is 1 s for the CLI no-op relock (issue 24); before it, every relock re-resolved every
step (the cpu profile against PyPI: tens of seconds, see bench/README.md). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envbuild.spec import resolve_spec  # noqa: E402
from envbuild.stacklock.make import LockOptions, lock_stack, lock_status  # noqa: E402

BUDGET = 1.0


def _times(fn: object, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


def _cli(args: list[str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "envbuild", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
    )
    elapsed = time.perf_counter() - t0
    if (
        args[-1] == "--check"
        and res.returncode not in (0, 1)
        or args[-1] != "--check"
        and res.returncode != 0
    ):
        raise SystemExit(
            f"envbuild {' '.join(args)} failed ({res.returncode}):\n{res.stdout}{res.stderr}"
        )
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    spec = resolve_spec(args.profile, None)
    status = lock_status(spec)
    if not status.current:
        raise SystemExit(
            f"the {args.profile} lock is not current"
            f" ({[s.reason for s in status.steps if not s.current]}); run `envbuild lock` first:"
            " this bench times the no-op"
        )
    result = lock_stack(spec, LockOptions())
    assert not result.written, "a no-op relock wrote files"
    rows = {
        "library lock (no-op)": _times(lambda: lock_stack(spec, LockOptions()), args.repeat),
        "library lock --check": _times(lambda: lock_status(spec), args.repeat),
        "cli lock (no-op)": [_cli(["lock", "--profile", args.profile]) for _ in range(args.repeat)],
        "cli lock --check": [
            _cli(["lock", "--profile", args.profile, "--check"]) for _ in range(args.repeat)
        ],
        "cli --version (interpreter + imports)": [_cli(["--version"]) for _ in range(args.repeat)],
    }
    for name, times in rows.items():
        print(
            f"{name:40s} median {statistics.median(times) * 1000:7.1f} ms  worst"
            f" {max(times) * 1000:7.1f} ms"
        )
    cli = statistics.median(rows["cli lock (no-op)"])
    print(
        f"{'budget':40s} {BUDGET * 1000:7.0f} ms for the CLI no-op relock:"
        f" {'ok' if cli <= BUDGET else 'OVER'}"
    )
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "profile": args.profile,
                    "repeat": args.repeat,
                    "machine": platform.machine(),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "seconds": {
                        k: {"median": round(statistics.median(v), 4), "worst": round(max(v), 4)}
                        for k, v in rows.items()
                    },
                },
                indent=1,
            )
            + "\n"
        )
    return 0 if cli <= BUDGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
