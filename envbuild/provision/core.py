"""``envbuild provision``: checks, layout, venv, each step in order with the ABI guard, full check.

Resumable: state lives in the manifest under the data root. A run killed anywhere (Ctrl-C,
SIGKILL) converges when run again; a run on a finished environment verifies and changes
nothing. A run that stopped on an ABI violation left a venv that cannot be trusted: the next
run moves it aside (never deletes it) and starts the venv over.

A refused run leaves nothing behind: every check that can refuse (the step order of
``--step``, ``--venv``, the interpreter, the package sources, the data root's space) runs
before the data root, its lock, the links or the venv are made.

- ``steps.py``: the run context (``ProvisionRun``) and one guarded step;
- ``verify.py``: the final check (guard + ``import torch``, its verdict cache), shared with
  ``envbuild verify``;
- ``state.py``: the manifest; ``prefetch.py``: the next step's downloads in the background;
- ``sources.py``: where the steps to run take their files (a locked file from any source that
  serves its sha256), and a step's identity in the manifest.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from packaging.utils import canonicalize_name

from envbuild import events, guard, layout
from envbuild._io import atomic_write_json, synced_at_end
from envbuild.errors import (
    ABIViolation,
    ConfigError,
    EnvbuildError,
    ExitCode,
    InstallError,
    Interrupted,
    PreflightError,
)
from envbuild.installer import (
    Interpreter,
    find_interpreter,
    installer_for,
    probe_python,
    resolve_plan,
)
from envbuild.installer.pip import refuse_without_pip
from envbuild.plan import Plan
from envbuild.provision import restore, warmup
from envbuild.provision.options import ProvisionOptions, ProvisionResult
from envbuild.provision.sources import route_sources, step_identity
from envbuild.provision.state import Manifest, now
from envbuild.provision.steps import (
    ProvisionRun,
    check_warmup,
    drop_trees,
    freeze_baseline,
    import_listing,
    refuse_out_of_order,
    run_steps,
)
from envbuild.provision.verify import (
    FinalCheck,
    ImportHang,
    final_check,
    remember_software,
)
from envbuild.spec import StackSpec
from envbuild.wheelhouse.sharedcache import open_shared

if TYPE_CHECKING:
    from envbuild.proof.receipt import (
        HostSnapshot,
        ProvisionFailureJSON,
        ProvisionPayload,
        SoftwareJSON,
        VenvAfterFailureJSON,
    )

T = TypeVar("T")


def build_plan(spec: StackSpec, opts: ProvisionOptions) -> Plan:
    from envbuild.stacklock.serve import built_wheels

    built = built_wheels(opts.locked) if opts.wheelhouse and opts.locked else {}
    return resolve_plan(
        spec,
        backend=opts.backend,
        wheelhouse=opts.wheelhouse,
        locked=opts.locked,
        built_wheels=built,
    )


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
            events.emit(
                "warn",
                f"another provision (or an installer it left running) holds {paths.state / 'lock'};"
                " waiting for it",
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.set_inheritable(fd, True)
        yield fd
    finally:
        os.close(fd)


class _Laps:
    """Wall time per phase, for the result and the receipt: where a provision's time went."""

    def __init__(self, t0: float) -> None:
        self.t0 = self.mark = t0
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        t = time.monotonic()
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + t - self.mark, 3)
        self.mark = t


def provision(spec: StackSpec, opts: ProvisionOptions) -> ProvisionResult:
    t0 = time.monotonic()
    paths = layout.paths_for(spec, opts.root)
    if opts.venv is not None:
        paths = layout.Paths(
            root=paths.root, venv_name=str(layout.checked_path(opts.venv, "--venv"))
        )
    plan = build_plan(spec, opts)
    if opts.only_step:
        plan.step(opts.only_step)  # unknown step: config error before anything changes
    identities = _identities(plan)
    base_python, plan = _refusals(spec, opts, paths, plan, identities)
    _make_data_root(paths)
    with (
        state_lock(paths) as lock_fd,
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="envbuild") as pool,
    ):
        try:
            return _provision(
                spec, opts, paths, plan, identities, base_python, lock_fd, _Laps(t0), pool
            )
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def _identities(plan: Plan) -> list[tuple[str, str, str]]:
    """(name, ``step_identity``, ``PlannedStep.digest``) of every step, in order, for ``_sync``."""
    return [(s.name, step_identity(s), s.digest) for s in plan.steps]


