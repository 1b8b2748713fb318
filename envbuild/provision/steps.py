"""One provision's steps, in order, each guarded: the run context and what one step does.

``ProvisionRun`` carries what every step needs (the spec, options, plan, paths, the installer,
the manifest, the venv's python and site-packages, the install environment, the result being
built, the state lock's fd) so the functions below take one argument instead of ten.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events, guard, layout
from envbuild._io import atomic_write_text, discard
from envbuild.errors import ABIViolation, EnvbuildError, InstallError, PreflightError
from envbuild.installer import Installer
from envbuild.installer.uv import compiles_at_install
from envbuild.plan import Plan, PlannedStep, step_commands
from envbuild.provision import movein, prefetch, verify, warmup
from envbuild.provision.state import Manifest, now
from envbuild.run import open_private
from envbuild.spec import StackSpec

if TYPE_CHECKING:
    from envbuild.proof.receipt import SoftwareJSON
    from envbuild.provision.options import ProvisionOptions, ProvisionResult


@dataclass
class ProvisionRun:
    """The context of one provision, shared by its phases."""

    spec: StackSpec
    opts: ProvisionOptions
    plan: Plan
    paths: layout.Paths
    installer: Installer
    manifest: Manifest
    result: ProvisionResult
    lock_fd: int
    python: Path = Path()
    site: Path = Path()
    env: dict[str, str] | None = None  # the installers' environment (caches on the data root)
    warmup: warmup.Warmup | None = None  # the background `import torch` once the baseline is in
    # the receipt's, beside the import check
    inventory: list[Future[SoftwareJSON]] = field(default_factory=list)
    # the --no-deps steps' packages: unmet requirements said once, at the end
    unmet_names: list[str] = field(default_factory=list)
    # the steps whose files and builds are all in uv's cache (``provision.prepare``)
    prepared: dict[str, prefetch.PrefetchJob] = field(default_factory=dict)
    # {step: its prepared prefixes}: moved into the venv by the step (``provision.movein``)
    trees: dict[str, list[Path]] = field(default_factory=dict)
    tree_python: Path | None = None  # the interpreter uv installed them with
    venv_made: bool = False  # this run made the venv
    installing: bool = False  # a step began installing (``provision.restore``)
    before: Path | None = None  # the copy of the venv taken before the first install
    # the manifest's and the constraints' bytes as the run found them (None: not there)
    state_before: dict[Path, bytes | None] = field(default_factory=dict)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.lock_fd,)


def refuse_out_of_order(plan: Plan, manifest: Manifest, only_step: str | None) -> None:
    """``--step NAME`` needs every earlier step done: refused before anything is made."""
    if only_step is None:
        return
    number = plan.step(only_step).number
    for planned in plan.steps:
        state = (
            manifest.state(planned.name)
            if any(s.name == planned.name for s in manifest.steps)
            else None
        )
        status = state.status if state is not None else "pending"
        if planned.number < number and status != "ok":
            raise PreflightError(
                f"--step {only_step}: the earlier step {planned.name!r} has not run ({status}); "
                "run the steps in order (or provision without --step)"
            )


def run_steps(run: ProvisionRun) -> None:
    plan, manifest, opts, result = run.plan, run.manifest, run.opts, run.result
    refuse_out_of_order(plan, manifest, opts.only_step)
    todo = [s for s in plan.steps if manifest.state(s.name).status != "ok"]
    prefetcher = None
    unprepared = [s for s in todo if s.name not in run.prepared]
    if opts.only_step is None and unprepared and prefetch.wanted(opts.prefetch, todo):
        # the next step's exact pins download into the same cache while this step installs
        prefetcher = prefetch.Prefetcher(
            installer=run.installer,
            python=run.python,
            scratch_root=run.paths.cache / "prefetch",
            logs=run.paths.logs,
            env=run.env or {},
            baseline_pins=baseline_pins(run, todo),
            unconstrained_builds=bool(opts.lock_source),
        )
    import_env = verify.import_env(layout.overlay_env(run.spec, run.paths))
    warm = warm_wanted(run, import_env)
    try:
        done = None
        for planned in plan.steps:
            refresh: tuple[str, ...] = ()
            cached = False
            if opts.only_step and planned.name != opts.only_step:
                continue
            if manifest.state(planned.name).status == "ok":
                result.skipped.append(planned.name)
                done = planned.name
                continue
            if warm and run.warmup is None and manifest.baseline is not None and done is not None:
                log = run.paths.logs / "import-warmup.log"
                log.unlink(missing_ok=True)
                run.warmup = warmup.Warmup(
                    run.python,
                    run.spec.abi.package.replace("-", "_"),
                    import_env,
                    log,
                    site=run.site,
                    listing=import_listing(run),
                )
                if not run.warmup.start(after_step=done):
                    warm, run.warmup = False, None
            if (job := run.prepared.get(planned.name)) is not None:
                refresh = _stale_builds(run, job, planned)
                cached = not refresh
            elif prefetcher is not None:
                prefetcher.wait(planned.name)  # never race the real install of the same step
                refresh = _stale_builds(run, prefetcher.jobs.get(planned.name), planned)
                cached = prefetcher.covered(planned.name) and not refresh
                later = todo[todo.index(planned) + 1 :] if planned in todo else []
                # every later step's files, not only the next one's: a lock's rest stage comes after
                # a short one (extensions, builds), and waiting to start it there serialised its
                # downloads behind torch's (docling: 28 s)
                for ahead in later:
                    if (
                        ahead.name not in opts.prepare_steps
                        and ahead.name not in run.prepared
                        and ahead.name not in prefetcher.jobs
                        and prefetcher.start(ahead) is not None
                    ):
                        events.emit(
                            "debug", f"prefetching step {ahead.name} while {planned.name} installs"
                        )
            run_one(
                run,
                planned,
                refresh=refresh,
                cached=cached,
                on_line=prefetcher.heard if prefetcher is not None else None,
            )
            if prefetcher is not None:
                prefetcher.release()
            done = planned.name
        say_unmet(run)
    finally:
        if prefetcher is not None:
            prefetcher.close()
        drop_trees(run)


def drop_trees(run: ProvisionRun) -> None:
    """Delete the prepared prefixes no step took (the run ended, or stopped short)."""
    for name in list(run.trees):
        _drop_trees(run, name)


def _drop_trees(run: ProvisionRun, step: str) -> None:
    """Delete what is left of ``step``'s prepared prefixes (off the run's path); the warm-up's own
    is its to delete (``Warmup.stop``): its walk may still be writing there."""
    own = run.warmup.tree if run.warmup is not None else None
    for tree in run.trees.pop(step, []):
        if tree != own:
            discard(tree)


def _move_in(
    run: ProvisionRun,
    planned: PlannedStep,
    before: Mapping[str, object],
    log_file: Path,
    constraints: Path | None,
) -> bool:
    """Install ``planned`` by moving its prepared prefixes into the venv (``provision.movein``),
    where they hold all of it and the move is what uv's install would make; False: the step
    installs with uv."""
    trees = run.trees.get(planned.name)
    if not trees or run.tree_python is None:
        return False
    warm = run.warmup
    ours, written = False, 0  # the warm-up's prefix among them, and the .pyc it holds
    moved: movein.Moved | str
    if planned.install_last:
        moved = f"{', '.join(planned.install_last)} install(s) after the rest, in a run of its own"
    elif compiles_at_install(run.env or {}):
        moved = "UV_COMPILE_BYTECODE is set: uv compiles as it installs"
    elif warm is not None and warm.tree in trees and warm.running() and warm.mode != "walk":
        moved = "the import warm-up still runs from there"
    else:
        if ours := (warm is not None and warm.tree in trees):
            # the walk still compiling torch: stopped here, not at the check, and what it wrote
            # comes along with torch's files (the check's import and the walk beside it compile
            # the rest); else the stage would be linked again and its prefix removed at exit
            warm.halt()
            written = warm.bytecode()
        moved = movein.move_in(
            trees,
            run.paths.venv,
            run.site,
            scratch_python=run.tree_python,
            venv_python=os.path.abspath(run.python),
            installed=before,
        )
    if isinstance(moved, str):
        said = f"installed from uv's cache, not moved in from the prepare: {moved}"
        events.emit("debug", f"step {planned.name}: {said}")
        with open_private(log_file) as log:
            log.write(f"[envbuild] {said}\n")
        return False
    if ours and warm is not None:
        warm.moved(written)
    # what the uv run would have left besides the venv: the step's requirement files (``plan
    # --json``'s commands), its log, and a git pin's wheel recorded as that git install
    for command in step_commands(
        planned,
        backend=run.installer.name,
        python=run.python,
        uv=getattr(run.installer, "uv", None),
        steps_dir=run.paths.state / "steps",
        constraints=constraints,
    ):
        command.write()
    with open_private(log_file) as log:
        log.write(
            f"[envbuild] moved the prepared files of {len(moved.names)} distribution(s) into the"
            f" venv ({moved.renames} rename(s), {moved.scripts} script(s) written for its python):"
            f" uv installed them into the prepare's prefix ({', '.join(map(str, trees))})\n"
        )
    if planned.locked_file is not None:
        from envbuild.installer.records import record_git_builds

        record_git_builds(planned.locked_file, run.python, run.installer.name)
    events.emit("debug", f"step {planned.name}: moved in ({len(moved.names)} distribution(s))")
    return True


def warm_wanted(run: ProvisionRun, import_env: Mapping[str, str]) -> bool:
    """Whether a warm-up can shorten this run's final import check (``warmup.wanted``)."""
    return warmup.wanted(
        install_env=run.env or {},
        import_env=import_env,
        compiles_at_install=run.installer.name == "pip",
        single_step=run.opts.only_step is not None,
    )


