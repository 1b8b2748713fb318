"""Kernel smoke tests: ``checks.py`` runs inside the target venv; this side launches it.

The checks import torch and the CUDA extensions, so they run as a subprocess of the venv's
interpreter (``<venv>/bin/python checks.py``, with the ``smoke_*.py`` modules beside it);
envbuild itself never imports torch. With GPUs, one such worker per GPU, all at once (``gpus.py``:
which GPUs, the slow one, planted faults); their results are kept per GPU and merged (a check
failed on any GPU failed), each worker's phases with them (``timeline``; on a GPU its
torch.compile check's own process's too: ``smoke_part.py``). ``proof/warm.py``: the same checks that
compile, once, after a provision (``provision --warm-kernels``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild.errors import PreflightError, VerifyError
from envbuild.nvidia import GPU
from envbuild.proof.smoke.gpus import load_gpus, slow_findings, worker_env
from envbuild.run import run

CHECKS_SCRIPT = Path(__file__).resolve().parent / "checks.py"
LOAD_SCRIPT = Path(__file__).resolve().parent / "load.py"
INVENTORY_SCRIPT = Path(__file__).resolve().parents[1] / "inventory.py"
RESULT_MARK = "ENVBUILD_SMOKE "
CHECK_NAMES = (
    "matmul",
    "sdpa",
    "triton",
    "torch.compile",
    "flash_attn",
    "causal_conv1d",
    "mamba_ssm.selective_scan",
    "fla",
    "flash_attn_4",
)

__all__ = ["CHECK_NAMES", "SmokeResult", "describe", "rate", "run_smoke"]
NAME_WIDTH = max(map(len, CHECK_NAMES)) + 2
# a failure's reason in its line; the whole of it is in --json, the receipt and the log
REASON_CHARS = 160


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    checks: list[dict[str, Any]]  # name, verdict, rel_err, tol, seconds, reason, ...
    # torch / CUDA / cuDNN / NCCL versions and the device, as torch saw them
    environment: dict[str, Any]
    seconds: float
    returncode: int
    log_file: Path | None
    started: float = 0.0  # time.time() at the launch: with ``timeline``, where the seconds went
    # checks.py's phases: [name, time.time(), CPU s]
    timeline: list[Any] = field(default_factory=list)
    # per GPU: index, uuid, ok, checks, its worker's timeline and early_cuda...
    gpus: list[dict[str, Any]] = field(default_factory=list)
    slow: list[dict[str, Any]] = field(default_factory=list)  # slow GPUs (gpus.slow_findings)
    # this side's moments: the workers launched, the last one done ([name, time.time()])
    parent: list[list[Any]] = field(default_factory=list)
    early_cuda: dict[str, Any] = field(default_factory=dict)  # the lead worker's (smoke_early)
    # the lead worker's torch.compile process (smoke_part): its timeline, early_cuda, seconds
    compile_part: dict[str, Any] | None = None

    @property
    def failed_gpus(self) -> list[dict[str, Any]]:
        return [g for g in self.gpus if not g.get("ok")]


def describe(res: dict[str, Any], where: str = "") -> tuple[events.Level, str]:
    """One check's result as one line, printed once when it finishes: pass (``ok``) with its error
    against the tolerance, time and measured rate; fail with its reason; skip (``info``) with its
    reason. The names line up under the CLI's prefixes (``ok ``, ``FAIL ``, and ``skip`` here);
    ``where`` (``GPU 3``) goes before the name."""
    verdict, name = str(res.get("verdict")), (f"{where}  " if where else "") + str(res.get("name"))
    width = NAME_WIDTH + (len(where) + 2 if where else 0)
    err, tol = res.get("rel_err"), res.get("tol")
    parts = []
    if isinstance(err, (int, float)) and isinstance(tol, (int, float)):
        parts.append(f"rel err {err:.1e} (tol {tol:.1e})")
    if verdict == "skip":
        return "info", f"skip {name:<{width}}{res.get('reason') or ''}"
    parts.append(f"{float(res.get('seconds') or 0):.2f} s")
    if verdict == "fail":
        reason = " ".join(str(res.get("reason") or "").split())
        parts.append(reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "...")
        return "fail", f"{name:<{width}}" + "  ".join(parts)
    shown_rate = rate(res.get("tflops"), res.get("datasheet_tflops"))
    if shown_rate:
        parts.append(shown_rate)
    if res.get("version"):
        parts.append(f"version {res['version']}")
    return "ok", f"  {name:<{width}}" + "  ".join(parts)


def rate(tflops: Any, datasheet: Any = None) -> str:
    """A measured throughput, or "" where none was measured (no figure of 0)."""
    if (
        not isinstance(tflops, (int, float))
        or not tflops > 0
        or tflops != tflops
        or tflops == float("inf")
    ):
        return ""
    shown = (
        f"{tflops:.0f} TFLOP/s"
        if tflops >= 10
        else f"{tflops:.2g} TFLOP/s"
        if tflops >= 0.01
        else f"{tflops * 1e3:.2g} GFLOP/s"
    )
    if isinstance(datasheet, (int, float)) and datasheet > 0:
        shown += f" ({100 * tflops / datasheet:.0f}% of {datasheet:g})"
    return shown


def run_smoke(
    python: Path,
    *,
    only: tuple[str, ...] = (),
    imports: tuple[str, ...] = (),
    quick: bool = False,
    log_file: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900.0,
    gpus: Sequence[GPU] = (),
    slow_margin: float | None = None,
) -> SmokeResult:
    """Run the checks with ``python`` (``only``: these checks; ``imports``: also import each of
    these distributions' modules), one worker per GPU of ``gpus`` at once (none: one worker, as CUDA
    sees the host); raises ``PreflightError`` when it or torch is missing, ``VerifyError`` when
    every worker crashed without a result (one GPU's crash or hang is that GPU's failure).
    Failed checks are returned; ``slow_margin`` (None: off) names slow GPUs."""
    if not python.exists():
        raise PreflightError(
            f"no Python interpreter at {python}: the venv is missing or incomplete",
            hint="Provision it first (envbuild provision), or point --venv at an existing venv.",
        )
    base = dict(os.environ if env is None else env)
    start, started = time.monotonic(), time.time()
    with tempfile.TemporaryDirectory(prefix="envbuild-smoke-") as tmp:
        # inductor's cache in this run's temporary folder when the overlay names none (no /tmp
        # leftovers); the workers share it either way: N GPUs compile once
        base.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tmp) / "inductor"))
        argv = _checks_argv(python, only, imports, quick)
        jobs = _jobs(python, argv, Path(tmp), base, gpus, log_file, timeout)
        loads = _start_loads(python, base, load_gpus(base, list(gpus)))
        try:
            results, parent = _run_jobs(jobs)
        finally:
            _end_loads(loads)
    _raise_when_none_answered(results, python)
    if gpus:
        per_gpu = [_gpu_result(g, o) for g, o in zip(gpus, results, strict=True)]
        slow = slow_findings(
            [(g, o.checks) for g, o in zip(gpus, results, strict=True)], slow_margin
        )
    else:
        on_device = results[0].environment.get("device")
        per_gpu = []
        slow = slow_findings([(_THIS_HOST, results[0].checks)], slow_margin) if on_device else []
    lead = next(o for o in results if o.doc is not None)
    slow_failed = any(f.get("verdict") == "fail" for f in slow)
    return SmokeResult(
        ok=all(o.ok for o in results) and not slow_failed,
        checks=merge_checks(results, gpus),
        environment=lead.environment,
        seconds=time.monotonic() - start,
        returncode=max(o.returncode for o in results),
        log_file=log_file,
        started=started,
        timeline=lead.timeline,
        gpus=per_gpu,
        slow=slow,
        parent=parent,
        early_cuda=lead.early_cuda,
        compile_part=lead.compile_part,
    )


def _checks_argv(
    python: Path, only: tuple[str, ...], imports: tuple[str, ...], quick: bool
) -> list[str]:
    """``checks.py``'s command line, without its ``--out``."""
    argv: list[str] = [str(python), str(CHECKS_SCRIPT)]
    for name in only:
        argv += ["--only", name]
    for dist in imports:
        argv += ["--import", dist]
    if quick:
        argv.append("--quick")
    return argv


