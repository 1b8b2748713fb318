"""A fleet's builds with and without a shared build cache (issue 49): the wall time of N = 1, 2, 4
concurrent ``provision --lock`` runs of one lock whose sdist compiles a C++ torch extension
(``tests/packages/torch_ext``) against the real CPU torch, each "host" its own data root, venv
(a hard-linked copy of the test suite's torch venv, adopted with ``--venv``), HOME and local
build cache; with ``--build-cache DIR`` (one shared folder) and without.

    .venv/bin/python bench/bench_build_cache.py --out bench/results-build-cache-2core.json
    .venv/bin/python bench/bench_build_cache.py --fleet 1,2 --rounds 1     # quicker

The venv is ``~/.cache/envbuild-tests/torch-2.13.0-venv`` (the tests' ``torch_venv`` fixture makes
it: ``pytest tests/test_smoke.py -k json``) or ``--torch-venv DIR``. The lock is made here by real
``uv lock`` against a local HTTP server holding the sdist. Variants alternate within a round, on
fresh folders; every compile appends a line to a counter file, so the table says how many ran.

On one machine the N "hosts" share its cores, so the fleet's cost is its CPU time (each
provision's and its children's: the compile, the installers), besides the wall time from the
first start to the last end; on a real fleet each host has its own cores and the wall time of
each host is what the CPU time of one is here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.cachedir import TEST_CACHE  # noqa: E402 - after the path above
from support.fixtures import copy_venv, installer_env  # noqa: E402
from support.gatelocks import uv_bin  # noqa: E402
from support.index import StaticServer  # noqa: E402
from support.torchext import pyproject, torch_ext_sdist  # noqa: E402


def make_lock(work: Path, url: str, sdist: Path) -> Path:
    project = work / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(pyproject(f"{url}/{sdist.name}", None))
    env = {k: v for k, v in installer_env(work / "lock-home").items() if k != "UV_NO_CONFIG"}
    subprocess.run([uv_bin(), "lock", "--no-cache"], cwd=project, env=env, check=True)
    return project / "uv.lock"


def fleet(
    work: Path, lock: Path, torch_venv: Path, n: int, shared: Path | None
) -> dict[str, object]:
    """N provisions at once; the wall time from the first start to the last end."""
    counter = work / "compiles.log"
    procs = []
    for i in range(n):
        host = work / f"host{i}"
        venv = copy_venv(torch_venv, host / "venv")
        env = installer_env(host / "home", {"TORCH_EXT_BUILDS": str(counter)})
        argv = [sys.executable, "-m", "envbuild", "provision", "--lock", str(lock)]
        argv += ["--venv", str(venv), "--root", str(host / "root")]
        argv += ["--build-cache", str(shared)] if shared is not None else []
        log = (host / "provision.log").open("wb")
        procs.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    t0 = time.perf_counter()
    codes = []
    cpu = 0.0
    for proc, log in procs:
        # the provision's own CPU and its waited-for children's (the compile, the installers)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        codes.append(proc.returncode)
        cpu += usage.ru_utime + usage.ru_stime
        log.close()
    seconds = time.perf_counter() - t0
    if any(codes):
        for i in range(n):
            print((work / f"host{i}" / "provision.log").read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"a provision failed: {codes}")
    compiles = len(counter.read_text().splitlines()) if counter.exists() else 0
    return {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "compiles": compiles}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", default="1,2,4", help="the fleet sizes (default 1,2,4)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--torch-venv", type=Path, default=TEST_CACHE / "torch-2.13.0-venv")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sizes = [int(x) for x in args.fleet.split(",")]
    if not (args.torch_venv / "bin" / "python").exists():
        raise SystemExit(f"no torch venv at {args.torch_venv} (see the docstring)")
    runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="bench-build-cache-") as tmp:
        base = Path(tmp)
        sdist = torch_ext_sdist(base / "files")
        with StaticServer(base / "files") as srv:
            lock = make_lock(base, srv.url, sdist)
            for r in range(args.rounds):
                for n in sizes:
                    for variant in ("none", "shared"):
                        work = base / f"r{r}-n{n}-{variant}"
                        work.mkdir()
                        shared = work / "shared" if variant == "shared" else None
                        got = fleet(work, lock, args.torch_venv, n, shared)
                        row = {"round": r, "hosts": n, "cache": variant, **got}
                        print(json.dumps(row), flush=True)
                        runs.append(row)
                        shutil.rmtree(work, ignore_errors=True)
    table = summarize(runs, sizes)
    print(table)
    if args.out:
        doc = {
            "machine": f"{platform.node()}: {os.cpu_count()} cores",
            "load_at_end": os.getloadavg(),
            "runs": runs,
        }
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def summarize(runs: list[dict[str, object]], sizes: list[int]) -> str:
    """Best of the rounds per (hosts, cache), and the fleet's time against one host's build."""

    def best(n: int, cache: str) -> dict[str, object]:
        rows = [r for r in runs if r["hosts"] == n and r["cache"] == cache]
        return min(rows, key=lambda r: float(str(r["seconds"])))

    one = float(str(best(1, "none")["seconds"])) if 1 in sizes else None
    lines = [
        "| hosts | compiles: none / shared | wall: none / shared | CPU: none / shared |"
        " CPU: shared / none |"
    ]
    lines.append("| --- | --- | --- | --- | --- |")
    for n in sizes:
        a, b = best(n, "none"), best(n, "shared")
        sa, sb = float(str(a["seconds"])), float(str(b["seconds"]))
        ca, cb = float(str(a["cpu_seconds"])), float(str(b["cpu_seconds"]))
        lines.append(
            f"| {n} | {a['compiles']} / {b['compiles']} | {sa:.1f} s / {sb:.1f} s |"
            f" {ca:.1f} s / {cb:.1f} s | {cb / ca:.2f}x |"
        )
    if one:
        lines.append(f"\none host, no cache: {one:.1f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
