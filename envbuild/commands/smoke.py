"""``envbuild smoke``: kernel smoke tests inside the target venv, each against a reference. Exit 7
on a failure.

Also holds the target-venv arguments that ``dist-step`` shares (``--root``, ``--venv``,
``--python``, ``--no-receipt``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import (
    ROOT_ENV,
    Handler,
    JsonArgs,
    RootArgs,
    StackArgs,
    Subparsers,
    add_json_arg,
    add_root_arg,
    add_stack_args,
    find_environment,
    lock_recorded,
    path_arg,
    seconds_arg,
)
from envbuild.errors import ExitCode, PreflightError
from envbuild.layout import Paths, overlay_env
from envbuild.proof.provenance import Provenance, capture
from envbuild.proof.smoke.gpus import DEFAULT_SLOW_MARGIN
from envbuild.spec import StackSpec

if TYPE_CHECKING:
    from envbuild.commands.documents import SmokeDocument
    from envbuild.nvidia import GPU
    from envbuild.projectlock.record import SmokeSelection
    from envbuild.proof.receipt import (
        HostSnapshot,
        ReceiptKind,
        ReceiptPayload,
        SmokePayload,
        SmokeTimingJSON,
        SoftwareJSON,
    )
    from envbuild.proof.smoke import SmokeResult


@dataclass(frozen=True)
class TargetArgs(StackArgs, JsonArgs, RootArgs):
    """``add_target_args``: the environment ``smoke`` and ``dist-step`` test, and its receipt."""

    venv: Path | None
    python: Path | None
    no_receipt: bool


@dataclass(frozen=True)
class SmokeArgs(TargetArgs):
    """``smoke``'s options."""

    only: list[str]
    quick: bool
    timeout: float
    gpus: tuple[int, ...] | None
    slow_margin: float | None


def add_target_args(p: argparse.ArgumentParser) -> None:
    add_stack_args(p)
    add_json_arg(p)
    add_root_arg(p, "data root: the venv, and where receipts and logs go")
    p.add_argument("--venv", type=path_arg, help="the venv to test (default: the root's venv)")
    p.add_argument(
        "--python", type=path_arg, help="an interpreter to test instead of a venv's bin/python"
    )
    p.add_argument("--no-receipt", action="store_true", help="do not write a receipt")


def resolve_target(args: TargetArgs) -> tuple[StackSpec, Paths, Path]:
    found = find_environment(args)
    if args.python:
        python = args.python.expanduser()
    elif args.venv:
        python = args.venv.expanduser().absolute() / "bin" / "python"
    else:
        python = found.venv / "bin" / "python"
    if not python.exists():  # refused before anything is made under the data root
        raise PreflightError(
            f"no Python interpreter at {python}: the venv is missing or incomplete (root"
            f" {found.paths.root}, {found.why})",
            hint=(
                "Provision it first (envbuild provision --root DIR), then activate the venv it"
                f" made or export {ROOT_ENV}=DIR; or point --venv at an existing venv."
            ),
        )
    return found.spec, found.paths, python


class ReceiptFacts:
    """What a receipt records beside the result, taken on a thread while the proof runs: the
    provenance (the git state as the command starts, before torch is imported), the host
    (``nvidia-smi``, compilers) and the venv's inventory (a subprocess in the venv). None of it
    depends on the proof's outcome, and taken after it they added about a second to every run
    (bench/README.md). What the thread could not take, ``write_receipt`` takes (and reports)."""

    def __init__(self, spec: StackSpec, python: Path, regime: str) -> None:
        self.spec, self.python, self.regime = spec, python, regime
        self.provenance: Provenance | None = None
        self.host: HostSnapshot | None = None
        self.software: SoftwareJSON | None = None
        self._thread = threading.Thread(
            target=self._take, name="envbuild-receipt-facts", daemon=True
        )

    @classmethod
    def start(
        cls, args: TargetArgs, spec: StackSpec, python: Path, regime: str
    ) -> ReceiptFacts | None:
        """Start taking them; None with ``--no-receipt`` (nothing is taken)."""
        if args.no_receipt:
            return None
        facts = cls(spec, python, regime)
        facts._thread.start()
        return facts

    def _take(self) -> None:
        from envbuild.proof.receipt import inventory, snapshot_host

        with contextlib.suppress(Exception):
            self.provenance = capture(profile=self.spec.name, launch_regime=self.regime)
            self.host = snapshot_host(self.spec, provenance=self.provenance)
            self.software = inventory(self.python)

    def wait(self) -> None:
        self._thread.join()


