"""``envbuild provision``: checks, layout, venv, each step in order with the ABI guard, full check.

Resumable: state lives in the manifest under the data root. A run killed anywhere (Ctrl-C,
SIGKILL) converges when run again; a run on a finished environment verifies and changes
nothing. A run that stopped on an ABI violation left a venv that cannot be trusted: the next
run moves it aside (never deletes it) and starts the venv over.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from envbuild import abi, events, layout
from envbuild._io import atomic_write_text
from envbuild.errors import ABIViolation, EnvbuildError, PreflightError
from envbuild.installer.core import (
    Interpreter,
    create_venv,
    find_interpreter,
    find_uv,
    probe_python,
    run_python_json,
    run_step,
)
from envbuild.net import unreachable
from envbuild.plan import Plan, PlannedStep, PlanOptions, make_plan, resolve_plan
from envbuild.provision import prefetch
from envbuild.provision.state import Manifest, now
from envbuild.spec import StackSpec

if TYPE_CHECKING:
    from envbuild.proof.receipt import HostSnapshot

T = TypeVar("T")
Choice = Literal["auto", "yes", "no"]


@dataclass(frozen=True, kw_only=True)
class ProvisionOptions:
    root: Path | None = None
    home: Path | None = None
    python: str | None = None
    venv: Path | None = None  # install into this existing environment instead of <root>/venv
    backend: str | None = None  # "pip", "uv", None: uv when available
    force_links: bool = False
    strict: bool = False
    only_step: str | None = None
    wheelhouse: str | None = None  # --offline --wheelhouse: the only package source
    locked: Mapping[str, Path] = field(default_factory=dict)
    no_lock: bool = False  # --no-lock: a lock beside the spec was bypassed (named in the receipt)
    compile_bytecode: Choice = "auto"  # uv backend; auto: yes on hosts with COMPILE_MIN_CPUS cores
    prefetch: Choice = "auto"  # auto: yes when a later step reads a remote index


# uv writes no .pyc files unless asked; then the first `import torch` of every process compiles
# what it loads (2-4 s for torch, on every rank of a job until one of them has written them).
# `uv pip install --compile-bytecode` compiles in parallel on every core: a loss on a 2-core
# machine, where the one import check compiles only what it loads, and measured in bench/ on
# the 16-core GPU machine.
COMPILE_MIN_CPUS = 8


def compiles_bytecode(option: Choice, backend: str, *, adopted: bool = False, cpus: int | None = None) -> bool:
    """Whether the uv steps pass ``--compile-bytecode`` (pip always compiles, unless told not to).

    ``auto`` never compiles in an environment adopted with ``--venv``: it is not ours to change.
    """
    if backend != "uv" or option == "no":
        return False
    if option == "yes":
        return True
    return not adopted and (cpus if cpus is not None else os.cpu_count() or 1) >= COMPILE_MIN_CPUS


@dataclass
class ProvisionResult:
    paths: layout.Paths
    plan: Plan
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    guard_seconds: list[float] = field(default_factory=list)
    full_check: dict[str, object] | None = None
    receipt: Path | None = None
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # wall seconds per phase
    lock: dict[str, object] = field(default_factory=dict)  # how the lock was used: the receipt's "lock"


def build_plan(spec: StackSpec, opts: ProvisionOptions) -> Plan:
    return resolve_plan(spec, backend=opts.backend, wheelhouse=opts.wheelhouse, locked=opts.locked)


@contextlib.contextmanager
def state_lock(paths: layout.Paths) -> Iterator[int]:
    """One provision per data root. The lock's fd is inherited by installer subprocesses, so an
    installer orphaned by a SIGKILL of envbuild keeps the root locked until it has finished."""
    paths.state.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            events.emit("warn", f"another provision (or an installer it left running) holds {paths.state / 'lock'}; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.set_inheritable(fd, True)
        yield fd
    finally:
        os.close(fd)


def provision(spec: StackSpec, opts: ProvisionOptions) -> ProvisionResult:
    t0 = time.monotonic()
    paths = layout.paths_for(spec, opts.root)
    if opts.venv is not None:
        paths = layout.Paths(root=paths.root, venv_name=str(opts.venv.expanduser().absolute()))
    _check_data_root(spec, paths)
    with state_lock(paths) as lock_fd, ThreadPoolExecutor(max_workers=2, thread_name_prefix="envbuild") as pool:
        try:
            return _provision(spec, opts, paths, lock_fd, t0, pool)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


class _Laps:
    """Wall time per phase, for the result and the receipt: where a provision's time went."""

    def __init__(self, t0: float) -> None:
        self.mark = t0
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        t = time.monotonic()
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + t - self.mark, 3)
        self.mark = t