def check_warmup(run: ProvisionRun) -> warmup.Warmup | None:
    """The warm-up the final check goes with: the one that ran, else (where one is wanted, and a
    second core can run it) one of mode ``check``, for the walk beside the check's import alone."""
    if run.warmup is not None:
        return run.warmup
    import_env = verify.import_env(layout.overlay_env(run.spec, run.paths))
    if not warm_wanted(run, import_env) or warmup.usable_cpus() < 2:
        return None
    log = run.paths.logs / "import-warmup.log"
    run.warmup = warmup.Warmup(
        run.python, run.spec.abi.package.replace("-", "_"), import_env, log, site=run.site
    )
    run.warmup.mode = "check"
    return run.warmup


def baseline_pins(run: ProvisionRun, todo: Sequence[PlannedStep]) -> Path | None:
    """The build constraints the guarded steps will have, for their prefetched builds: the frozen
    baseline's file; None when it is not frozen yet, and for a lock (its builds are unconstrained,
    prefetched as they are: ``Prefetcher(unconstrained_builds=True)``)."""
    if run.opts.lock_source:
        return None  # a lock's isolated builds are not held to the baseline (``run_one``)
    if run.manifest.baseline is not None:
        return run.paths.constraints if run.paths.constraints.is_file() else None
    return None


