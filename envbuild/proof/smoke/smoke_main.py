"""The smoke worker's run: every check in turn, one ``ENVBUILD_SMOKE {json}`` line each as it
finishes, and the result file with the phases' timeline (standalone: no envbuild; ``checks.py``
is the script that starts it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import smoke_early
import smoke_part
import torch
from smoke_base import (
    PERTURB_ENV,
    PERTURB_FACTOR,
    Result,
    Skip,
    settle_imports,
    settle_keys,
    start_preimport,
    sync,
)
from smoke_fla import _FLA_PARTS, check_fla, fla_part, start_fla_precompile
from smoke_kernels import (
    check_causal_conv1d,
    check_compile,
    check_flash_attn,
    check_flash_attn_4,
    check_mamba_scan,
    check_matmul,
    check_sdpa,
    check_triton,
)

CHECKS: dict[str, Callable[[bool], Result]] = {
    "matmul": check_matmul,
    "sdpa": check_sdpa,
    "triton": check_triton,
    "torch.compile": check_compile,
    "flash_attn": check_flash_attn,
    "causal_conv1d": check_causal_conv1d,
    "mamba_ssm.selective_scan": check_mamba_scan,
    "fla": check_fla,
    "flash_attn_4": check_flash_attn_4,
}


def top_modules(dist: str) -> list[str]:
    """The importable top-level modules of an installed distribution (top_level.txt, else its
    files)."""
    d = md.distribution(dist)
    names = (d.read_text("top_level.txt") or "").split()
    if not names:
        for f in d.files or ():
            top = f.parts[0] if f.parts else ""
            outside = top.endswith((".dist-info", ".data")) or top in (
                "",
                "..",
                "bin",
                "__pycache__",
            )
            if not outside and (len(f.parts) > 1 or top.endswith((".py", ".so"))):
                names.append(top.split(".")[0])
    return sorted({n for n in names if n.isidentifier() and not n.startswith("_")})


def check_import(dist: str) -> Callable[[bool], Result]:
    """``import`` of each top-level module of ``dist``: a package the lock installed must be there
    and load against this torch (an extension built for another one fails here: undefined symbol).
    """

    def run(quick: bool) -> Result:
        try:
            version = md.version(dist)
        except md.PackageNotFoundError as exc:
            raise ImportError(f"{dist} is not installed, and the lock installs it") from exc
        modules = top_modules(dist)
        if not modules:
            raise ImportError(f"{dist} {version} is installed but has no importable module")
        for module in modules:
            try:
                __import__(module)
            except Exception as exc:  # the import error is the finding
                raise ImportError(
                    f"{dist} {version}: `import {module}` fails ({type(exc).__name__}): {exc}"
                ) from exc
        return {"imported": True, "version": version, "modules": modules}

    return run


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.backends.cudnn.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["device"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        info["device_count"] = torch.cuda.device_count()
        props = torch.cuda.get_device_properties(0)
        info["memory_gb"] = props.total_memory / 1e9
        if getattr(props, "uuid", None) is not None:
            info["uuid"] = f"GPU-{props.uuid}"
    if os.environ.get("ENVBUILD_SMOKE_GPU"):
        info["gpu_index"] = int(os.environ["ENVBUILD_SMOKE_GPU"])  # nvidia-smi's, set by smoke
    return info


def run_one(name: str, fn: Callable[[bool], Result], quick: bool) -> Result:
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))  # fresh inputs every run
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        res = fn(quick)
        sync()
        tol = res.get("tol", 1e-3)
        err = res.get("rel_err")
        ok = err is not None and math.isfinite(err) and err <= tol
        if res.get("imported"):  # an import check has no answer to compare: it passed by importing
            ok, res = True, {k: v for k, v in res.items() if k != "imported"}
        res["verdict"] = "pass" if ok else "fail"
        if not ok:
            res["reason"] = f"relative error {err:.3g} above the tolerance {tol:.3g}" + (
                f" (a planted error of {PERTURB_FACTOR:g}x the tolerance, {PERTURB_ENV})"
                if res.get("perturbed")
                else ""
            )
    except Skip as exc:
        res = {"verdict": "skip", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a crashing kernel is a failed check, not a crashed run
        res = {
            "verdict": "fail",
            "reason": f"{type(exc).__name__}: {exc}".strip()[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
    res["name"] = name
    res["seconds"] = time.perf_counter() - t0
    if torch.cuda.is_available():
        res["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return res


def merge_part(results: list[Result], other: dict[str, Any]) -> list[Result]:
    """This process's results with the torch.compile process's, in the checks' order (the
    imports last); a lost one (no result) is printed here, since its process printed none."""
    order = {name: i for i, name in enumerate(CHECKS)}
    theirs = list(other.get("checks", []))
    if other.get("lost"):
        for res in theirs:
            print("ENVBUILD_SMOKE " + json.dumps(res), flush=True)
    return sorted([*results, *theirs], key=lambda r: order.get(str(r.get("name")), len(order)))


def start_cuda() -> None:
    """torch's CUDA state, the allocator and the cuBLAS handle, before the first check: its own
    phase of the timeline (the context itself was opened by ``smoke_early`` during the imports)."""
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.current_blas_handle()
    sync()


@dataclass
class _Run:
    """One run's state as its phases fill it in: the timeline (each phase, the time.time() it
    began and this process's CPU seconds by then), the results in order, the GPU's environment,
    and the torch.compile process's timeline once it is collected."""

    timeline: list[tuple[str, float, float]]
    results: list[Result] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    compiled: dict[str, Any] | None = None

    def phase(self, name: str) -> None:
        """A phase begins now."""
        self.timeline.append((name, time.time(), time.process_time()))

    def record(self, res: Result) -> None:
        """A check's result: kept, and its line printed as it finishes."""
        self.results.append(res)
        print(
            "ENVBUILD_SMOKE " + json.dumps({k: v for k, v in res.items() if k != "traceback"}),
            flush=True,
        )


