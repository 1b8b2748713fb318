#!/usr/bin/env python3
"""`make demo` again: the first run on a new data root against the runs after it, phase by phase.

    python bench/bench_rerun.py [--rounds 3] [--root DIR] [--compare DIR] [--out results.json]
                                [--bytecode-flag keep|drop] [--probe-reps 3]

Runs what `make demo` runs (``envbuild provision``, ``smoke`` and ``dist-step --nproc 2`` on the
cpu profile) into a new data root (default: a temporary folder, removed at the end), once cold and
then ``--rounds`` times again, and splits each command's seconds into phases from the timelines
smoke and dist-step record (``payload.timing`` of smoke, ``ranks[].timeline`` of dist-step):

- smoke: envbuild itself (start, provenance, receipt, output); the interpreter and ``import
  torch``; the torch.compile check (dynamo and inductor imports, the compile or the cache load);
  the other checks; the checks process's exit;
- dist-step: envbuild itself; the torchrun agent (its interpreter and ``import torch``, the
  rendezvous, the workers' start); the workers' imports; gloo's init; the single-process
  reference; mesh and sharding; the first step and the four after it; parity, the DCP round trip
  and the all-reduce probe; the end (result, the workers' and torchrun's exit).

Wall seconds beside CPU seconds (the checks' and rank 0's own process for a phase; user+sys of
the command and everything it started for a command), and the load average before each command:
on a shared machine the CPU seconds are the steadier figure. ``--compare DIR`` runs the envbuild
of another source tree too (``git archive REV | tar -x -C DIR``), on a data root of its own, its
runs interleaved with this tree's so a noisy neighbour hits both alike. Then a few probes of one
process in the venv (``import torch`` with and without bytecode, the interpreter's teardown,
torchrun with no-op workers). ``--bytecode-flag drop`` runs without ``PYTHONDONTWRITEBYTECODE``
(some sandboxes set it; ``keep``, the default, runs with the environment as it is). Nothing here
is a test; the figures vary with the machine (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
Phase = tuple[str, float, float | None]  # name, wall seconds, CPU seconds (None: not measured)


def run_command(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> dict[str, Any]:
    """One command: wall and CPU seconds (its whole process tree), load before, its JSON."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.time()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=cwd)
    end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(
            f"failed ({out.returncode}):"
            f" {' '.join(argv)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    doc = json.loads(out.stdout) if "--json" in argv else {}
    return {"begin": begin, "end": end, "wall": end - begin, "cpu": cpu, "load": load, "doc": doc}


def _spans(
    timeline: list[list[Any]], end: tuple[float, float | None]
) -> dict[str, tuple[float, float | None]]:
    """Each phase's wall and CPU seconds: from its entry to the next (the last one to ``end``)."""
    spans: dict[str, tuple[float, float | None]] = {}
    rows = [(str(n), float(t), float(c)) for n, t, c in timeline]
    for (name, t, c), nxt in zip(rows, [*rows[1:], ("", end[0], end[1])], strict=True):
        cpu = None if nxt[2] is None else nxt[2] - c
        spans[name] = (nxt[1] - t, cpu)
    return spans


def smoke_phases(res: dict[str, Any]) -> list[Phase]:
    pay = res["doc"]
    if "timing" not in pay:
        return []  # an envbuild that records no timeline (--compare with an older one)
    timing = pay["timing"]
    launched, timeline = timing["launched_at"], timing["timeline"]
    ended = launched + pay["seconds"]  # the checks process has exited and its result is read
    result_at = timeline[-1][1]
    spans = _spans(timeline[:-1], (result_at, timeline[-1][2]))
    compile_wall, compile_cpu = spans.pop("torch.compile", (0.0, 0.0))
    # to main(): python, import torch (the "start" row; the second one in an older envbuild)
    start = next((row for row in timeline if row[0] == "start"), timeline[1])
    imports = (start[1] - launched, start[2])
    spans.pop("python", None)
    spans.pop("imports", None)
    other_wall = sum(w for w, _ in spans.values())
    other_cpu = sum(c or 0.0 for _, c in spans.values())
    return [
        (
            "smoke: envbuild (start, provenance, receipt, output)",
            (launched - res["begin"]) + (res["end"] - ended),
            None,
        ),
        ("smoke: python + import torch", imports[0], imports[1]),
        (
            "smoke: torch.compile (dynamo/inductor import, compile or cache)",
            compile_wall,
            compile_cpu,
        ),
        ("smoke: the other checks", other_wall, other_cpu),
        ("smoke: checks process exit", ended - result_at, None),
    ]


def dist_phases(res: dict[str, Any]) -> list[Phase]:
    pay = res["doc"]
    if "torchrun_launched_at" not in pay:
        return []
    launched = pay["torchrun_launched_at"]
    ended = launched + pay["torchrun_seconds"]
    rank0 = next(r for r in pay["ranks"] if r["rank"] == 0)
    timeline = rank0["timeline"]
    first_start = min(r["timeline"][0][1] for r in pay["ranks"])
    spans = _spans(timeline, (ended, None))
    steps = [k for k in spans if k.startswith("step ")]

    def total(names: list[str]) -> tuple[float, float | None]:
        cpus = [spans[n][1] for n in names if n in spans]
        return (
            sum(spans[n][0] for n in names if n in spans),
            None if any(c is None for c in cpus) else sum(c or 0.0 for c in cpus),
        )

    later = total(
        ["parity and routing", "checkpoint (DCP save, perturb, load)", "all-reduce bandwidth probe"]
    )
    return [
        (
            "dist-step: envbuild (start, provenance, receipt, output)",
            (launched - res["begin"]) + (res["end"] - ended),
            None,
        ),
        (
            "dist-step: torchrun agent (python, import torch, rendezvous, start)",
            first_start - launched,
            None,
        ),
        (
            "dist-step: worker python + imports (torch, torch.distributed)",
            *total(["imports", "start"]),
        ),
        ("dist-step: gloo init_process_group", *total(["init_process_group"])),
        ("dist-step: reference, 5 steps in one process", *total(["reference (single process)"])),
        ("dist-step: device mesh and sharding", *total(["device mesh and sharding"])),
        ("dist-step: first sharded step", *total(steps[:1])),
        ("dist-step: the other sharded steps", *total(steps[1:])),
        ("dist-step: parity, DCP round trip, all-reduce probe", *later),
        ("dist-step: gather, exit of workers and torchrun", *total(["gather results"])),
    ]


NOOP_RANK = "import os\nprint('rank', os.environ['RANK'])\n"
AGENT = REPO / "envbuild" / "proof" / "diststep" / "agent.py"


def probes(
    python: Path, env: dict[str, str], scratch: Path, reps: int
) -> dict[str, dict[str, float]]:
    """What one process of the venv costs, median of ``reps``: the interpreter; ``import torch``
    with its bytecode, without it (an empty PYTHONPYCACHEPREFIX and -B: compiled from source,
    nothing written, as under PYTHONDONTWRITEBYTECODE in a venv uv made) and with the
    interpreter's teardown; torchrun's imports; torchrun (agent.py) with two workers that only
    print, against the stock ``python -m torch.distributed.run``."""
    rank = scratch / "noop_rank.py"
    rank.write_text(NOOP_RANK, encoding="utf-8")
    empty = scratch / "no-pycache"
    empty.mkdir(exist_ok=True)
    torchrun = [
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "0",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        str(rank),
    ]
    quiet = {**env, "OMP_NUM_THREADS": "1"}
    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([str(python), "-c", "pass"], env),
        "import torch (bytecode), no teardown": (
            [str(python), "-c", "import os, torch; os._exit(0)"],
            env,
        ),
        "import torch (no bytecode), no teardown": (
            [str(python), "-B", "-c", "import os, torch; os._exit(0)"],
            {**env, "PYTHONPYCACHEPREFIX": str(empty)},
        ),
        "import torch (bytecode), with teardown": ([str(python), "-c", "import torch"], env),
        "import torch.distributed.run, no teardown": (
            [str(python), "-c", "import os, torch.distributed.run; os._exit(0)"],
            env,
        ),
        "torchrun (agent.py), 2 no-op workers": ([str(python), str(AGENT), *torchrun], quiet),
        "torchrun (python -m torch.distributed.run), 2 no-op workers": (
            [str(python), "-m", "torch.distributed.run", *torchrun],
            quiet,
        ),
    }
    out: dict[str, dict[str, float]] = {}
    for name, (argv, penv) in cases.items():
        walls, cpus = [], []
        for _ in range(reps):
            res = run_command(argv, penv)
            walls.append(res["wall"])
            cpus.append(res["cpu"])
        out[name] = {"wall": statistics.median(walls), "cpu": statistics.median(cpus)}
    return out


