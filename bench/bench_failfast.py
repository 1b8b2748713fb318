#!/usr/bin/env python3
"""Time to failure: ``provision --lock`` against ``uv sync --frozen`` on planted failures, and what
each leaves of the venv.

    python bench/bench_failfast.py [--rounds 3] [--kinds sdist,git,overlap-torch] [--trace]

The projects are ``tests/support/planted.py``'s: a real ``uv lock`` of torch (the gate's stand-in
index, over HTTP) plus one planted failure: ``sdist`` (a build that fails), ``git`` (a git host on
a closed port), ``overlap-torch`` (a wheel that installs a file of torch's: uv installs it, envbuild
refuses it); ``healthy`` is the same project with nothing planted, for the time of a whole install.
Per kind and round, cold (a new uv cache, a new venv / data root), in alternating order:

- ``uv sync --frozen`` into a new venv (``UV_PROJECT_ENVIRONMENT``);
- ``envbuild provision --lock`` into a new data root.

Printed: the median seconds of each, the ratio envbuild / uv, and what each left: ``no venv``, an
empty venv, or the number of distributions installed. ``--trace`` prints envbuild's output of the
last round with the seconds since its start, to see where the time goes. ``--envbuild-src DIR``
runs envbuild from another checkout (``PYTHONPATH``: the code before a change, for a before/after
table). Nothing here is a test (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.fixtures import installer_env  # noqa: E402 (after the path above)
from support.gatelocks import REPOS, GateIndex, build_gate_wheels, uv_bin  # noqa: E402
from support.index import IndexServer  # noqa: E402
from support.planted import KINDS, planted_project  # noqa: E402


def _left(venv: Path) -> str:
    """What a venv holds: ``no venv``, ``empty``, or ``N dists``."""
    site = sorted(venv.glob("lib/python3*/site-packages"))
    if not venv.exists():
        return "no venv"
    infos = list(site[0].glob("*.dist-info")) if site else []
    return f"{len(infos)} dists" if infos else "empty venv"


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str]:
    """Seconds, exit status, and the output with each line's seconds since the start."""
    t0 = time.monotonic()
    lines = []
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(f"{time.monotonic() - t0:7.2f}  {line.rstrip()[:160]}")
    rc = proc.wait()
    return time.monotonic() - t0, rc, "\n".join(lines)


def _one(
    kind: str, tmp: Path, idx: GateIndex, rounds: int, trace: bool, src: Path | None
) -> dict[str, object]:
    uv_s: list[float] = []
    eb_s: list[float] = []
    prep_s: list[float] = []  # envbuild: from "preparing" to the end
    left: dict[str, str] = {}
    rcs: dict[str, int] = {}
    with planted_project(tmp, idx, kind) as project:
        env = installer_env(tmp / "home")
        env.pop("UV_NO_CONFIG")
        for r in range(rounds):
            work = tmp / f"{kind}-{r}"
            work.mkdir()
            order = ("uv", "envbuild") if r % 2 == 0 else ("envbuild", "uv")
            for who in order:
                if who == "uv":
                    venv = work / "uv-venv"
                    uv_env = {
                        **env,
                        "UV_PROJECT_ENVIRONMENT": str(venv),
                        "UV_CACHE_DIR": str(work / "uv-cache"),
                    }
                    s, rcs["uv"], _ = _timed([uv_bin(), "sync", "--frozen"], uv_env, project.folder)
                    uv_s.append(s)
                    left["uv"] = _left(venv)
                else:
                    root = work / "data"
                    argv = [sys.executable, "-m", "envbuild", "provision", "--lock"]
                    argv += [str(project.lock), "--root", str(root)]
                    eb_env = {**env, "PYTHONPATH": str(src)} if src is not None else env
                    s, rcs["envbuild"], out = _timed(argv, eb_env, work)
                    eb_s.append(s)
                    began = next(
                        (float(ln.split()[0]) for ln in out.splitlines() if "  preparing " in ln),
                        None,
                    )
                    if began is not None:
                        prep_s.append(s - began)
                    left["envbuild"] = _left(root / "venv")
            shutil.rmtree(work, ignore_errors=True)
        if trace:
            print(f"--- envbuild, {kind}, last round:\n{out}\n")
    uv_m, eb_m = statistics.median(uv_s), statistics.median(eb_s)
    return {
        "kind": kind,
        "uv_seconds": round(uv_m, 2),
        "envbuild_seconds": round(eb_m, 2),
        "ratio": round(eb_m / uv_m, 2) if uv_m else None,
        # from envbuild's "preparing" line to its exit (its own start-up, the lock read, uv export
        # and the gate come before)
        "envbuild_from_prepare": round(statistics.median(prep_s), 2) if prep_s else None,
        "uv_exit": rcs["uv"],
        "envbuild_exit": rcs["envbuild"],
        "uv_left": left["uv"],
        "envbuild_left": left["envbuild"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="sdist,git,overlap-torch,healthy")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--envbuild-src", type=Path, help="run envbuild from this checkout")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-failfast-") as t:
        tmp = Path(t)
        root = build_gate_wheels(tmp / "gate")
        with IndexServer({repo: root / repo for repo in REPOS}) as server:
            idx = GateIndex(server=server, root=root)
            for kind in kinds:
                rows.append(_one(kind, tmp, idx, args.rounds, args.trace, args.envbuild_src))
    print(
        f"{'planted':<14} {'uv sync':>8} {'envbuild':>9} {'ratio':>6} {'prepare->end':>13}"
        f"  {'uv left':<22} envbuild left"
    )
    for r in rows:
        prep = f"{r['envbuild_from_prepare']}s" if r["envbuild_from_prepare"] is not None else "-"
        uv_left = f"{r['uv_left']} (exit {r['uv_exit']})"
        print(
            f"{r['kind']:<14} {r['uv_seconds']:>7}s {r['envbuild_seconds']:>8}s {r['ratio']:>6}"
            f" {prep:>13}  {uv_left:<22} {r['envbuild_left']} (exit {r['envbuild_exit']})"
        )
    if args.out:
        doc = {
            "rounds": args.rounds,
            "cpus": os.cpu_count(),
            "envbuild": str(args.envbuild_src or REPO),
            "rows": rows,
        }
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