def _provision(spec: StackSpec, opts: ProvisionOptions, paths: layout.Paths, lock_fd: int, t0: float,
               pool: ThreadPoolExecutor) -> ProvisionResult:
    from envbuild.proof import receipt as receipts

    # The receipt's host facts (nvidia-smi, compilers, git: up to a second on a GPU host) do not
    # depend on the install: they are gathered on a thread while the work goes on.
    host_facts = pool.submit(receipts.snapshot_host, spec)
    laps = _Laps(t0)
    plan = build_plan(spec, opts)
    result = ProvisionResult(paths=paths, plan=plan, timings=laps.seconds,
                             lock={"bypassed": opts.no_lock, "locked_steps": sorted(opts.locked)})
    backend = plan.options.backend
    if opts.only_step:
        plan.step(opts.only_step)  # unknown step: config error before anything changes

    manifest = Manifest.load(paths.manifest)
    if manifest.violation and opts.venv is None and paths.venv.exists():
        aside = paths.venv.with_name(f"{paths.venv.name}.untrusted-{time.strftime('%Y%m%d-%H%M%S')}")
        paths.venv.rename(aside)
        events.emit("warn", f"the last run stopped on an ABI violation ({manifest.violation}); "
                    f"the venv was moved aside to {aside} and is made again")
        manifest = Manifest(path=paths.manifest)
    reset = manifest.sync_steps([(s.name, s.digest) for s in plan.steps])
    if reset:
        events.emit("info", f"the spec changed: re-running {', '.join(reset)}")
    manifest.stack, manifest.spec_digest, manifest.backend = spec.name, spec.digest, backend

    todo = [s for s in plan.steps if manifest.state(s.name).status != "ok"
            and (opts.only_step is None or s.name == opts.only_step)]
    _check_sources(plan, todo)
    # the interpreter is a check too: find it before anything is created
    base_python = None
    if opts.venv is None and not paths.python.exists():
        base_python = find_interpreter(spec.python, opts.python)

    laps.lap("prepare")

    # layout first: the venv, caches and logs all live on the data root
    layout.create_folders(paths)
    home = (opts.home or Path.home()).expanduser()
    for line in layout.link_home(spec, paths, home, force=opts.force_links):
        events.emit("warn" if line.startswith("moved ") else "info", line)
    layout.write_overlay(spec, paths)
    python = _ensure_venv(spec, opts, paths, backend, manifest, lock_fd, base_python)
    layout.hook_activate(paths)
    if manifest.marker_env is None:
        probed = probe_python(python)
        if probed is None:
            raise PreflightError(f"the venv's python {python} does not run",
                                 hint="Move the venv away; the next run makes a new one.")
        manifest.marker_env = probed.marker_env
    site = abi.site_packages(paths.venv)
    env = _install_env(paths)
    if compiles_bytecode(opts.compile_bytecode, backend, adopted=opts.venv is not None):
        env["UV_COMPILE_BYTECODE"] = "1"
    elif backend == "uv" and opts.compile_bytecode == "no":
        env.pop("UV_COMPILE_BYTECODE", None)
    if spec.abi.adopt and manifest.baseline is None:
        manifest.baseline = _take_baseline(spec, site, manifest, paths, adopted=True)
    manifest.save()
    laps.lap("venv")

    _run_steps(spec, opts, plan, manifest, paths, python, site, env, result, lock_fd)
    laps.lap("steps")
    # the environment is final: its inventory for the receipt runs beside the import check
    software = pool.submit(receipts.inventory, python)
    last = plan.steps[-1].name
    if opts.only_step is None or opts.only_step == last:
        _final_check(spec, manifest, site, python, result)
        manifest.finished = now()
        manifest.save()
        laps.lap("import_check")
    result.seconds = time.monotonic() - t0
    result.receipt = _write_receipt(spec, paths, python, result, host=_or_none(host_facts),
                                    software=_or_none(software))
    laps.lap("receipt")
    return result