def one_run(src: Path, root: Path, home: Path, env: dict[str, str]) -> dict[str, Any]:
    """provision, smoke, dist-step as `make demo` runs them, with the envbuild of the tree
    ``src``."""
    envbuild = [sys.executable, "-m", "envbuild"]  # run in ``src``: its envbuild, its lockfiles/
    common = ["--profile", "cpu", "--root", str(root)]
    prov = run_command([*envbuild, "provision", *common, "--home", str(home)], env, src)
    smoke = run_command([*envbuild, "smoke", *common, "--json"], env, src)
    dist = run_command([*envbuild, "dist-step", *common, "--nproc", "2", "--json"], env, src)
    if not (smoke["doc"].get("ok") and dist["doc"].get("ok")):
        raise SystemExit(f"a proof failed: see the logs under {root}")
    phases: list[Phase] = [
        ("provision", prov["wall"], prov["cpu"]),
        *smoke_phases(smoke),
        *dist_phases(dist),
    ]
    return {
        "wall": prov["wall"] + smoke["wall"] + dist["wall"],
        "cpu": prov["cpu"] + smoke["cpu"] + dist["cpu"],
        "commands": {
            name: {"wall": r["wall"], "cpu": r["cpu"], "load_before": r["load"]}
            for name, r in (("provision", prov), ("smoke", smoke), ("dist-step", dist))
        },
        "phases": [{"phase": n, "wall": w, "cpu": c} for n, w, c in phases],
    }


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def table(first: dict[str, Any], again: list[dict[str, Any]]) -> str:
    """A markdown table: the first run, then the median of the runs after it (wall, CPU)."""

    def med(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    lines = [
        "| phase | first: wall s | first: CPU s | again: wall s (median) | again: CPU s (median) |",
        "|---|--:|--:|--:|--:|",
    ]
    for i, row in enumerate(first["phases"]):
        lines.append(
            f"| {row['phase']} | {_fmt(row['wall'])} | {_fmt(row['cpu'])} | "
            f"{_fmt(med([r['phases'][i]['wall'] for r in again]))} | "
            f"{_fmt(med([r['phases'][i]['cpu'] for r in again]))} |"
        )
    for name in ("provision", "smoke", "dist-step"):
        lines.append(
            f"| **{name}** (command) | {_fmt(first['commands'][name]['wall'])} | "
            f"{_fmt(first['commands'][name]['cpu'])} | "
            f"{_fmt(med([r['commands'][name]['wall'] for r in again]))} | "
            f"{_fmt(med([r['commands'][name]['cpu'] for r in again]))} |"
        )
    lines.append(
        f"| **total** | {_fmt(first['wall'])} | {_fmt(first['cpu'])} | "
        f"{_fmt(med([r['wall'] for r in again]))} | {_fmt(med([r['cpu'] for r in again]))} |"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs after the first (default 3)")
    ap.add_argument(
        "--root", type=Path, help="data root (default: a new temporary folder, removed afterwards)"
    )
    ap.add_argument(
        "--compare",
        type=Path,
        metavar="DIR",
        help=(
            "also run the envbuild of this source tree (e.g. `git archive` of an older commit), on"
            " a data root of its own, its runs interleaved with this tree's"
        ),
    )
    ap.add_argument(
        "--bytecode-flag",
        choices=("keep", "drop"),
        default="keep",
        help="keep PYTHONDONTWRITEBYTECODE as the environment has it, or drop it",
    )
    ap.add_argument("--probe-reps", type=int, default=3, help="repetitions of each probe (0: none)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_")) and k != "ENVBUILD_ROOT"
    }
    if args.bytecode_flag == "drop":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["NO_COLOR"] = "1"
    scratch = Path(tempfile.mkdtemp(prefix="envbuild-bench-rerun-"))
    trees = {"this": (REPO, (args.root or scratch / "data").absolute())}
    if args.compare:
        trees["compare"] = (args.compare.absolute(), scratch / "compare-data")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    try:
        for i in range(1 + args.rounds):
            for name, (src, root) in trees.items():
                r = one_run(src, root, scratch / f"{name}-home", env)
                runs[name].append(r)
                print(
                    f"{name} run {i + 1}{' (first)' if i == 0 else ''}: {r['wall']:.1f} s wall,"
                    f" {r['cpu']:.1f} CPU s; "
                    + ", ".join(
                        f"{k} {v['wall']:.1f} s (load {v['load_before']:.1f})"
                        for k, v in r["commands"].items()
                    ),
                    flush=True,
                )
        python = trees["this"][1] / "venv" / "bin" / "python"
        probed = probes(python, env, scratch, args.probe_reps) if args.probe_reps else {}
    finally:
        if args.root is None:
            shutil.rmtree(scratch, ignore_errors=True)
    for name, done in runs.items():
        print(f"\n{name} ({trees[name][0]}):\n" + table(done[0], done[1:]))
    if probed:
        print("\n| one process | wall s | CPU s |\n|---|--:|--:|")
        for name, fig in probed.items():
            print(f"| {name} | {fig['wall']:.2f} | {fig['cpu']:.2f} |")
    if args.out:
        result = {
            "machine": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
            },
            "pythondontwritebytecode": env.get("PYTHONDONTWRITEBYTECODE"),
            "root_was_new": args.root is None,
            "runs": {
                name: {
                    "src": str(trees[name][0]),
                    "runs": done,
                    "median_again_wall": (
                        statistics.median(r["wall"] for r in done[1:]) if done[1:] else None
                    ),
                    "median_again_cpu": (
                        statistics.median(r["cpu"] for r in done[1:]) if done[1:] else None
                    ),
                }
                for name, done in runs.items()
            },
            "probes": probed,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
