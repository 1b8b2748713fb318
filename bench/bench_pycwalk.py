#!/usr/bin/env python3
"""A first ``import torch`` with and without ``provision/pycwalk.py`` beside or before it.

    python bench/bench_pycwalk.py [--python PY] [--cpus 0,1] [--rounds 3] [--out results.json]

Runs on a venv that already has torch (``--python``, default ``python3``: on the GPU machine the
image's venv, torch 2.11.0+cu130), pinned to ``--cpus`` (default: two cores, as the 2-core CI
host). Every case starts with the bytecode of the whole site-packages deleted (a fresh venv made
by uv has none) and the page cache warm (right after an install it is). Cases, rotated each round:

- ``cold``: ``import torch`` alone, as the first import after ``uv sync``;
- ``reverse``: the same, with ``pycwalk.py --reverse --nice 10`` started beside it (the final
  import check of ``provision``): the two meet in the middle;
- ``walked``: after ``pycwalk.py`` has compiled everything it finds (what the warm-up does while
  the later stages download, when it has the time): the import's own remaining cost;
- ``warm``: every ``.pyc`` the import itself wrote (a second import).

Also the walk's own seconds (CPU), and how many files the import wrote after it (its misses).
Prints a table; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

VERSIONS = "import sys, torch; print(sys.version.split()[0], torch.__version__)"
WALK = Path(__file__).resolve().parents[1] / "envbuild" / "provision" / "pycwalk.py"


def _site(python: str) -> Path:
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _clean(site: Path) -> None:
    for folder in site.rglob("__pycache__"):
        shutil.rmtree(folder, ignore_errors=True)


def _pycs(site: Path) -> set[tuple[int, str]]:
    return {(p.stat().st_ino, str(p)) for p in site.rglob("*.pyc")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="python3")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    python = shutil.which(a.python) or a.python
    site = _site(python)
    cpus = {int(c) for c in a.cpus.split(",")}
    os.sched_setaffinity(0, cpus)  # children inherit it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    importer = [python, "-W", "ignore", "-c", "import torch"]
    walker = [python, "-S", str(WALK), str(site), "torch"]
    times: dict[str, list[float]] = {"cold": [], "reverse": [], "walked": [], "warm": []}
    walk_cpu: list[float] = []
    misses: list[int] = []
    cases = list(times)
    for r in range(a.rounds):
        for case in cases[r % len(cases) :] + cases[: r % len(cases)]:
            _clean(site)
            if case == "warm":
                subprocess.run(importer, env=env, check=True)
            if case == "walked":
                before = os.times()
                subprocess.run(walker, env=env, check=True, stdout=subprocess.DEVNULL)
                after = os.times()
                walk_cpu.append(
                    after.children_user
                    - before.children_user
                    + after.children_system
                    - before.children_system
                )
                had = _pycs(site)
            side = None
            t0 = time.monotonic()
            if case == "reverse":
                side = subprocess.Popen(
                    [*walker, "--reverse", "--nice", "10"], env=env, stdout=subprocess.DEVNULL
                )
            subprocess.run(importer, env=env, check=True)
            times[case].append(time.monotonic() - t0)
            if side is not None:
                side.terminate()
                side.wait()
            if case == "walked":
                misses.append(len(_pycs(site) - had))
    _clean(site)
    med = {k: round(statistics.median(v), 2) for k, v in times.items()}
    print(f"site {site}, cpus {sorted(cpus)}, {a.rounds} rounds (median s)")
    print("| case | import s | of cold |")
    print("|---|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v} | {v / med['cold']:.2f}x |")
    print(f"walk alone: {statistics.median(walk_cpu):.2f} CPU s; import wrote {misses} after it")
    if a.out:
        Path(a.out).write_text(
            json.dumps(
                {
                    "site": str(site),
                    "cpus": sorted(cpus),
                    "python": subprocess.run(
                        [python, "-c", VERSIONS],
                        capture_output=True,
                        text=True,
                        env=env,
                    ).stdout.strip(),
                    "all_s": times,
                    "median_s": med,
                    "walk_cpu_s": walk_cpu,
                    "import_wrote_after_walk": misses,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
