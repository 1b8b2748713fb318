#!/usr/bin/env python3
"""``provision --lock`` against ``uv sync --frozen`` on public ML locks whose torch comes from PyPI.

    python bench/bench_publocks.py [--locks docling transformer-lens cosmos-reason2] [--rounds 2]
        [--before REV] [--no-install-workspace] [--out results.json]

The locks are the ones committed under ``tests/data/publocks/`` (each folder's ``SOURCE.txt`` names
the repository and commit), copied to a scratch folder; both tools install the selection
``SELECTIONS`` names for the lock's own Python (``.python-version``, else 3.12), the packaged root
and workspace members built as ``uv sync`` builds them (``--no-install-workspace`` leaves them
out, for a tree whose isolated builds cannot fetch their backend), from the real indexes (PyPI:
about 3 GB of CUDA wheels per cold install). Per lock and round, variants interleaved (the order
rotates each round):

- ``cold``: empty caches: ``uv sync --frozen`` with a new ``UV_CACHE_DIR`` into a new venv, then
  that venv's first ``import torch`` (envbuild's run ends in one); ``envbuild provision --lock``
  into a new data root (its uv cache is under the root); with ``--before REV`` also envbuild as it
  was at REV (``git archive``), so before and after come from the same run;
- ``warm``: caches filled by the cold run: a new venv (uv) / a new venv and manifest in the same
  data root (envbuild);
- ``noop``: ``provision --lock`` again on the finished root (three times, the median kept);
- ``cpu`` (cold): CPU seconds, user + system, of uv sync plus its import and of envbuild's run:
  steadier than wall time from one minute's network to the next, and on two cores what a fast
  network leaves as the limit.

Every install (cold or warm, either tool) starts after ``sync`` and, run as root, with the page
cache dropped: on this 24 GiB host the previous install's gigabytes otherwise sit in memory and
the next run pays for reclaiming them (``page_cache_dropped_before_each_install`` in the results).
The first import and the no-op re-runs keep the cache, as they would right after an install.

Each pair is checked, not only timed: the two environments hold the same distributions at the same
versions (``pip list``), envbuild's first step is torch, and its guard ran after every stage (the
manifest records each). The phases of each envbuild run (``timings`` and each stage's seconds,
from its receipt) are kept beside the totals. Nothing here is a test (bench/README.md).
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
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCKS = REPO / "tests" / "data" / "publocks"
sys.path.insert(0, str(REPO))

from packaging.utils import canonicalize_name  # noqa: E402

# lock folder -> uv sync's selection flags (the same flags on envbuild's side)
SELECTIONS: dict[str, list[str]] = {
    "docling": ["--no-default-groups", "--all-packages"],  # hatchling root + two hatchling members
    "transformer-lens": ["--no-default-groups"],  # hatchling root
    "cosmos-reason2": [],  # virtual root, hatchling member
    "nanochat": [],  # virtual root, no member
}


# CPU seconds (user + system, the child and every descendant it waited for) of the last _run: on
# two cores a fast network makes an install CPU-bound, and CPU time does not move with the
# network's speed from one minute to the next the way wall time does
LAST_CPU = [0.0]
CACHES_DROPPED = [True]  # every install started with the page cache dropped (root)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def _drop_caches() -> bool:
    """Empty the page cache (root only): each install starts with the host's memory free."""
    try:
        DROP_CACHES.write_text("3\n")
    except OSError:
        return False
    return True


def _run(
    argv: list[str], env: dict[str, str], cwd: Path | None = None, *, fresh: bool = False
) -> tuple[float, str]:
    # the gigabytes the previous run wrote go to disk first: otherwise the next run, whichever it
    # is, pays for their writeback (the kernel throttles a writer over the dirty limit, in system
    # time), which is what made one tool look twice as slow as the other in alternate rounds
    os.sync()
    if fresh:
        # and, for an install, out of memory: with the page cache full of the previous run's
        # 7 GB, the next one spends its system time reclaiming it (torch's stage alone, same
        # files: 26-27 s with 20 s of system time after other installs, 20-22 s with 12 s after
        # dropping the cache), so whichever tool ran second looked slower
        CACHES_DROPPED[0] = _drop_caches() and CACHES_DROPPED[0]
    t, c = time.monotonic(), _cpu()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - t
    LAST_CPU[0] = _cpu() - c
    if out.returncode != 0:
        tail = f"{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        raise SystemExit(f"failed ({out.returncode}): {' '.join(argv)}\n{tail}")
    return seconds, out.stdout + out.stderr