def save_receipt(
    paths: Paths,
    kind: ReceiptKind,
    payload: ReceiptPayload,
    *,
    spec: StackSpec,
    python: Path,
    facts: ReceiptFacts | None,
) -> str | None:
    """Write the receipt (None: ``--no-receipt``, whose ``facts`` are None, or a data root that
    cannot take it, said in a warning)."""
    if facts is None:
        return None
    from envbuild.proof.receipt import write_receipt

    facts.wait()
    try:
        return str(
            write_receipt(
                paths,
                kind,
                payload,
                spec=spec,
                python=python,
                provenance=facts.provenance,
                host=facts.host,
                software=facts.software,
            )
        )
    except OSError as exc:
        events.emit(
            "warn",
            f"could not write the receipt under {paths.receipts}: {exc.strerror or exc}; "
            "pass --root DIR for a writable data root, or --no-receipt",
        )
        return None


def log_path(paths: Paths, name: str) -> Path | None:
    """``<root>/logs/<name>`` when the data root can take it (the run goes on without a log
    otherwise)."""
    try:
        paths.logs.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return paths.logs / name if os.access(paths.logs, os.W_OK) else None


PROOF_BYTECODE_ENV = "ENVBUILD_PROOF_BYTECODE"  # "0": the proofs honour PYTHONDONTWRITEBYTECODE


def target_env(spec: StackSpec, paths: Paths) -> dict[str, str]:
    """The caller's environment with the venv's overlay (caches on the data root, the baseline).

    Bytecode writing is on (``PYTHONDONTWRITEBYTECODE`` is not passed on): pip writes every
    installed module's bytecode at install whatever that variable says, uv does not, so in a
    venv uv made under it every process would compile the ~1,100 modules of ``import torch``
    from source again (2.9 CPU s more per process on 2 vCPUs; smoke's imports 2,500 modules and
    dist-step starts 3 such processes; bench/README.md).
    The proofs' imports leave the bytecode in the venv, where a later run, and the user's own
    processes, read it even with the variable set. ``ENVBUILD_PROOF_BYTECODE=0`` keeps the
    variable (the Dockerfiles set it: a smoke layer would otherwise add torch's bytecode, about
    1,800 files under ``torch/``, to a layer after torch's)."""
    env = dict(os.environ)
    if env.get(PROOF_BYTECODE_ENV) != "0":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(overlay_env(spec, paths))
    return env


def warm_after_provision(
    spec: StackSpec, paths: Paths, venv: Path, selection: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """``--warm-kernels``: the kernel checks that compile, run once in ``venv`` with the
    environment smoke gives its workers (``proof.warm``); said in a line, never a failure
    of the provision (a check that fails is smoke's to report: a warning here)."""
    from envbuild.errors import EnvbuildError
    from envbuild.proof.warm import warm_kernels

    try:
        warmed = warm_kernels(
            venv / "bin" / "python",
            target_env(spec, paths),
            selection=selection,
            log_file=log_path(paths, "warm-kernels.log"),
        )
    except EnvbuildError as exc:
        events.emit("warn", f"--warm-kernels: the kernel checks did not run: {exc.message}")
        return {"error": exc.message}
    doc = warmed.to_json()
    if warmed.skipped:
        events.emit("info", f"--warm-kernels: nothing compiled ({warmed.skipped})")
    elif warmed.failed:
        names = ", ".join(str(r.get("name")) for r in warmed.failed)
        events.emit(
            "warn",
            f"--warm-kernels: {names} failed on {warmed.gpu.describe() if warmed.gpu else 'CPU'}; "
            "`envbuild smoke` says why",
        )
    else:
        where = warmed.gpu.label if warmed.gpu else "CPU"
        events.emit(
            "ok",
            f"kernel caches warmed on {where} in {warmed.seconds:.1f} s: "
            f"{', '.join(warmed.compiled) or 'nothing to compile (those packages are absent)'}"
            f" (under {paths.cache})",
        )
    return doc


def register(sub: Subparsers) -> None:
    from envbuild.proof.smoke import CHECK_NAMES

    p = sub.add_parser(
        "smoke",
        help="kernel smoke tests in the venv, each against a reference",
        description="Run kernel smoke tests with the venv's python. Exit 7 when a check fails.",
    )
    add_target_args(p)
    p.add_argument(
        "--only",
        action="append",
        default=[],
        choices=CHECK_NAMES,
        metavar="CHECK",
        help=f"run only these checks (repeatable): {', '.join(CHECK_NAMES)}",
    )
    p.add_argument("--quick", action="store_true", help="a shorter matmul benchmark")
    p.add_argument(
        "--timeout",
        type=seconds_arg(),
        default=900.0,
        metavar="S",
        help="give up after S seconds (default 900)",
    )
    p.add_argument(
        "--gpus",
        type=_gpus_arg,
        default=None,
        metavar="LIST",
        help=(
            "the GPUs to test, one worker process each, all at once: nvidia-smi "
            "indices (0,3) or all (the default: every visible GPU)"
        ),
    )
    p.add_argument(
        "--slow-margin",
        type=_margin_arg,
        default=DEFAULT_SLOW_MARGIN,
        metavar="F",
        help=(
            "a GPU this fraction below its peers' median TFLOP/s is slow and fails "
            "smoke (default 0.1; 10%% works too; off: no comparison)"
        ),
    )
    p.set_defaults(func=Handler(run, SmokeArgs))


def _gpus_arg(text: str) -> tuple[int, ...] | None:
    from envbuild.proof.smoke.gpus import parse_gpu_list

    try:
        return parse_gpu_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _margin_arg(text: str) -> float | None:
    if text.strip() == "off":
        return None
    try:
        value = float(text.strip().rstrip("%")) / (100 if text.strip().endswith("%") else 1)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a fraction such as 0.1, 10% or off"
        ) from exc
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the margin is a fraction between 0 and 1 (or off)"
        )
    return value


