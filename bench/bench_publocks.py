#!/usr/bin/env python3
"""``provision --lock`` against ``uv sync --frozen`` on public ML locks whose torch comes from PyPI.

    python bench/bench_publocks.py [--locks zonos nanochat cosmos-reason2] [--rounds 1] [--out results.json]

The locks are the ones committed under ``tests/data/publocks/`` (each folder's ``SOURCE.txt`` names
the repository and commit), copied to a scratch folder; both tools install the locker's default
selection for the lock's own Python (``.python-version``), with ``--no-install-workspace`` (the
projects' own sources are not here), from the real indexes (PyPI: several GB of CUDA wheels per
cold install). Per lock and round, in alternating order:

- ``cold``: empty caches: ``uv sync --frozen`` with a new ``UV_CACHE_DIR`` into a new venv, and
  ``envbuild provision --lock`` into a new data root (its uv cache is under the root);
- ``warm``: caches filled by the cold run: a new venv (uv) / a new venv and manifest in the same
  data root (envbuild).

Each pair is checked, not only timed: the two environments hold the same distributions at the same
versions (``pip list``), envbuild's first step is torch, and its guard ran after every stage (the
manifest records each). envbuild does more than the sync (the guard, the final ``import torch``,
the receipt): the ratios say what that costs. Nothing here is a test (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCKS = REPO / "tests" / "data" / "publocks"
sys.path.insert(0, str(REPO))


def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    t = time.monotonic()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - t
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {' '.join(argv)}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return seconds, out.stdout + out.stderr


def _pip_list(venv: Path) -> list[tuple[str, str]]:
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv), "list", "--format", "json"],
                         capture_output=True, text=True, check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    return sorted((d["name"].lower(), d["version"]) for d in json.loads(out.stdout))


def _source(name: str) -> str:
    lines = dict(ln.split(": ", 1) for ln in (LOCKS / name / "SOURCE.txt").read_text().splitlines() if ": " in ln)
    return f"{lines['repo']} {lines['commit'][:7]}"


def bench_lock(name: str, rounds: int, work: Path, env: dict[str, str]) -> dict[str, object]:
    from envbuild.installer.python import find_interpreter

    project = work / name / "project"
    shutil.copytree(LOCKS / name, project)
    python = (project / ".python-version").read_text().split()[0]
    exe = str(find_interpreter(".".join(python.split(".")[:2]), require_fit=False).executable)
    lock = project / "uv.lock"
    n = [0]

    def fresh(prefix: str) -> Path:
        n[0] += 1
        return work / name / f"{prefix}-{n[0]}"

    def uv_sync(cache: Path, case: str) -> tuple[float, Path]:
        venv = fresh("uv-venv")
        e = {**env, "UV_PROJECT_ENVIRONMENT": str(venv), "UV_CACHE_DIR": str(cache)}
        seconds = _run([_uv(), "sync", "--frozen", "--no-install-workspace", "--python", exe], e, cwd=project)[0]
        # envbuild's provision ends with torch imported (which compiles its bytecode in a new venv):
        # uv's side with its venv's first `import torch` is the like-for-like figure
        times[f"{case}-uv-import"].append(_run([str(venv / "bin" / "python"), "-c", "import torch"], env)[0])
        return seconds, venv

    def provision(root: Path) -> tuple[float, Path]:
        seconds, output = _run([sys.executable, "-m", "envbuild", "provision", "--lock", str(lock), "--root", str(root),
                                "--python", exe, "--no-install-workspace"], env)
        steps = [ln for ln in output.splitlines() if "step 1/" in ln]
        assert steps and " torch: " in steps[0], f"{name}: envbuild's first step is not torch: {steps[:1]}"
        manifest = json.loads((root / ".envbuild" / "manifest.json").read_text())
        unguarded = [s["name"] for s in manifest["steps"] if s.get("status") == "ok" and s.get("guard_seconds") is None]
        assert not unguarded, f"{name}: no guard recorded after {unguarded}"
        return seconds, root / "venv"

    def forget_venv(root: Path) -> None:  # a new venv and manifest; the root's caches stay
        shutil.rmtree(root / "venv", ignore_errors=True)
        shutil.rmtree(root / ".envbuild", ignore_errors=True)

    times: dict[str, list[float]] = {k: [] for k in ("cold-uv", "cold-uv-import", "cold-envbuild", "warm-uv",
                                                       "warm-uv-import", "warm-envbuild")}
    packages = 0
    same: list[bool] = []
    for r in range(rounds):
        uv_cache, root = fresh("uv-cache"), fresh("root")
        runs = [("cold-uv", lambda c=uv_cache: uv_sync(c, "cold")), ("cold-envbuild", lambda r=root: provision(r))]
        for key, fn in runs if r % 2 == 0 else runs[::-1]:
            seconds, venv = fn()
            times[key].append(seconds)
            (work / name / key).unlink(missing_ok=True)
            (work / name / key).symlink_to(venv)
        ours = _pip_list(work / name / "cold-envbuild")
        packages = len(ours)
        same.append(_pip_list(work / name / "cold-uv") == ours)
        warm = [("warm-uv", lambda c=uv_cache: uv_sync(c, "warm")),
                ("warm-envbuild", lambda r=root: (forget_venv(r), provision(r))[1])]
        for key, fn in warm if r % 2 == 0 else warm[::-1]:
            times[key].append(fn()[0])
        print(f"{name} round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()) +
              f"; same distributions: {same[-1]}", flush=True)
        for p in (uv_cache, root):
            shutil.rmtree(p, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"lock": _source(name), "python": python, "packages": packages, "same_distributions": all(same),
            "median_s": {k: round(v, 2) for k, v in med.items()},
            "ratios": {"cold": round(med["cold-envbuild"] / med["cold-uv"], 2),
                       "warm": round(med["warm-envbuild"] / med["warm-uv"], 2),
                       "cold_with_import": round(med["cold-envbuild"] / (med["cold-uv"] + med["cold-uv-import"]), 2),
                       "warm_with_import": round(med["warm-envbuild"] / (med["warm-uv"] + med["warm-uv-import"]), 2)},
            "all_s": {k: [round(x, 2) for x in v] for k, v in times.items()}}


def _uv() -> str:
    from envbuild.installer.python import find_uv

    return find_uv() or "uv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # zonos bc40d98 does not install here: its sudachidict-full sdist downloads its dictionary from a host
    # this machine cannot reach at build time (uv sync fails the same way)
    ap.add_argument("--locks", nargs="+", default=["nanochat", "cosmos-reason2"])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "UV_")) and k not in ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")}
    env.update({"NO_COLOR": "1", "PIP_CONFIG_FILE": os.devnull})
    work = Path(tempfile.mkdtemp(prefix="bench-publocks-"))
    results = {}
    try:
        for name in args.locks:
            results[name] = bench_lock(name, args.rounds, work, env)
            shutil.rmtree(work / name, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'lock':<38}{'pkgs':>5}{'same':>5}  {'case':<5}{'uv sync':>8}{'+import':>9}{'envbuild':>9}"
          f"{'/ uv':>7}{'/ uv+imp':>9}")
    for r in results.values():
        m, q = r["median_s"], r["ratios"]  # type: ignore[index]
        for case in ("cold", "warm"):
            head = (f"{r['lock']:<38}{r['packages']!s:>5}{'yes' if r['same_distributions'] else 'NO':>5}" if case == "cold"
                    else " " * 48)
            print(f"{head}  {case:<5}{m[f'{case}-uv']:>7.1f}s{m[f'{case}-uv-import']:>8.1f}s"
                  f"{m[f'{case}-envbuild']:>8.1f}s{q[case]:>6.2f}x{q[f'{case}_with_import']:>8.2f}x")
    if args.out:
        args.out.write_text(json.dumps({"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                                    "platform": platform.platform()},
                                        "rounds": args.rounds, "locks": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