def _stale_builds(
    run: ProvisionRun, job: prefetch.PrefetchJob | None, planned: PlannedStep
) -> tuple[str, ...]:
    """``prefetch.stale_builds`` of the step's prefetch against the baseline frozen now."""
    if job is None or run.manifest.baseline is None:
        return ()
    stale = prefetch.stale_builds(
        job, guard.Baseline.from_json(run.manifest.baseline).pins(), planned.requirements
    )
    if stale:
        events.emit(
            "debug",
            f"step {planned.name}: its prefetched builds were made under other baseline pins; "
            "building them again",
        )
    return stale


def say_unmet(run: ProvisionRun) -> None:
    """The requirements the ``--no-deps`` steps left unmet that no later step met: one warning each,
    after the last step (a torch step's filelock, met by the next step, is not a warning)."""
    if not run.unmet_names or run.manifest.baseline is None:
        return
    for f in guard.unmet_requirements(
        guard.scan(run.site), run.unmet_names, run.manifest.marker_env or {}
    ):
        events.emit("warn", f"{f.message} (left unmet by --no-deps)")
        run.result.warnings.append(f.message)


def import_listing(run: ProvisionRun) -> Path:
    """The files a fresh ``import torch`` of this torch and Python loaded (warmup.listing_path)."""
    return warmup.listing_path(
        run.paths.cache,
        run.spec.abi.package.replace("-", "_"),
        run.spec.abi.version,
        (run.manifest.marker_env or {}).get("python_version", ""),
    )