def _jobs(
    python: Path,
    argv: list[str],
    tmp: Path,
    base: dict[str, str],
    gpus: Sequence[GPU],
    log_file: Path | None,
    timeout: float,
) -> list[_Job]:
    """One worker per GPU of ``gpus`` (none: one worker, as CUDA sees the host), each writing its
    result into ``tmp``; with several, each its own log beside ``log_file``."""
    targets: list[GPU | None] = [*gpus] if gpus else [None]
    jobs = []
    for n, gpu in enumerate(targets):
        log = log_file
        if gpu is not None and len(targets) > 1 and log_file is not None:
            log = log_file.with_name(f"{log_file.stem}-gpu{gpu.index}.log")
        jobs.append(
            _Job(
                python,
                argv + ["--out", str(tmp / f"smoke-{n}.json")],
                gpu,
                worker_env(base, gpu),
                log,
                timeout,
                len(targets) > 1,
            )
        )
    return jobs


def _run_jobs(jobs: Sequence[_Job]) -> tuple[list[_Outcome], list[list[Any]]]:
    """Run every worker at once, each on a thread of its own; their outcomes in ``jobs``' order,
    and this side's moments (launched, collected: ``[name, time.time()]``)."""
    outcomes: dict[int, _Outcome] = {}
    parent: list[list[Any]] = []
    threads = [
        threading.Thread(
            target=lambda n=n, job=job: outcomes.__setitem__(n, job.run()),
            name=f"envbuild-smoke-{n}",
            daemon=True,
        )
        for n, job in enumerate(jobs)
    ]
    for t in threads:
        t.start()
    parent.append(["launched", time.time()])
    for t in threads:
        t.join()
    parent.append(["collected", time.time()])
    return [outcomes[n] for n in range(len(jobs))], parent