def pending_steps(
    spec: StackSpec, opts: ProvisionOptions, paths: layout.Paths | None = None
) -> list[str]:
    """The steps ``provision(spec, opts)`` would run into ``paths`` (read only: the manifest is not
    written): ``Manifest.pending`` on the plan's identities, everything where there is no usable
    manifest (none, unreadable, or one stopped on an ABI violation). The offline check, the lock
    path's host probe and the ``from_env`` check ask this, as provision itself does."""
    paths = paths or layout.paths_for(spec, opts.root)
    plan = build_plan(spec, opts)
    try:
        snapshot = Manifest.load(paths.manifest)
    except ConfigError:
        snapshot = Manifest(path=paths.manifest)
    if snapshot.violation:
        snapshot = Manifest(path=paths.manifest)
    _put_back(snapshot, plan, opts, paths)
    return snapshot.pending(_identities(plan), opts.only_step)[0]


def _put_back(
    manifest: Manifest, plan: Plan, opts: ProvisionOptions, paths: layout.Paths
) -> dict[str, list[str]]:
    """A lock's selection (``opts.selection``): each finished step that installs a package of it
    the venv no longer holds (uninstalled by hand) goes back to pending, so the run puts it back,
    as ``uv sync`` does. Returns {step: the names missing}; call before ``Manifest.pending``."""
    from envbuild.provision.exact import missing_steps

    done = {s.name for s in manifest.steps if s.status == "ok"}
    if opts.selection is None or not done or not paths.python.exists():
        return {}
    steps = [(s.name, s.step.names) for s in plan.steps if s.name in done]
    gone = missing_steps(steps, opts.selection, guard.site_packages(paths.venv))
    for name in gone:
        manifest.state(name).status = "pending"
    return gone


def began(spec: StackSpec, root: Path | None) -> bool:
    """Whether a provision of ``spec`` began under the data root: its manifest names this spec (a
    refusal leaves the root as it was). After a run that raised, the venv is then this spec's,
    finished or not, and the venv's record may say so."""
    try:
        return Manifest.load(layout.paths_for(spec, root).manifest).spec_digest == spec.digest
    except ConfigError:
        return False


def _refusals(
    spec: StackSpec,
    opts: ProvisionOptions,
    paths: layout.Paths,
    plan: Plan,
    identities: list[tuple[str, str, str]],
) -> tuple[Interpreter | None, Plan]:
    """Every check that can refuse the run, before anything is made. Returns the interpreter a
    new venv is made with (None when the venv exists), and the plan with its locked steps'
    sources as they answer here (``sources.route_sources``)."""
    _check_data_root(spec, paths)
    layout.check_links(spec, paths, (opts.home or Path.home()).expanduser(), force=opts.force_links)
    snapshot = Manifest.load(paths.manifest)  # read only: the real one is loaded under the lock
    if not snapshot.violation or opts.venv is not None:  # else the venv is moved aside, made anew
        refuse_without_pip(paths.python, plan.options.backend)
    if snapshot.violation:
        snapshot = Manifest(path=paths.manifest)
    _put_back(snapshot, plan, opts, paths)
    pending = set(snapshot.pending(identities, opts.only_step)[0])
    refuse_out_of_order(plan, snapshot, opts.only_step)
    if opts.venv is not None and not paths.python.exists():
        raise PreflightError(f"--venv {opts.venv}: no environment there (no {paths.python})")
    todo = [s for s in plan.steps if s.name in pending]
    if opts.wheelhouse:  # offline: every locked artifact in the wheelhouse, or nothing is made
        from envbuild.provision.offlinecheck import check_wheelhouse

        seed = plan.options.backend == "uv" and opts.venv is None and not paths.python.exists()
        check_wheelhouse(spec, todo, opts.wheelhouse, seed=seed)
    # the interpreter is a check too: find it before anything is created, while the package
    # sources are probed (an HTTP round trip and a subprocess, side by side)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="envbuild-sources") as probes:
        shared = open_shared(opts.build_cache) if opts.locked else None
        routed = probes.submit(route_sources, plan, todo, root=paths.root, build_cache=shared)
        base_python = None
        if opts.venv is None and not paths.python.exists():
            base_python = find_interpreter(spec.python, opts.python, spec.abi.package)
        plan = routed.result()
    return base_python, plan


