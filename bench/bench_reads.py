#!/usr/bin/env python3
"""How often the envbuild process itself opens the lock and each ``pyproject.toml``, under strace.

    python bench/bench_reads.py [LOCK]   (default: lockfiles/examples/vision/uv.lock)

Runs ``envbuild plan --lock LOCK --environment linux-x86_64`` and ``envbuild check-lock LOCK``
under ``strace -f`` (openat, execve and the clones), and counts the successful opens of files
named ``uv.lock`` or ``pyproject.toml`` by the envbuild process and its threads only: a child that
executes another program (``uv export``, ``uv --version``), with every thread it starts, is left
out, since what uv reads is uv's. Prints one line per command; exits 1 when a file was opened more
than once. Nothing here is a test (bench/README.md); it needs ``strace`` on PATH.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMES = ("uv.lock", "pyproject.toml")
_CLONE = re.compile(r"(\d+)\s+(?:clone3?|vfork|fork)\(.*= (\d+)$")
_EXEC = re.compile(r'(\d+)\s+execve\("([^"]+)".*= 0$')
_OPEN = re.compile(r'(\d+)\s+openat\(AT_FDCWD, "([^"]+)"')


def opens(trace: str) -> collections.Counter[str]:
    """{path: opens} of NAMES by the traced root process and its own threads."""
    lines = trace.splitlines()
    parent: dict[str, str] = {}
    executed: set[str] = set()
    for line in lines:
        if m := _CLONE.match(line):
            parent[m[2]] = m[1]
        if m := _EXEC.match(line):
            executed.add(m[1])
    root = re.match(r"(\d+)", lines[0])
    assert root is not None

    def owner(pid: str) -> str:
        while pid not in executed and pid in parent:
            pid = parent[pid]
        return pid

    got: collections.Counter[str] = collections.Counter()
    for line in lines:
        m = _OPEN.match(line)
        if m and "ENOENT" not in line and owner(m[1]) == root[1] and m[2].endswith(NAMES):
            got[str(Path(m[2]).resolve())] += 1
    return got


def main() -> int:
    if shutil.which("strace") is None:
        print("strace is not on PATH", file=sys.stderr)
        return 2
    lock = sys.argv[1] if len(sys.argv) > 1 else "lockfiles/examples/vision/uv.lock"
    envbuild = [sys.executable, "-m", "envbuild"]
    commands = {
        "plan --lock": [*envbuild, "plan", "--lock", lock, "--environment", "linux-x86_64"],
        "check-lock": [*envbuild, "check-lock", lock],
    }
    worst = 0
    for what, argv in commands.items():
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
            subprocess.run(
                ["strace", "-f", "-qq", "-o", out.name, "-e",
                 "trace=openat,execve,clone,clone3,fork,vfork", *argv],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
            )  # fmt: skip
            got = opens(Path(out.name).read_text())
        worst = max([worst, *got.values()])
        shown = ", ".join(f"{Path(p).relative_to(REPO) if p.startswith(str(REPO)) else p} x{n}"
                          for p, n in sorted(got.items()))  # fmt: skip
        print(f"{what:12} {shown or 'nothing opened'}")
    return 0 if worst == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