def run(args: SmokeArgs) -> int:
    from envbuild.proof.smoke import run_smoke
    from envbuild.proof.smoke.smoke_early import process_started

    # this process's moments ([name, time.time()]): where a run's seconds went on this side
    parent: list[list[Any]] = [["process", process_started()], ["command", time.time()]]
    spec, paths, python = resolve_target(args)
    env = target_env(spec, paths)
    gpus = _chosen_gpus(args, env, parent)
    regime = f"per-gpu {len(gpus)} workers" if gpus else "single-process"
    facts = ReceiptFacts.start(args, spec, python, regime)
    log = log_path(paths, "smoke.log")
    chosen = _lock_checks(args, python)
    only, imports = (chosen.only, chosen.imports) if chosen else (tuple(args.only), ())
    if gpus:
        events.emit("info", f"one worker per GPU, at once: {', '.join(g.describe() for g in gpus)}")
    res = run_smoke(
        python,
        only=only,
        imports=imports,
        quick=args.quick,
        log_file=log,
        env=env,
        timeout=args.timeout,
        gpus=gpus,
        slow_margin=args.slow_margin,
    )
    payload = _payload(res, parent, regime, args.slow_margin, chosen)
    receipt = save_receipt(paths, "smoke", payload, spec=spec, python=python, facts=facts)
    payload["timing"]["parent"].append(["output", time.time()])  # in the document, not the receipt
    if args.json:
        doc: SmokeDocument = {
            "schema": "envbuild.smoke/1",
            **payload,
            "checks": res.checks,
            "receipt": receipt,
        }
        if res.gpus:
            doc["gpus"] = res.gpus  # type: ignore[typeddict-item]
        ui.print_json(doc)
    else:
        _print_result(res, python, log, receipt)
    return 0 if res.ok else int(ExitCode.VERIFY)


def _chosen_gpus(args: SmokeArgs, env: dict[str, str], parent: list[list[Any]]) -> list[GPU]:
    """The GPUs to run one worker each on (``--gpus``); none for one real GPU or none at all:
    one worker, as CUDA sees the host."""
    from envbuild.proof.smoke.gpus import select, visible_gpus

    gpus = select(visible_gpus(env), args.gpus)
    parent.append(["gpus listed", time.time()])
    if args.gpus is None and len(gpus) == 1 and not gpus[0].fake:
        return []
    return gpus


def _lock_checks(args: SmokeArgs, python: Path) -> SmokeSelection | None:
    """Provisioned from a lock (and no ``--only``): the checks of what it installed, said in a
    line (``envbuild.projectlock``: a tenth of a second of imports, only for a venv whose record has
    a lock section)."""
    if args.only or not lock_recorded(python.parent.parent):
        return None
    from envbuild.projectlock.record import read_record, smoke_selection

    lock = read_record(python.parent.parent)
    if lock is None:
        return None
    chosen = smoke_selection(lock)
    events.emit(
        "info",
        f"checks for what {chosen.lock_file} installed: {', '.join(chosen.only)}"
        + (f"; imports of {', '.join(chosen.imports)}" if chosen.imports else ""),
    )
    return chosen