def freeze_baseline(run: ProvisionRun, adopted: bool = False) -> dict[str, object]:
    spec, site = run.spec, run.site
    try:
        base = guard.take_baseline(spec.abi, site, run.manifest.marker_env or {})
    except LookupError as exc:
        where = "the environment" if adopted else "the venv after the baseline step"
        raise ABIViolation(f"{spec.abi.package} is not installed in {where} ({site})") from exc
    if not spec.abi.is_version(base.version, base.dist_version):
        source = "the base environment has" if adopted else "the baseline step installed"
        shown = (
            base.version
            if base.dist_version in ("", base.version)
            else f"{base.dist_version} ({base.version} at run time)"
        )
        if run.opts.lock_source:
            raise ABIViolation(
                f"{source} {spec.abi.package} {shown}, but the lock ({spec.path}) pins"
                f" {spec.abi.package} {spec.abi.version}",
                hint="Check the lock's torch entry and the environment; re-lock if it is stale.",
            )
        raise ABIViolation(
            f"{source} {spec.abi.package} {shown}, but the spec says abi.version ="
            f" {spec.abi.version}",
            hint="Fix abi.version, or the baseline step's pin / the base image, so they agree.",
        )
    pins = "\n".join(base.pins())
    atomic_write_text(
        run.paths.constraints,
        f"# envbuild: the ABI baseline, frozen after the baseline step\n{pins}\n",
    )
    events.emit("info", f"baseline frozen: {', '.join(base.pins())}")
    return base.to_json()