def _raise_when_none_answered(results: Sequence[_Outcome], python: Path) -> None:
    """PreflightError when no worker wrote a result because torch is missing, VerifyError when
    none did for another reason."""
    if all(o.doc is None for o in results):
        first = results[0]
        if "No module named 'torch'" in first.tail:
            raise PreflightError(
                f"torch is not installed in {python}; smoke needs the venv's torch"
            )
        raise VerifyError(first.error or "the smoke checks crashed")


_THIS_HOST = GPU(0, "", "", "the GPU CUDA sees first")
_emit_lock = threading.Lock()


@dataclass
class _Outcome:
    doc: dict[str, Any] | None  # checks.py's result; None: it crashed or hung without one
    returncode: int
    tail: str
    error: str | None  # why there is no result
    seconds: float
    log_file: Path | None

    @property
    def checks(self) -> list[dict[str, Any]]:
        if self.doc is None:
            return [
                {"name": "smoke worker", "verdict": "fail", "reason": self.error or "no result"}
            ]
        return list(self.doc.get("checks", []))

    @property
    def environment(self) -> dict[str, Any]:
        return dict((self.doc or {}).get("environment", {}))

    @property
    def timeline(self) -> list[Any]:
        return list((self.doc or {}).get("timeline", []))

    @property
    def early_cuda(self) -> dict[str, Any]:
        return dict((self.doc or {}).get("early_cuda", {}))

    @property
    def compile_part(self) -> dict[str, Any] | None:
        part = (self.doc or {}).get("compile_part")
        return dict(part) if isinstance(part, dict) else None

    @property
    def ok(self) -> bool:
        return self.doc is not None and bool(self.doc.get("ok")) and self.returncode == 0