def _payload(
    res: SmokeResult,
    parent: list[list[Any]],
    regime: str,
    slow_margin: float | None,
    chosen: SmokeSelection | None,
) -> SmokePayload:
    """The ``smoke`` receipt's payload (its tracebacks left out), with where the seconds went."""
    timing: SmokeTimingJSON = {
        "launched_at": res.started,
        "timeline": res.timeline,
        "parent": [*parent, *res.parent],
        "early_cuda": res.early_cuda,
    }
    if res.compile_part:
        timing["compile_part"] = res.compile_part
    payload: SmokePayload = {
        "ok": res.ok,
        "seconds": res.seconds,
        "environment": res.environment,
        "checks": [{k: v for k, v in c.items() if k != "traceback"} for c in res.checks],
        "launch_regime": regime,
        "timing": timing,
        "slow": res.slow,
        "slow_margin": slow_margin,
    }
    if res.gpus:
        payload["gpus"] = [
            {
                **g,  # type: ignore[typeddict-item]
                "checks": [{k: v for k, v in c.items() if k != "traceback"} for c in g["checks"]],
            }
            for g in res.gpus
        ]
    if chosen:
        payload["selection"] = chosen.to_json()
    return payload


def _print_result(res: SmokeResult, python: Path, log: Path | None, receipt: str | None) -> None:
    """The lines per GPU, the verdict, and where the receipt and the logs are."""
    for line in gpu_lines(res):
        ui.print_text(line)
    ui.print_text(_summary(res.ok, res.checks, res.seconds, res.environment, python, res.slow))
    logs = log.with_name(f"{log.stem}-gpu*.log") if log and res.gpus else log
    for what, where in (("receipt", receipt), ("log", logs)):
        if where:
            ui.print_text(f"  {what:<8}{where}")


def gpu_lines(res: SmokeResult) -> list[str]:
    """Per GPU, one line (which GPU, its verdict, its failed checks or its matmul rate), then the
    slow GPUs; nothing for one worker (its checks' lines said it all)."""
    from envbuild.proof.smoke import rate
    from envbuild.proof.smoke.gpus import describe_finding

    lines = []
    for g in res.gpus:
        checks = g["checks"]
        failed = [c for c in checks if c.get("verdict") == "fail"]
        passed = sum(c.get("verdict") == "pass" for c in checks)
        mm: dict[str, Any] = next((c for c in checks if c.get("name") == "matmul"), {})
        if failed:
            what = "FAILED: " + "; ".join(
                f"{c.get('name')}: {c.get('reason') or ''}"[:120] for c in failed
            )
        else:
            shown = rate(mm.get("tflops"))
            what = f"ok, {passed} passed" + (f", matmul {shown}" if shown else "")
        lines.append(
            f"  GPU {g['index']}  {g['uuid']}  PCI {g['bus_id']}  {g['seconds']:.1f} s  {what}"
        )
    for f in res.slow:
        lines.append(("  SLOW " if f.get("verdict") == "fail" else "  warn ") + describe_finding(f))
    return lines


def _summary(
    ok: bool,
    checks: list[dict[str, Any]],
    seconds: float,
    env: dict[str, Any],
    python: Path,
    slow: list[dict[str, Any]] | None = None,
) -> str:
    """The verdict first, then the counts: each check's own line was printed as it finished."""
    counts = {
        word: sum(c.get("verdict") == v for c in checks)
        for v, word in (("pass", "passed"), ("fail", "failed"), ("skip", "skipped"))
    }
    shown = ", ".join(f"{n} {word}" for word, n in counts.items() if n) or "no checks"
    bad = sorted({i for c in checks for i in c.get("failed_gpus", [])})
    if bad:
        shown += f" (failed on GPU {', '.join(map(str, bad))})"
    slow_gpus = sorted({f["index"] for f in slow or () if f.get("verdict") == "fail"})
    if slow_gpus:
        shown += f"; GPU {', '.join(map(str, slow_gpus))} slow"
    where = (
        f"torch {env.get('torch')} on {env.get('device') or 'CPU'}"
        if env.get("torch")
        else str(python)
    )
    return f"{'smoke passed' if ok else 'smoke FAILED'}: {shown} in {seconds:.1f} s ({where})"