def run_one(
    run: ProvisionRun,
    planned: PlannedStep,
    refresh: Sequence[str] = (),
    cached: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> None:
    """Run one step and guard it. ``refresh``: packages whose cached builds the installer must not
    take (``--refresh-package``); ``cached``: the prefetch put every file of the step in uv's
    cache, so the step first runs ``--offline`` (no revalidation of each URL with its host), and as
    planned where that fails. Neither is part of the step's identity. ``on_line``: each line of the
    installer's output (the prefetcher listens for the resolution's end)."""
    spec, manifest, paths, result, site = run.spec, run.manifest, run.paths, run.result, run.site
    state = manifest.state(planned.name)
    total = len(run.plan.steps)
    events.emit(
        "step", f"step {planned.number}/{total} {planned.name}: {' '.join(planned.requirements)}"
    )
    log_file = paths.logs / f"{planned.number:02d}-{planned.name}.log"
    state.status, state.started, state.ended, state.log, state.error = (
        "running",
        now(),
        None,
        str(log_file),
        None,
    )
    manifest.save()
    constraints = None
    step_env = dict(run.env or {})
    if planned.constrained:
        if manifest.baseline is None:
            manifest.baseline = freeze_baseline(run)
        constraints = paths.constraints
        if not run.opts.lock_source:
            step_env["PIP_CONSTRAINT"] = str(constraints)  # reaches pip's isolated build envs too
            step_env["UV_BUILD_CONSTRAINT"] = str(constraints)
        # a lock's stages install exact files (--no-deps): the pins would only reach their isolated
        # builds, which uv sync builds with what their build requirements resolve to, never with
        # the environment's pins (a build that needs the installed torch is the builds stage's)
    before = guard.scan(site)
    t = time.monotonic()
    try:
        if (prepare := run.opts.prepare_steps.get(planned.name)) is not None:
            planned = prepare(planned, run.python)
        if refresh:
            flags = tuple(f for name in refresh for f in ("--refresh-package", name))
            planned = dataclasses.replace(planned, args=(*planned.args, *flags))

        def install(step: PlannedStep) -> None:
            run.installer.run_step(
                step,
                spec=spec,
                python=run.python,
                steps_dir=paths.state / "steps",
                constraints=constraints,
                log_file=log_file,
                env=step_env,
                pass_fds=run.pass_fds,
                timeout=run.opts.step_timeout,
                on_line=on_line,
            )

        if not refresh and _move_in(run, planned, before, log_file, constraints):
            pass
        elif cached:
            try:
                install(dataclasses.replace(planned, args=(*planned.args, "--offline")))
            except InstallError as exc:
                # something the prefetch left out or uv's cache lost: the step as planned
                events.emit(
                    "debug",
                    f"step {planned.name}: not all in the cache ({exc.message}); "
                    "installing from its sources",
                )
                install(planned)
        else:
            install(planned)
        _drop_trees(run, planned.name)
        if planned.role == "baseline":
            manifest.baseline = freeze_baseline(run)
    except EnvbuildError as exc:
        state.status, state.ended, state.error = "failed", now(), exc.message
        manifest.save()
        raise
    state.seconds = round(time.monotonic() - t, 3)
    after = guard.scan(site)
    earlier = earlier_step_changes(run, planned, before, after)
    report = guard.GuardReport(violations=earlier)
    if manifest.baseline is not None:
        report = guard.check(
            spec,
            guard.Baseline.from_json(manifest.baseline),
            site,
            no_deps_names=planned.step.names if planned.step.no_deps else (),
            marker_env=manifest.marker_env,
        )
        report.violations += earlier
        state.guard_seconds = round(report.seconds, 4)
        result.guard_seconds.append(report.seconds)
        state.warnings = [f.message for f in report.warnings]
        # a later step may meet them: said after the last step (``say_unmet``)
        if planned.step.no_deps:
            run.unmet_names += [n for n in planned.step.names if n not in run.unmet_names]
    if not report.ok or (run.opts.strict and report.warnings):
        findings = report.violations or report.warnings
        message = _violation_message(planned, findings, before, guard.scan(site))
        state.status, state.ended, state.error = "failed", now(), message
        if report.violations:
            manifest.violation = f"step {planned.name}: {findings[0].message}"
        manifest.save()
        raise ABIViolation(message, hint=_violation_hint(findings, paths))
    state.installed = {
        n: {"version": after[n].version, "record_sha256": after[n].record_sha256}
        for n in guard.changed(before, after)
        if n in after
    }
    state.status, state.ended = "ok", now()
    manifest.save()
    result.ran.append(planned.name)
    events.emit(
        "ok",
        f"step {planned.name} ({state.seconds:.1f} s, guard"
        f" {1000 * (state.guard_seconds or 0):.0f} ms)",
    )


def earlier_step_changes(
    run: ProvisionRun,
    planned: PlannedStep,
    before: Mapping[str, guard.Dist],
    after: Mapping[str, guard.Dist],
) -> list[guard.Violation]:
    """Packages an earlier step installed that this step changed (another version, a reinstall: the
    RECORD identity of ``guard.changed``) or removed, unless the step ``replaces`` them. torch and
    the protected set are left to the ABI guard's own rules."""
    owners: dict[str, tuple[str, str]] = {}
    for state in run.manifest.steps:
        if state.name == planned.name:
            break
        for name, ident in state.installed.items():
            owners[name] = (state.name, ident.get("version", "?"))
    frozen = {run.spec.abi.package}
    if run.manifest.baseline is not None:
        frozen |= set(guard.Baseline.from_json(run.manifest.baseline).protected)
    out = []
    for name in guard.changed(before, after):
        if name not in owners or name in planned.step.replaces or name in frozen:
            continue
        owner, version = owners[name]
        now_ = after.get(name)
        if now_ is None:
            what = f"removed {name} {version}"
        elif now_.version != version:
            what = f"changed {name} {version} -> {now_.version}"
        else:
            what = f"reinstalled {name} {version}"
        out.append(
            guard.Violation(
                "earlier-step",
                name,
                f"step {planned.name!r} {what}, which step {owner!r} installed "
                "(a later step must agree with the steps before it)",
            )
        )
    return out


def _violation_message(
    planned: PlannedStep,
    findings: list[guard.Violation],
    before: Mapping[str, guard.Dist],
    after: Mapping[str, guard.Dist],
) -> str:
    lines = [f"ABI guard after step {planned.number} ({planned.name!r}): " + findings[0].message]
    lines += [f"  also: {f.message}" for f in findings[1:4]]
    lines += guard.culprits(findings[0], before, after, planned.step.names)
    return "\n".join(lines)


def _violation_hint(findings: list[guard.Violation], paths: layout.Paths) -> str:
    rule = findings[0].rule
    fixes = {
        "version": (
            "Install the packages that pulled it in with no_deps = true, or pin versions whose"
            " torch requirement the baseline satisfies."
        ),
        "reinstalled": (
            "Remove reinstall/upgrade from that step, or install its packages with no_deps = true."
        ),
        "protected": "Install the package that pulled it in with no_deps = true.",
        "modified": (
            "Something edited installed files in place; provision again to start from clean files."
        ),
        "triton": (
            "Install that package with no_deps = true: the baseline's triton provider already"
            " supplies the module."
        ),
        "overlap": (
            "Acknowledge the overlap with [[abi.overlap]] (packages, winner) and order the steps so"
            " the winner installs last, or drop one package."
        ),
        "provenance": (
            "Rebuild the wheel against the installed torch with `envbuild wheelhouse build`."
        ),
        "unmet": (
            "Pin the missing versions in a later step, or use matching versions (--strict makes"
            " this an error)."
        ),
        "earlier-step": (
            "Make the steps agree (pin a version in the earlier step that the later one accepts),"
            " or let "
            f'the later step replace it: replaces = ["{findings[0].package}"] in its [[step]]'
            " table."
        ),
    }
    return (
        f"{fixes.get(rule, 'Fix the stack spec.')} The next provision moves this venv aside and"
        f" starts over. Logs: {paths.logs}"
    )