def _pip_list(venv: Path) -> list[tuple[str, str]]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv), "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    return sorted((str(canonicalize_name(d["name"])), d["version"]) for d in json.loads(out.stdout))


def _source(name: str) -> str:
    lines = dict(
        ln.split(": ", 1)
        for ln in (LOCKS / name / "SOURCE.txt").read_text().splitlines()
        if ": " in ln
    )
    return f"{lines['repo']} {lines['commit'][:7]}"


def _phases(root: Path) -> dict[str, float]:
    """The newest receipt's phases: ``timings`` and each stage's seconds (``step:NAME``)."""
    newest = max((root / "receipts").glob("provision-*.json"), key=lambda p: p.stat().st_mtime)
    payload = json.loads(newest.read_text())["payload"]
    out = {k: float(v) for k, v in (payload.get("timings") or {}).items()}
    for s in payload.get("steps") or []:
        if s.get("seconds") is not None:
            out[f"step:{s['name']}"] = float(s["seconds"])
    return out


def bench_lock(
    name: str, rounds: int, work: Path, env: dict[str, str], *, workspace: bool, before: Path | None
) -> dict[str, object]:
    from envbuild.installer.python import find_interpreter

    project = work / name / "project"
    shutil.copytree(LOCKS / name, project)
    pinned = project / ".python-version"
    python = pinned.read_text().split()[0] if pinned.is_file() else "3.12"
    exe = str(find_interpreter(".".join(python.split(".")[:2]), require_fit=False).executable)
    lock = project / "uv.lock"
    selection = [*SELECTIONS.get(name, []), *([] if workspace else ["--no-install-workspace"])]
    n = [0]

    def fresh(prefix: str) -> Path:
        n[0] += 1
        return work / name / f"{prefix}-{n[0]}"

    def uv_sync(cache: Path, case: str) -> tuple[float, Path]:
        venv = fresh("uv-venv")
        e = {**env, "UV_PROJECT_ENVIRONMENT": str(venv), "UV_CACHE_DIR": str(cache)}
        seconds = _run(
            [_uv(), "sync", "--frozen", "--python", exe, *selection], e, cwd=project, fresh=True
        )[0]
        cpu["uv"] = LAST_CPU[0]
        # envbuild's provision ends with torch imported (which compiles its bytecode in a new venv):
        # uv's side with its venv's first `import torch` is the like-for-like figure
        times[f"{case}-uv-import"].append(
            _run([str(venv / "bin" / "python"), "-c", "import torch"], env)[0]
        )
        cpu["uv"] += LAST_CPU[0]
        if case == "cold":
            times["cold-cpu-uv+import"].append(cpu["uv"])
        return seconds, venv

    def provision(root: Path, variant: str, check: bool = True) -> tuple[float, Path]:
        tree = before if variant == "envbuild-before" and before is not None else REPO
        # envbuild's own caches (metadata, RECORDs, interpreter probes) start empty with the root,
        # as uv's cache does with its cold run; the warm and no-op runs of the root keep them
        e = {**env, "PYTHONPATH": str(tree), "ENVBUILD_CACHE_DIR": str(root / "envbuild-cache")}
        seconds, output = _run(
            [
                sys.executable,
                "-m",
                "envbuild",
                "provision",
                "--lock",
                str(lock),
                "--root",
                str(root),
                "--python",
                exe,
                *selection,
            ],
            e,
            cwd=tree,
            fresh=check,  # an install (cold or warm), not a no-op re-run
        )
        cpu[variant] = LAST_CPU[0]
        if check:
            steps = [ln for ln in output.splitlines() if "step 1/" in ln]
            assert steps and " torch: " in steps[0], (
                f"{name}: envbuild's first step is not torch: {steps[:1]}"
            )
            manifest = json.loads((root / ".envbuild" / "manifest.json").read_text())
            unguarded = [
                s["name"]
                for s in manifest["steps"]
                if s.get("status") == "ok" and s.get("guard_seconds") is None
            ]
            assert not unguarded, f"{name}: no guard recorded after {unguarded}"
        return seconds, root / "venv"

    def forget_venv(root: Path) -> None:  # a new venv and manifest; the root's caches stay
        shutil.rmtree(root / "venv", ignore_errors=True)
        shutil.rmtree(root / ".envbuild", ignore_errors=True)

    ours = ["envbuild", *(["envbuild-before"] if before is not None else [])]
    keys = ["uv", "uv-import", *ours]
    times: dict[str, list[float]] = {f"{c}-{k}": [] for c in ("cold", "warm") for k in keys}
    times.update({f"noop-{v}": [] for v in ours})
    times.update({"cold-cpu-uv+import": [], **{f"cold-cpu-{v}": [] for v in ours}})
    cpu: dict[str, float] = {}
    phases: dict[str, list[dict[str, float]]] = {
        f"{c}-{v}": [] for c in ("cold", "warm") for v in ours
    }
    packages = 0
    same: list[bool] = []
    for r in range(rounds):
        uv_cache = fresh("uv-cache")
        roots = {v: fresh(f"root-{v}") for v in ours}
        cold: list[tuple[str, Callable[[], tuple[float, Path]]]] = [
            ("uv", lambda c=uv_cache: uv_sync(c, "cold")),
            *((v, lambda v=v, rt=roots[v]: provision(rt, v)) for v in ours),
        ]
        shift = r % len(cold)
        for key, fn in cold[shift:] + cold[:shift]:
            seconds, venv = fn()
            times[f"cold-{key}"].append(seconds)
            if key != "uv":
                times[f"cold-cpu-{key}"].append(cpu[key])
                phases[f"cold-{key}"].append(_phases(roots[key]))
                for _ in range(3):
                    times[f"noop-{key}"].append(provision(roots[key], key, check=False)[0])
            (work / name / key).unlink(missing_ok=True)
            (work / name / key).symlink_to(venv)
        want = _pip_list(work / name / "uv")
        packages = len(want)
        same.append(all(_pip_list(work / name / v) == want for v in ours))
        warm: list[tuple[str, Callable[[], tuple[float, Path]]]] = [
            ("uv", lambda c=uv_cache: uv_sync(c, "warm")),
            *((v, lambda v=v, rt=roots[v]: (forget_venv(rt), provision(rt, v))[1]) for v in ours),
        ]
        for key, fn in warm[shift:] + warm[:shift]:
            times[f"warm-{key}"].append(fn()[0])
            if key != "uv":
                phases[f"warm-{key}"].append(_phases(roots[key]))
        print(
            f"{name} round {r + 1}: "
            + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items() if v)
            + f"; same distributions: {same[-1]}",
            flush=True,
        )
        for p in (uv_cache, *roots.values()):
            shutil.rmtree(p, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    ratios: dict[str, float] = {}
    for v in ours:
        tag = "" if v == "envbuild" else "_before"
        for case in ("cold", "warm"):
            ratios[f"{case}{tag}"] = round(med[f"{case}-{v}"] / med[f"{case}-uv"], 3)
            ratios[f"{case}_with_import{tag}"] = round(
                med[f"{case}-{v}"] / (med[f"{case}-uv"] + med[f"{case}-uv-import"]), 3
            )
        ratios[f"cold_cpu{tag}"] = round(med[f"cold-cpu-{v}"] / med["cold-cpu-uv+import"], 3)
        # per round, against that round's own uv run (the network changes between rounds)
        ratios[f"cold_with_import_per_round{tag}"] = [  # type: ignore[assignment]
            round(a / (b + c), 3)
            for a, b, c in zip(
                times[f"cold-{v}"], times["cold-uv"], times["cold-uv-import"], strict=True
            )
        ]
    return {
        "lock": _source(name),
        "selection": selection,
        "python": python,
        "packages": packages,
        "same_distributions": all(same),
        "median_s": {k: round(v, 2) for k, v in med.items()},
        "ratios": ratios,
        "all_s": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "phases_s": {
            k: [{p: round(x, 2) for p, x in d.items()} for d in v] for k, v in phases.items()
        },
    }


def _uv() -> str:
    from envbuild.installer.python import find_uv

    return find_uv() or "uv"


def _export(rev: str, into: Path) -> Path:
    """envbuild's tree at ``rev`` (``git archive``), to run as the ``envbuild-before`` variant; a
    folder holding an ``envbuild`` package is taken as it is."""
    if (Path(rev) / "envbuild" / "__init__.py").is_file():
        return Path(rev).resolve()
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "envbuild"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _write(args: argparse.Namespace, results: dict[str, dict[str, object]]) -> None:
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "host": platform.node(),
        "load_avg_at_end": os.getloadavg(),
    }
    doc = {
        "machine": machine,
        "rounds": args.rounds,
        "before": args.before,
        "install_workspace": not args.no_install_workspace,
        "page_cache_dropped_before_each_install": CACHES_DROPPED[0],
        "locks": results,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # zonos bc40d98 does not install here: its sudachidict-full sdist downloads its dictionary
    # from a host this machine cannot reach at build time (uv sync fails the same way);
    # cosmos-transfer2.5, lerobot and open-instruct need GitHub or the PyTorch index on Linux,
    # which this machine cannot reach either
    ap.add_argument("--locks", nargs="+", default=["docling", "transformer-lens", "cosmos-reason2"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--before",
        metavar="REV",
        help="also time envbuild as it was at REV (git archive), or in a folder REV",
    )
    ap.add_argument(
        "--no-install-workspace",
        action="store_true",
        help="leave the packaged root and workspace members out (both tools)",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_")) and k not in ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")
    }
    env.update({"NO_COLOR": "1", "PIP_CONFIG_FILE": os.devnull})
    work = Path(tempfile.mkdtemp(prefix="bench-publocks-"))
    results = {}
    try:
        before = _export(args.before, work / "before") if args.before else None
        for name in args.locks:
            results[name] = bench_lock(
                name, args.rounds, work, env, workspace=not args.no_install_workspace, before=before
            )
            shutil.rmtree(work / name, ignore_errors=True)
            if args.out:  # after each lock: a run cut short keeps what it measured
                _write(args, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{'lock':<36}{'pkgs':>5}{'same':>5}  {'case':<5}{'uv sync':>8}{'+import':>9}"
        f"{'envbuild':>9}{'/ uv+imp':>9}{'before':>8}{'/ uv+imp':>9}{'noop':>6}"
    )
    for r in results.values():
        m, q = r["median_s"], r["ratios"]  # type: ignore[index]
        for case in ("cold", "warm"):
            head = (
                f"{r['lock']:<36}{r['packages']!s:>5}"
                f"{'yes' if r['same_distributions'] else 'NO':>5}"
                if case == "cold"
                else " " * 46
            )
            b = (
                f"{m[f'{case}-envbuild-before']:>7.1f}s{q[f'{case}_with_import_before']:>8.2f}x"
                if f"{case}-envbuild-before" in m
                else " " * 17
            )
            noop = f"{m['noop-envbuild']:>5.1f}s" if case == "cold" else ""
            print(
                f"{head}  {case:<5}{m[f'{case}-uv']:>7.1f}s{m[f'{case}-uv-import']:>8.1f}s"
                f"{m[f'{case}-envbuild']:>8.1f}s{q[f'{case}_with_import']:>8.2f}x{b}{noop}"
            )
        cb = (
            f"{m['cold-cpu-envbuild-before']:>7.1f}s{q['cold_cpu_before']:>8.2f}x"
            if "cold-cpu-envbuild-before" in m
            else ""
        )
        print(
            f"{'':46}  {'cpu':<5}{m['cold-cpu-uv+import']:>16.1f}s"
            f"{m['cold-cpu-envbuild']:>8.1f}s{q['cold_cpu']:>8.2f}x{cb}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