def main(
    argv: list[str] | None = None,
    entered: tuple[float, float] | None = None,
    part: smoke_part.Part | None = None,
) -> int:
    """The run (``entered``: when ``checks.py`` began, time.time() and CPU seconds; ``part``: the
    process running the torch.compile check, whose result joins this one's)."""
    # where the run's seconds went (bench/bench_rerun.py, bench/gpu_smoke_all.sh): the
    # interpreter's start, the imports (torch's, while smoke_early opens the CUDA context), then
    # CUDA and each check
    run = _Run([("python", smoke_early.process_started(), 0.0)])
    if entered is not None:
        run.timeline.append(("imports", entered[0], entered[1]))
    run.phase("start")
    p = _parser()
    args = p.parse_args(argv)
    if args.fla_part:
        return fla_part(*args.fla_part)
    if not args.out:
        p.error("--out is required")
    unknown = [n for n in args.only if n not in CHECKS]
    if unknown:
        print(
            f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}", file=sys.stderr
        )
        return 2
    own_cache = _own_inductor_cache()
    t0 = time.perf_counter()
    if not args.only or "fla" in args.only:
        start_fla_precompile()
    start_preimport(args.only, compile_here=part is None)
    try:
        _run_checks(run, args, part)
        run.phase("environment")
        # the torch.compile process's result carries no environment: the worker's is the GPU's
        run.environment = {} if os.environ.get(smoke_part.PART_ENV) else environment()
        if part is not None:
            other = _wait_for_part(run, part)
            part = None
            run.results = merge_part(run.results, other)
            run.compiled = {k: other.get(k) for k in ("timeline", "early_cuda", "seconds", "lost")}
    finally:
        # the fla check did not run (or not to its end): no compile outlives the run
        for proc in _FLA_PARTS:
            proc.kill()
        if part is not None:
            part.stop()
        if own_cache is not None:
            shutil.rmtree(own_cache, ignore_errors=True)
    run.phase("result")  # then its exit
    return _write_result(run, args.out, time.perf_counter() - t0)


def _parser() -> argparse.ArgumentParser:
    """The worker's command line."""
    p = argparse.ArgumentParser(description="envbuild kernel smoke tests")
    p.add_argument("--out")
    p.add_argument("--fla-part", nargs=2, type=int, metavar=("I", "N"), help=argparse.SUPPRESS)
    p.add_argument("--only", action="append", default=[], help="run only this check (repeatable)")
    p.add_argument("--quick", action="store_true", help="smaller matmul and attention benchmarks")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="DIST",
        help="also import every top-level module of this distribution (repeatable)",
    )
    return p


def _own_inductor_cache() -> str | None:
    """inductor's cache in a temporary folder of the run's own where the environment names none
    (returned, to be removed at the end), compiled by one thread."""
    own_cache = None
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        own_cache = tempfile.mkdtemp(prefix="envbuild-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = own_cache
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # one small graph: no worker pool
    return own_cache


def _run_checks(run: _Run, args: argparse.Namespace, part: smoke_part.Part | None) -> None:
    """CUDA's start, then each check this process runs in turn (not the one ``part`` runs), then
    each ``--import``."""
    if torch.cuda.is_available() and [n for n in CHECKS if not args.only or n in args.only]:
        run.phase("cuda")
        # a failure here is each check's to report, in its own result
        with contextlib.suppress(Exception):
            start_cuda()
    for name, fn in CHECKS.items():
        if args.only and name not in args.only or part is not None and name == smoke_part.CHECK:
            continue
        if name != "matmul":
            settle_imports()  # only the matmul's start overlaps them: one importer at once
            settle_keys()  # and the timed products overlap Triton's cache key
        run.phase(name)
        run.record(run_one(name, fn, args.quick))
    for dist in args.imports:
        run.phase(f"import {dist}")
        run.record(run_one(f"import {dist}", check_import(dist), args.quick))


def _wait_for_part(run: _Run, part: smoke_part.Part) -> dict[str, Any]:
    """Done with the GPU: the CUDA context's teardown, which the process's exit would wait for,
    now, while the torch.compile process works; then that process's result."""
    run.phase(f"wait {smoke_part.CHECK}")
    smoke_early.release_context()
    return part.collect()


def _write_result(run: _Run, out: str, seconds: float) -> int:
    """The result file, written whole (a temporary file, then a rename); 0 when no check failed,
    else 1."""
    doc = {
        "environment": run.environment,
        "checks": run.results,
        "seconds": seconds,
        "ok": not any(r["verdict"] == "fail" for r in run.results),
        "timeline": run.timeline,
        "early_cuda": smoke_early.summary(),
    }
    if run.compiled is not None:
        doc["compile_part"] = run.compiled
    tmp = f"{out}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, out)
    return 0 if doc["ok"] else 1