def _or_none(future: Future[T]) -> T | None:
    """A helper thread's answer, or None where it failed (the receipt then gathers it itself)."""
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - the receipt's fallback is to gather it again, in line
        return None


def _run_steps(spec: StackSpec, opts: ProvisionOptions, plan: Plan, manifest: Manifest, paths: layout.Paths,
               python: Path, site: Path, env: dict[str, str], result: ProvisionResult, lock_fd: int) -> None:
    todo = [s for s in plan.steps if manifest.state(s.name).status != "ok"]
    prefetcher = None
    if opts.only_step is None and prefetch.wanted(opts.prefetch, todo):
        # the next step's exact pins download into the same cache while this step installs
        prefetcher = prefetch.Prefetcher(backend=plan.options.backend, python=python, uv=find_uv(),
                                         scratch_root=paths.cache / "prefetch", logs=paths.logs, env=env)
    try:
        for planned in plan.steps:
            state = manifest.state(planned.name)
            if opts.only_step and planned.name != opts.only_step:
                if planned.number < plan.step(opts.only_step).number and state.status != "ok":
                    raise PreflightError(
                        f"--step {opts.only_step}: the earlier step {planned.name!r} has not run ({state.status}); "
                        "run the steps in order (or provision without --step)")
                continue
            if state.status == "ok":
                result.skipped.append(planned.name)
                continue
            if prefetcher is not None:
                prefetcher.wait(planned.name)  # never race the real install of the same step
                later = todo[todo.index(planned) + 1:] if planned in todo else []
                if later and prefetcher.start(later[0]) is not None:
                    events.emit("debug", f"prefetching step {later[0].name} while {planned.name} installs")
            _run_one(spec, opts, planned, manifest, paths, python, site, env, result, lock_fd)
    finally:
        if prefetcher is not None:
            prefetcher.close()


def _check_data_root(spec: StackSpec, paths: layout.Paths) -> None:
    root = paths.root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PreflightError(f"cannot create the data root {root}: {exc.strerror}",
                             hint="Choose another with --root, or create it and make it writable.") from None
    if not os.access(root, os.W_OK):
        raise PreflightError(f"the data root {root} is not writable by this user",
                             hint="Fix its permissions, or choose another with --root.")
    free_gb = shutil.disk_usage(root).free / 1e9
    if free_gb < spec.layout.min_free_gb:
        raise PreflightError(
            f"the data root {root} has {free_gb:.1f} GB free; the stack needs at least {spec.layout.min_free_gb:g} GB "
            "(layout.min_free_gb)", hint="Free space, or choose a larger disk with --root.")
    if spec.layout.separate_root_fs and os.stat(root).st_dev == os.stat("/").st_dev:
        events.emit("warn", f"the data root {root} is on the root filesystem; pip caches and torch wheels "
                    "can fill a small root disk (mount the data disk there, or use --root)")