@dataclass(frozen=True)
class _Job:
    python: Path
    argv: list[str]
    gpu: GPU | None
    env: dict[str, str]
    log_file: Path | None
    timeout: float
    labelled: bool  # several workers: each line says which GPU

    def run(self) -> _Outcome:
        where = self.gpu.label if self.gpu is not None and self.labelled else ""
        out = Path(self.argv[-1])

        def on_line(line: str) -> None:
            if line.startswith(RESULT_MARK):
                try:
                    res = json.loads(line[len(RESULT_MARK) :])
                except ValueError:
                    return
                level, text = describe(res, where)
                with _emit_lock:
                    events.emit(
                        level, text, result=res, gpu=None if self.gpu is None else self.gpu.index
                    )
            else:
                with _emit_lock:
                    events.emit("debug", f"[{where}] {line}" if where else line)

        t0 = time.monotonic()
        try:
            res = run(
                self.argv,
                log_file=self.log_file,
                env=self.env,
                timeout=self.timeout,
                on_line=on_line,
            )
        except FileNotFoundError as exc:
            raise PreflightError(f"cannot run {self.python}") from exc
        seconds = time.monotonic() - t0
        on = f" on {self.gpu.describe()}" if self.gpu is not None else ""
        if res.timed_out:
            why = (
                res.hung_message(f"the smoke checks{on}")
                + " A hang in `import torch` or a first CUDA call is usually the driver or a GPU "
                "held by another process (see nvidia-smi); raise --timeout for a slow first "
                "compile."
            )
            return _Outcome(None, res.returncode, res.tail, why, seconds, self.log_file)
        if not out.is_file():
            where_log = f"; full log: {self.log_file}" if self.log_file else ""
            why = (
                f"the smoke checks{on} crashed (exit {res.returncode}) before writing a "
                f"result{where_log}. Last lines:\n{res.tail}"
            )
            return _Outcome(None, res.returncode, res.tail, why, seconds, self.log_file)
        doc = json.loads(out.read_text(encoding="utf-8"))
        return _Outcome(doc, res.returncode, res.tail, None, seconds, self.log_file)


def _gpu_result(gpu: GPU, o: _Outcome) -> dict[str, Any]:
    return {
        **gpu.to_json(),
        "ok": o.ok,
        "seconds": o.seconds,
        "environment": o.environment,
        "checks": o.checks,
        "log": None if o.log_file is None else str(o.log_file),
        "timeline": o.timeline,
        "early_cuda": o.early_cuda,
        **({"compile_part": o.compile_part} if o.compile_part else {}),
    }


def merge_checks(results: Sequence[_Outcome], gpus: Sequence[GPU]) -> list[dict[str, Any]]:
    """One result per check for every GPU: where it failed on any, the first failure (with
    ``failed_gpus``), else the first GPU's; each names its GPU (``gpu``). One worker: its own."""
    if not gpus:
        return results[0].checks
    merged: dict[str, dict[str, Any]] = {}
    failed: dict[str, list[int]] = {}
    for gpu, o in zip(gpus, results, strict=True):
        for c in o.checks:
            name = str(c.get("name"))
            if c.get("verdict") == "fail":
                failed.setdefault(name, []).append(gpu.index)
                if merged.get(name, {}).get("verdict") != "fail":
                    merged[name] = {**c, "gpu": gpu.index}
            elif name not in merged:
                merged[name] = {**c, "gpu": gpu.index}
    for name, where in failed.items():
        merged[name]["failed_gpus"] = where
    return list(merged.values())


def _start_loads(
    python: Path, base: dict[str, str], targets: Sequence[GPU]
) -> list[subprocess.Popen[str]]:
    """The planted competing loads (``ENVBUILD_SMOKE_LOAD_GPUS``), running before this returns."""
    procs = []
    for gpu in targets:
        env = {**base, "CUDA_VISIBLE_DEVICES": "" if gpu.fake else gpu.uuid}
        proc = subprocess.Popen(
            [str(python), str(LOAD_SCRIPT)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(proc)
        events.emit(
            "warn", f"planted: a competing matmul load on {gpu.describe()} (pid {proc.pid})"
        )
    for proc in procs:
        if proc.stdout is not None:
            proc.stdout.readline()  # "ENVBUILD_LOAD ready" (or the end of a load that failed)
    return procs


def _end_loads(loads: Sequence[subprocess.Popen[str]]) -> None:
    """Kill the planted competing loads and reap them."""
    for proc in loads:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