def _provision(
    spec: StackSpec,
    opts: ProvisionOptions,
    paths: layout.Paths,
    plan: Plan,
    identities: list[tuple[str, str, str]],
    base_python: Interpreter | None,
    lock_fd: int,
    laps: _Laps,
    pool: ThreadPoolExecutor,
) -> ProvisionResult:
    from envbuild.proof import receipt as receipts

    # The receipt's host facts (nvidia-smi, compilers, git: up to a second on a GPU host) do not
    # depend on the install: they are gathered on a thread while the work goes on.
    host_facts = pool.submit(receipts.snapshot_host, spec)
    result = ProvisionResult(
        paths=paths,
        plan=plan,
        timings=laps.seconds,
        lock={"bypassed": opts.no_lock, "locked_steps": sorted(opts.locked), **opts.lock_source},
    )
    installer = installer_for(plan.options.backend)

    manifest = Manifest.load(paths.manifest)
    if manifest.violation and opts.venv is None and paths.venv.exists():
        aside = paths.venv.with_name(
            f"{paths.venv.name}.untrusted-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        paths.venv.rename(aside)
        events.emit(
            "warn",
            f"the last run stopped on an ABI violation ({manifest.violation}); "
            f"the venv was moved aside to {aside} and is made again",
        )
        manifest = Manifest(path=paths.manifest)
    gone = _put_back(manifest, plan, opts, paths)
    _, reset = manifest.pending(identities)
    if gone:
        result.restored = sorted({n for names in gone.values() for n in names})
        events.emit(
            "info",
            f"{len(result.restored)} package(s) the selection installs are missing from the venv "
            f"({', '.join(result.restored)}): putting them back, re-running {', '.join(gone)}",
        )
    if reset:
        events.emit(
            "info", f"{_why_reset(manifest, spec, installer.name)}: re-running {', '.join(reset)}"
        )
    manifest.stack, manifest.spec_digest, manifest.backend = spec.name, spec.digest, installer.name
    run = ProvisionRun(
        spec=spec,
        opts=opts,
        plan=plan,
        paths=paths,
        installer=installer,
        manifest=manifest,
        result=result,
        lock_fd=lock_fd,
    )
    restore.remember_state(run)  # before anything saves the manifest
    laps.lap("prepare")
    try:
        with synced_at_end():  # the run's state written at once, synced when it ends
            return _venv_steps_check(run, base_python, laps, pool, host_facts)
    except (EnvbuildError, KeyboardInterrupt) as exc:  # the run stopped short: a receipt says so
        drop_trees(run)
        venv = restore.after_failure(run)
        if isinstance(exc, EnvbuildError):
            said = (exc.hint or "").rstrip()
            end = "" if not said or said.endswith(".") else "."
            exc.hint = f"{said}{end} {_capital(venv['detail'])}.".lstrip()
        result.receipt = _failure_receipt(run, exc, laps, host_facts, venv)
        raise


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _prepare_files(run: ProvisionRun, base_python: Interpreter | None) -> None:
    """``provision.prepare`` of the steps still to run, then ``provision.overlaps`` of what they
    install, where the run prepares (a lock's, with uv); nothing here touches the venv."""
    from envbuild.provision import overlaps, prepare

    fresh = run.opts.venv is None and not run.paths.python.exists()
    todo = [s for s in run.plan.steps if fresh or run.manifest.state(s.name).status != "ok"]
    prepared = None
    if prepare.wanted(run, todo):
        python = run.paths.python
        if fresh:
            base = base_python or find_interpreter(
                run.spec.python, run.opts.python, run.spec.abi.package
            )
            python = base.executable
        prepared = prepare.prepare(run, todo, python)
        run.prepared = prepared.jobs
        run.trees, run.tree_python = prepared.trees, python
    overlaps.check(run, prepared)


def _venv_steps_check(
    run: ProvisionRun,
    base_python: Interpreter | None,
    laps: _Laps,
    pool: ThreadPoolExecutor,
    host_facts: Future[HostSnapshot],
) -> ProvisionResult:
    from envbuild.proof import receipt as receipts

    spec, opts, paths, manifest, result = run.spec, run.opts, run.paths, run.manifest, run.result
    # layout first: the venv, caches and logs all live on the data root
    layout.create_folders(paths)
    run.env = run.installer.install_env(
        _install_env(paths),
        paths.python,
        compile_option=opts.compile_bytecode,
        adopted=opts.venv is not None,
    )
    _prepare_files(run, base_python)  # before the venv is made or touched
    laps.lap("files")
    spec = run.spec  # with the overlaps the prepare found
    home = (opts.home or Path.home()).expanduser()
    for line in layout.link_home(spec, paths, home, force=opts.force_links):
        events.emit("warn" if line.startswith("moved ") else "info", line)
    layout.write_overlay(spec, paths)
    run.venv_made = opts.venv is None and not paths.python.exists()
    run.python = _ensure_venv(run, base_python)
    layout.hook_activate(paths)
    layout.write_launcher(paths)
    if manifest.marker_env is None:
        probed = probe_python(run.python)
        if probed is None:
            raise PreflightError(
                f"the venv's python {run.python} does not run",
                hint="Move the venv away; the next run makes a new one.",
            )
        manifest.marker_env = probed.marker_env
    run.site = guard.site_packages(paths.venv)
    if opts.selection is not None:
        from envbuild.provision.exact import sync_record

        manifest.sync = dict(
            sync_record(
                opts.selection,
                exact=opts.exact,
                seeded=opts.seed,
                previous=manifest.sync,
                site=run.site if opts.venv is not None else None,
            )
        )
        result.lock["sync"] = manifest.sync
    if spec.abi.adopt and manifest.baseline is None:
        manifest.baseline = freeze_baseline(run, adopted=True)
    manifest.save()
    laps.lap("venv")

    try:
        check = _steps_and_check(run, laps, pool)
        restore.drop(run)
    finally:
        if run.warmup is not None:
            run.warmup.stop()
            result.warmup = run.warmup.to_json()
    if check is not None and check.cached and check.software is not None:
        software: SoftwareJSON | None = check.software
    else:
        futures = [f for f in run.inventory if f is not None]
        if not futures:
            futures.append(pool.submit(receipts.inventory, run.python))
        software = _or_none(futures[0])
        if check is not None and software is not None:
            remember_software(run.paths.import_verdict, check, software)
    result.seconds = time.monotonic() - laps.t0
    result.receipt = _write_receipt(run, host=_or_none(host_facts), software=software)
    laps.lap("receipt")
    return result


def _steps_and_check(run: ProvisionRun, laps: _Laps, pool: ThreadPoolExecutor) -> FinalCheck | None:
    from envbuild.proof import receipt as receipts

    if any(run.manifest.state(s.name).status != "ok" for s in run.plan.steps):
        restore.before_install(run)  # the venv as it is, for a failure from here on
    run_steps(run)
    laps.lap("steps")
    last = run.opts.only_step is None or run.opts.only_step == run.plan.steps[-1].name
    if last and run.manifest.sync is not None and run.manifest.sync.get("exact"):
        _sync_exact(run)
        laps.lap("exact_sync")

    # the environment is final: its inventory for the receipt runs beside the import check, or is
    # the one recorded with a cached verdict (same fingerprint: the same distributions); so does
    # the walk that compiles from the other end of what the import meets (``warmup``)
    warm = check_warmup(run) if last else None

    def start_inventory() -> None:
        run.inventory.append(pool.submit(receipts.inventory, run.python, trust_record=True))
        if warm is not None:
            warm.beside_import(run.site)

    check = None
    if last:
        if warm is not None:
            warm.at_check(run.site)
        try:
            check = _final_check(run, on_fresh_import=start_inventory)
        finally:
            if warm is not None:
                warm.end_beside()
        if check.modules:
            warmup.remember(import_listing(run), _frozen_files(run, check.modules))
        run.manifest.finished = now()
        run.manifest.save()
        laps.lap("import_check")
    return check


def _sync_exact(run: ProvisionRun) -> None:
    """Remove what the selection does not install (``provision.exact``); the guard then runs again
    in the final check."""
    from envbuild.provision.exact import extraneous, remove

    assert run.manifest.sync is not None
    extra = extraneous(run.manifest.sync, guard.scan(run.site))
    if not extra:
        run.manifest.sync.pop("removed", None)
        return
    if not run.installing:
        restore.before_install(run)
    protected = [run.spec.abi.package]
    if run.manifest.baseline is not None:
        protected += list(guard.Baseline.from_json(run.manifest.baseline).protected)
    gone = remove(
        run.python,
        extra,
        protected,
        backend=run.installer.name,
        env=run.env or {},
        log_file=run.paths.logs / "exact-sync.log",
    )
    run.result.removed = gone
    run.manifest.sync["removed"] = gone
    run.manifest.finished = None
    run.manifest.save()


def _frozen_files(run: ProvisionRun, files: list[str]) -> list[str]:
    """Of the files a fresh import loaded, those of torch and its protected set: the constraints
    keep them from changing under a later step, so the warm-up never writes bytecode into a
    package a later step is replacing."""
    if run.manifest.baseline is None:
        return []
    dists = guard.scan(run.site)
    owned: set[str] = set()
    for name in (run.spec.abi.package, *guard.Baseline.from_json(run.manifest.baseline).protected):
        dist = dists.get(canonicalize_name(name))
        if dist is not None:
            owned.update(dist.files())
    return [f for f in files if f in owned]


def _why_reset(manifest: Manifest, spec: StackSpec, backend: str) -> str:
    """Why recorded steps run again, in the words of what changed."""
    if manifest.backend and manifest.backend != backend:
        return f"the installer changed ({manifest.backend} -> {backend})"
    if manifest.spec_digest and manifest.spec_digest != spec.digest:
        return "the spec changed"
    return "the steps' install arguments changed (the lock, a package source or an option)"


def _or_none(future: Future[T]) -> T | None:
    """A helper thread's answer, or None where it failed (the receipt then gathers it itself)."""
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - the receipt's fallback is to gather it again, in line
        return None


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_data_root(spec: StackSpec, paths: layout.Paths) -> None:
    """Writable, with space: checked on the root or, when it is still to be made, its nearest
    parent."""
    root = paths.root
    where = _nearest_existing(root)
    if not where.is_dir():
        raise PreflightError(
            f"cannot create the data root {root}: {where} is not a folder",
            hint="Choose another with --root.",
        )
    if not os.access(where, os.W_OK):
        what = (
            f"the data root {root}"
            if where == root
            else f"{where}, where the data root {root} would be made,"
        )
        raise PreflightError(
            f"{what} is not writable by this user",
            hint="Fix its permissions, or choose another with --root.",
        )
    free_gb = shutil.disk_usage(where).free / 1e9
    if free_gb < spec.layout.min_free_gb:
        raise PreflightError(
            f"the data root {root} has {free_gb:.1f} GB free; the stack needs at least"
            f" {spec.layout.min_free_gb:g} GB (layout.min_free_gb)",
            hint="Free space, or choose a larger disk with --root.",
        )
    if spec.layout.separate_root_fs and os.stat(where).st_dev == os.stat("/").st_dev:
        events.emit(
            "warn",
            f"the data root {root} is on the root filesystem; pip caches and torch wheels "
            "can fill a small root disk (mount the data disk there, or use --root)",
        )


def _make_data_root(paths: layout.Paths) -> None:
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PreflightError(
            f"cannot create the data root {paths.root}: {exc.strerror}",
            hint="Choose another with --root, or create it and make it writable.",
        ) from exc


def _ensure_venv(run: ProvisionRun, base_python: Interpreter | None = None) -> Path:
    spec, opts, paths, manifest = run.spec, run.opts, run.paths, run.manifest
    python = paths.python
    if opts.venv is not None:
        if not python.exists():
            raise PreflightError(f"--venv {opts.venv}: no environment there (no {python})")
        manifest.venv = str(paths.venv)  # so `verify --venv` finds this manifest's baseline
        return python
    if paths.venv.is_dir() and any(paths.venv.iterdir()) and manifest.venv != str(paths.venv):
        # Not recorded as made by envbuild: a creation cut short (Ctrl-C, SIGKILL), or not ours.
        # Either way it is not trusted, and nothing of the user's is deleted.
        aside = paths.venv.with_name(
            f"{paths.venv.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        paths.venv.rename(aside)
        events.emit(
            "warn",
            f"{paths.venv} was never recorded as complete (a run stopped while creating it?); "
            f"moved aside to {aside}, making it again",
        )
    if python.exists():
        probed = _probe_venv_python(python, paths.state / "python-probe.json")
        if probed is None:
            raise PreflightError(
                f"the venv at {paths.venv} is broken (its python does not run)",
                hint="Move it away; the next run makes a new one.",
            )
        if probed.version != spec.python and opts.python is None:
            raise PreflightError(
                f"the venv at {paths.venv} is Python {probed.version}, the stack asks for"
                f" {spec.python}",
                hint="Move it away to have it made again with the right interpreter.",
            )
        if manifest.marker_env is None:
            manifest.marker_env = probed.marker_env
        return python
    base = base_python or find_interpreter(spec.python, opts.python, spec.abi.package)
    for state in manifest.steps:  # a new venv: nothing in it has run
        state.status = "pending"
    manifest.baseline = None
    run.installer.create_venv(
        base.executable,
        paths.venv,
        log_file=paths.logs / "venv.log",
        offline_wheelhouse=opts.wheelhouse,
        pass_fds=run.pass_fds,
        seed=opts.seed,
    )
    manifest.python, manifest.venv = str(base.executable), str(paths.venv)
    manifest.marker_env = base.marker_env  # a venv's marker variables are its interpreter's
    manifest.save()  # the venv is complete: from now on it is ours
    return python


def _interpreter_key(python: Path) -> list[Any]:
    """What identifies a venv's interpreter without running it: the real executable (size, mtime,
    inode) and the venv's pyvenv.cfg. An upgrade, a rebuild or a re-pointed venv changes it."""
    real = Path(os.path.realpath(python))
    key: list[Any] = [str(real)]
    for f in (real, python.parent.parent / "pyvenv.cfg"):
        try:
            st = f.stat()
            key += [st.st_size, st.st_mtime_ns, st.st_ino]
        except OSError:
            key.append(None)
    return key


def _probe_venv_python(python: Path, cache: Path) -> Interpreter | None:
    """``probe_python`` of the venv's interpreter, remembered under ``_interpreter_key``: a re-run
    on a finished environment does not start one more interpreter to learn what it already knows."""
    key = _interpreter_key(python)
    try:
        doc = json.loads(cache.read_text(encoding="utf-8"))
        if doc.get("key") == key:
            return Interpreter(
                executable=Path(doc["executable"]),
                version=str(doc["version"]),
                marker_env={str(k): str(v) for k, v in doc["marker_env"].items()},
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    probed = probe_python(python)
    if probed is not None:
        with contextlib.suppress(OSError):
            atomic_write_json(
                cache,
                {
                    "key": key,
                    "executable": str(probed.executable),
                    "version": probed.version,
                    "marker_env": probed.marker_env,
                },
            )
    return probed


def _install_env(paths: layout.Paths) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    cache = paths.cache_env()
    # the data root's caches, unless the user names one (a CI job that caches its UV_CACHE_DIR):
    # then that one, as pip and uv themselves would use it. On the venv's filesystem uv hard-links
    # from its cache; on another it copies, which the user chose
    for var in ("PIP_CACHE_DIR", "UV_CACHE_DIR"):
        env[var] = os.environ.get(var) or cache[var]
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return env


def _final_check(
    run: ProvisionRun, on_fresh_import: Callable[[], None] | None = None
) -> FinalCheck:
    spec, manifest, result = run.spec, run.manifest, run.result
    if manifest.baseline is None:
        raise ABIViolation(
            f"no baseline was recorded for {spec.abi.package}; the environment cannot be verified"
        )
    # The last step's guard has just checked this very state; a run that installed nothing
    # (a re-run, --step of the last step only after a stop) checks it here.
    guarded_now = (
        bool(result.ran) and result.ran[-1] == result.plan.steps[-1].name and not result.removed
    )
    try:
        check = final_check(
            spec,
            baseline=guard.Baseline.from_json(manifest.baseline),
            site=run.site,
            python=run.python,
            marker_env=manifest.marker_env,
            overlay=layout.overlay_env(spec, run.paths),
            run_guard=not guarded_now,
            verdict_file=run.paths.import_verdict,
            timeout=run.opts.import_timeout,
            on_fresh_import=on_fresh_import,
            guard_keep=run.paths.shared_files,
        )
    except ImportHang as exc:
        raise InstallError(
            f"the import check hung: {exc}",
            hint=(
                "The environment is installed; the import did not answer. A hang in `import"
                f" {spec.abi.package}` is usually a driver or a network file system: check"
                " `nvidia-smi` and the data root's mount, then run provision again."
            ),
        ) from exc
    if check.report.violations:
        manifest.violation = check.report.violations[0].message
        manifest.save()
        raise ABIViolation(
            "the environment no longer matches its baseline: "
            + "; ".join(f.message for f in check.report.violations),
            hint="Something outside envbuild changed the venv. Run provision again to rebuild it.",
        )
    failed = [f for f in check.findings if f.rule == "import"]
    if failed:
        raise ABIViolation(
            f"`import {spec.abi.package}` fails in the finished venv: "
            + failed[0].message.split(" fails: ", 1)[-1]
        )
    if check.findings:
        raise ABIViolation("full import check: " + "; ".join(f.message for f in check.findings))
    data = check.data or {}
    result.full_check, result.import_cached = data, check.cached
    how = (
        " (cached verdict: no distribution, interpreter or overlay changed since the last import)"
        if check.cached
        else ""
    )
    events.emit(
        "ok", f"import {spec.abi.package}: {data.get('version')} (cuda {data.get('cuda')}){how}"
    )
    return check


def _failure_receipt(
    run: ProvisionRun,
    exc: EnvbuildError | KeyboardInterrupt,
    laps: _Laps,
    host_facts: Future[HostSnapshot],
    venv: VenvAfterFailureJSON | None = None,
) -> Path | None:
    """The receipt of a run that stopped short: the stage (the step that failed or was running, or
    the phase: prepare, venv, import_check), the exit code, the paragraph envbuild prints, the
    steps done and what it left of the venv; its software is what is installed now. None where it
    cannot be written (the error stands)."""
    steps = run.manifest.steps
    if "files" not in laps.seconds:
        stage = "prepare"
    elif "venv" not in laps.seconds:
        stage = "venv"
    elif "steps" not in laps.seconds:
        stage = next(
            (s.name for s in steps if s.status in ("failed", "running")),
            next((s.name for s in steps if s.status != "ok"), "steps"),
        )
    else:
        stage = "import_check"
    interrupted = isinstance(exc, (KeyboardInterrupt, Interrupted))
    failure: ProvisionFailureJSON = {
        "stage": stage,
        "exit_code": int(exc.exit_code if isinstance(exc, EnvbuildError) else ExitCode.INTERRUPTED),
        "error": type(exc).__name__,
        "reason": exc.message if isinstance(exc, EnvbuildError) else "interrupted",
        "hint": exc.hint if isinstance(exc, EnvbuildError) else None,
        "interrupted": interrupted,
        "completed": [s.name for s in steps if s.status == "ok"],
    }
    if venv is not None:
        failure["venv"] = venv
    run.result.seconds = time.monotonic() - laps.t0
    try:
        return _write_receipt(run, host=_or_none(host_facts), failure=failure)
    except (OSError, EnvbuildError, KeyboardInterrupt) as err:  # a full disk, a second Ctrl-C
        events.emit(
            "warn",
            f"could not write the receipt of the failed run under {run.paths.receipts}: {err}",
        )
        return None


def _write_receipt(
    run: ProvisionRun,
    host: HostSnapshot | None = None,
    software: SoftwareJSON | None = None,
    failure: ProvisionFailureJSON | None = None,
) -> Path:
    from envbuild.proof.receipt import write_receipt

    result, paths = run.result, run.paths
    manifest = Manifest.load(paths.manifest)
    payload: ProvisionPayload = {
        "ran": result.ran,
        "skipped": result.skipped,
        "warnings": result.warnings,
        "seconds": round(result.seconds, 3),
        "backend": result.plan.options.backend,
        "steps": [
            {
                "name": s.name,
                "status": s.status,
                "seconds": s.seconds,
                "guard_seconds": s.guard_seconds,
                "started": s.started,
                "ended": s.ended,
            }
            for s in manifest.steps
        ],
        "full_check": result.full_check,
        "import_check": {"cached": result.import_cached} if result.full_check is not None else None,
        "import_warmup": result.warmup,
        "timings": result.timings,
        "lock": result.lock,
    }
    if failure is not None:
        payload["failure"] = failure
    python = run.python if run.python.is_file() else None  # none: it stopped before its venv
    return write_receipt(
        paths, "provision", payload, spec=run.spec, python=python, host=host, software=software
    )
