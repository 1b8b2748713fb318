#!/usr/bin/env python3
"""No-op re-provision: with the import verdict cache, without it, and a bare ``import torch``.

    python bench/bench_noop.py [--rounds 5] [--root DIR] [--out results.json]

Provisions the cpu profile once into ``--root`` (default ``.cache/bench/noop``;
``ENVBUILD_TORCH_INDEX`` as for the tests), then, round by round and interleaved so a noisy
neighbour hits all alike:

- ``noop-cached``: ``envbuild provision`` on the finished environment (the verdict is reused);
- ``noop-import``: the same with the verdict file removed first (the import check runs, as
  every re-run did before the cache);
- ``bare-import``: ``<venv>/bin/python -c "import torch"`` in the same venv;
- ``cli-start``: ``envbuild --version`` (the floor any command pays).

Reports the median of each and the ratios against ``bare-import`` measured in the same run.
Nothing here is a test; the figures vary with the machine (bench/README.md).
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


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t = time.monotonic()
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {' '.join(argv)}\n{out.stderr[-2000:]}")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--root", type=Path, default=REPO / ".cache" / "bench" / "noop")
    ap.add_argument("--backend", default="uv", choices=("uv", "pip"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    # PYTHONDONTWRITEBYTECODE is dropped (some sandboxes set it): with it every `import torch`
    # compiles torch again, a baseline no user sees
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.setdefault("NO_COLOR", "1")
    root = args.root.absolute()
    provision = [
        sys.executable,
        "-m",
        "envbuild",
        "provision",
        "--profile",
        "cpu",
        "--root",
        str(root),
        "--home",
        str(root.parent / "noop-home"),
        "--backend",
        args.backend,
    ]
    print(f"provisioning (once) into {root} ...", flush=True)
    first = _timed(provision, env)
    python = root / "venv" / "bin" / "python"
    verdict = root / ".envbuild" / "import-verdict.json"
    _timed(provision, env)  # the verdict is written by a passing import: make sure it exists
    _timed([str(python), "-c", "import torch"], env)  # bytecode in place, as after any first import
    variants = {
        "noop-cached": lambda: _timed(provision, env),
        "noop-import": lambda: (verdict.unlink(missing_ok=True), _timed(provision, env))[1],
        "bare-import": lambda: _timed([str(python), "-c", "import torch"], env),
        "cli-start": lambda: _timed([sys.executable, "-m", "envbuild", "--version"], env),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(args.rounds):
        for name, fn in variants.items():
            times[name].append(fn())
        print(
            f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
            flush=True,
        )
    _timed(provision, env)  # leave the verdict in place for the next run
    med = {k: statistics.median(v) for k, v in times.items()}
    bare = med["bare-import"]
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "backend": args.backend,
        "rounds": args.rounds,
        "first_provision_s": round(first, 2),
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "ratio_to_bare_import": {k: round(v / bare, 2) for k, v in med.items()},
        "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }
    print(json.dumps(result["median_s"]), json.dumps(result["ratio_to_bare_import"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