def _check_sources(plan: Plan, todo: list[PlannedStep]) -> None:
    if not todo:
        return
    locations = make_plan(plan.spec, PlanOptions(backend=plan.options.backend, wheelhouse=plan.options.wheelhouse,
                                                 default_sources=plan.options.default_sources)).sources()
    wanted = {a for s in todo for a in s.args}
    bad = unreachable(loc for loc in locations if loc in wanted)
    if bad:
        try:
            names = sorted(set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", plan.spec.path.read_text())))
        except OSError:
            names = []
        via = f" ({plan.spec.path} reads {', '.join(names)})" if names else ""
        raise PreflightError(
            "package sources the plan needs do not answer: " + "; ".join(bad),
            hint=f"Check the network and the URLs in the stack spec or the variables they expand from{via}, "
            "or install from a mirrored wheelhouse with --offline --wheelhouse DIR." + _empty_var_fix(plan.spec))


def _empty_var_fix(spec: StackSpec) -> str:
    """The exact command that takes pip's configured sources instead of a ``${VAR-default}`` URL."""
    import shlex
    import sys

    try:
        names = sorted(set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)-", spec.path.read_text())))
    except OSError:
        return ""
    unset = [n for n in names if n not in os.environ]
    if not unset:
        return ""
    args = sys.argv[1:] if "provision" in sys.argv[1:] else ["provision", "--stack", str(spec.path)]
    command = " ".join(f"{n}=" for n in unset) + " envbuild " + shlex.join(args)
    return (f" To use the sources pip is configured with (pip.conf, PIP_*) instead of the default "
            f"{'URLs' if len(unset) > 1 else 'URL'} of {', '.join(unset)}, set {'them' if len(unset) > 1 else 'it'} "
            f"empty: `{command}`")


def _ensure_venv(spec: StackSpec, opts: ProvisionOptions, paths: layout.Paths, backend: str,
                 manifest: Manifest, lock_fd: int, base_python: Interpreter | None = None) -> Path:
    python = paths.python
    if opts.venv is not None:
        if not python.exists():
            raise PreflightError(f"--venv {opts.venv}: no environment there (no {python})")
        manifest.venv = str(paths.venv)  # so `verify --venv` finds this manifest's baseline
        return python
    if paths.venv.is_dir() and any(paths.venv.iterdir()) and manifest.venv != str(paths.venv):
        # Not recorded as made by envbuild: a creation cut short (Ctrl-C, SIGKILL), or not ours.
        # Either way it is not trusted, and nothing of the user's is deleted.
        aside = paths.venv.with_name(f"{paths.venv.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}")
        paths.venv.rename(aside)
        events.emit("warn", f"{paths.venv} was never recorded as complete (a run stopped while creating it?); "
                    f"moved aside to {aside}, making it again")
    if python.exists():
        probed = probe_python(python)
        if probed is None:
            raise PreflightError(f"the venv at {paths.venv} is broken (its python does not run)",
                                 hint="Move it away; the next run makes a new one.")
        if probed.version != spec.python and opts.python is None:
            raise PreflightError(f"the venv at {paths.venv} is Python {probed.version}, the stack asks for {spec.python}",
                                 hint="Move it away to have it made again with the right interpreter.")
        if manifest.marker_env is None:
            manifest.marker_env = probed.marker_env
        return python
    base = base_python or find_interpreter(spec.python, opts.python)
    for state in manifest.steps:  # a new venv: nothing in it has run
        state.status = "pending"
    manifest.baseline = None
    seed = ("--no-index", "--find-links", opts.wheelhouse) if opts.wheelhouse else ()
    create_venv(base.executable, paths.venv, backend, paths.logs / "venv.log", seed_sources=seed,  # type: ignore[arg-type]
                pass_fds=(lock_fd,))
    manifest.python, manifest.venv = str(base.executable), str(paths.venv)
    manifest.marker_env = base.marker_env  # a venv's marker variables are its interpreter's
    manifest.save()  # the venv is complete: from now on it is ours
    return python


def _install_env(paths: layout.Paths) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    cache = paths.cache_env()
    env["PIP_CACHE_DIR"] = cache["PIP_CACHE_DIR"]
    env["UV_CACHE_DIR"] = cache["UV_CACHE_DIR"]  # same filesystem as the venv: uv hard-links from it
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return env


def _take_baseline(spec: StackSpec, site: Path, manifest: Manifest, paths: layout.Paths,
                   adopted: bool = False) -> dict[str, object]:
    try:
        base = abi.take_baseline(spec.abi, site, manifest.marker_env or {}, stamp=not adopted)
    except LookupError:
        where = "the environment" if adopted else "the venv after the baseline step"
        raise ABIViolation(f"{spec.abi.package} is not installed in {where} ({site})") from None
    if base.version != spec.abi.version:
        source = "the base environment has" if adopted else "the baseline step installed"
        raise ABIViolation(
            f"{source} {spec.abi.package} {base.version}, but the spec says abi.version = {spec.abi.version}",
            hint="Fix abi.version, or the baseline step's pin / the base image, so they agree.")
    pins = "\n".join(base.pins())
    atomic_write_text(paths.constraints, f"# envbuild: the ABI baseline, frozen after the baseline step\n{pins}\n")
    events.emit("info", f"baseline frozen: {', '.join(base.pins())}")
    return base.to_json()


def _run_one(spec: StackSpec, opts: ProvisionOptions, planned: PlannedStep, manifest: Manifest,
             paths: layout.Paths, python: Path, site: Path, env: dict[str, str], result: ProvisionResult,
             lock_fd: int) -> None:
    state = manifest.state(planned.name)
    total = len(result.plan.steps)
    events.emit("step", f"step {planned.number}/{total} {planned.name}: {' '.join(planned.requirements)}")
    log_file = paths.logs / f"{planned.number:02d}-{planned.name}.log"
    state.status, state.started, state.ended, state.log, state.error = "running", now(), None, str(log_file), None
    manifest.save()
    constraints = None
    step_env = dict(env)
    if planned.constrained:
        if manifest.baseline is None:
            manifest.baseline = _take_baseline(spec, site, manifest, paths)
        constraints = paths.constraints
        step_env["PIP_CONSTRAINT"] = str(constraints)  # reaches pip's isolated build envs too
        step_env["UV_BUILD_CONSTRAINT"] = str(constraints)
    before = abi.scan(site)
    t = time.monotonic()
    try:
        run_step(planned, spec=spec, backend=result.plan.options.backend, python=python,
                 state_dir=paths.state, constraints=constraints, log_file=log_file, base_env=step_env,
                 pass_fds=(lock_fd,))
        if planned.role == "baseline":
            manifest.baseline = _take_baseline(spec, site, manifest, paths)
    except EnvbuildError as exc:
        state.status, state.ended, state.error = "failed", now(), exc.message
        manifest.save()
        raise
    state.seconds = round(time.monotonic() - t, 3)
    if manifest.baseline is not None:
        report = abi.check(spec, abi.Baseline.from_json(manifest.baseline), site,
                           no_deps_names=planned.step.names if planned.step.no_deps else (),
                           marker_env=manifest.marker_env)
        state.guard_seconds = round(report.seconds, 4)
        result.guard_seconds.append(report.seconds)
        state.warnings = [f.message for f in report.warnings]
        for f in report.warnings:
            events.emit("warn", f"step {planned.name}: {f.message} (left unmet by --no-deps)")
            result.warnings.append(f.message)
        if not report.ok or (opts.strict and report.warnings):
            findings = report.violations or report.warnings
            message = _violation_message(planned, findings, before, abi.scan(site))
            state.status, state.ended, state.error = "failed", now(), message
            if report.violations:
                manifest.violation = f"step {planned.name}: {findings[0].message}"
            manifest.save()
            raise ABIViolation(message, hint=_violation_hint(findings, paths))
    state.status, state.ended = "ok", now()
    manifest.save()
    result.ran.append(planned.name)
    events.emit("ok", f"step {planned.name} ({state.seconds:.1f} s, guard {1000 * (state.guard_seconds or 0):.0f} ms)")


def _violation_message(planned: PlannedStep, findings: list[abi.Finding],
                       before: Mapping[str, abi.Dist], after: Mapping[str, abi.Dist]) -> str:
    lines = [f"ABI guard after step {planned.number} ({planned.name!r}): " + findings[0].message]
    lines += [f"  also: {f.message}" for f in findings[1:4]]
    lines += abi.culprits(findings[0], before, after, planned.step.names)
    return "\n".join(lines)


def _violation_hint(findings: list[abi.Finding], paths: layout.Paths) -> str:
    rule = findings[0].rule
    fixes = {
        "version": "Install the packages that pulled it in with no_deps = true, or pin versions whose torch requirement the baseline satisfies.",
        "reinstalled": "Remove reinstall/upgrade from that step, or install its packages with no_deps = true.",
        "protected": "Install the package that pulled it in with no_deps = true.",
        "modified": "Something edited installed files in place; provision again to start from clean files.",
        "triton": "Install that package with no_deps = true: the baseline's triton provider already supplies the module.",
        "overlap": "Acknowledge the overlap with [[abi.overlap]] (packages, winner) and order the steps so the winner installs last, or drop one package.",
        "provenance": "Rebuild the wheel against the installed torch with `envbuild wheelhouse build`.",
        "unmet": "Pin the missing versions in a later step, or use matching versions (--strict makes this an error).",
    }
    return f"{fixes.get(rule, 'Fix the stack spec.')} The next provision moves this venv aside and starts over. Logs: {paths.logs}"


def _final_check(spec: StackSpec, manifest: Manifest, site: Path, python: Path, result: ProvisionResult) -> None:
    if manifest.baseline is None:
        raise ABIViolation(f"no baseline was recorded for {spec.abi.package}; the environment cannot be verified")
    # The last step's guard has just checked this very state; a run that installed nothing
    # (a re-run, --step of the last step only after a stop) checks it here.
    guarded_now = bool(result.ran) and result.ran[-1] == result.plan.steps[-1].name
    report = abi.GuardReport() if guarded_now else abi.check(spec, abi.Baseline.from_json(manifest.baseline), site,
                                                         marker_env=manifest.marker_env)
    if not report.ok:
        manifest.violation = report.violations[0].message
        manifest.save()
        raise ABIViolation("the environment no longer matches its baseline: "
                           + "; ".join(f.message for f in report.violations),
                           hint="Something outside envbuild changed the venv. Run provision again to rebuild it.")
    try:
        data = run_python_json(python, abi.FULL_CHECK)
    except Exception as exc:
        raise ABIViolation(f"`import {spec.abi.package}` fails in the finished venv: {exc}") from None
    problems = abi.full_check_result(spec, data)
    if problems:
        raise ABIViolation("full import check: " + "; ".join(f.message for f in problems))
    result.full_check = data
    events.emit("ok", f"import {spec.abi.package}: {data.get('version')} (cuda {data.get('cuda')})")


def _write_receipt(spec: StackSpec, paths: layout.Paths, python: Path, result: ProvisionResult,
                   host: HostSnapshot | None = None, software: dict[str, Any] | None = None) -> Path:
    from envbuild.proof.receipt import write_receipt

    manifest = Manifest.load(paths.manifest)
    payload = {
        "ran": result.ran,
        "skipped": result.skipped,
        "warnings": result.warnings,
        "seconds": round(result.seconds, 3),
        "backend": result.plan.options.backend,
        "steps": [{"name": s.name, "status": s.status, "seconds": s.seconds, "guard_seconds": s.guard_seconds,
                   "started": s.started, "ended": s.ended} for s in manifest.steps],
        "full_check": result.full_check,
        "timings": result.timings,
        "lock": result.lock,
    }
    return write_receipt(paths, "provision", payload, spec=spec, python=python, host=host, software=software)
