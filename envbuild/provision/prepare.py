"""Prepare, then install: a lock's steps have every file downloaded and hash-checked and every build
made before the first step touches the venv, in ``uv sync``'s order.

``uv sync --frozen`` prepares the whole environment (downloads, hash checks, builds) and only then
installs; a download or build that fails stops it with the venv untouched. ``provision --lock``
does the same with uv: every step still to run is prepared at once, side by side, by
``provision.prefetch``'s scratch installs (``uv pip install --no-deps --prefix <scratch>`` with
the step's own sources, hashes and build constraints: uv fetches, checks and unpacks each wheel and
builds each sdist, git pin and project into its cache, and links them into the scratch prefix, laid
out as a venv), before the venv is made or changed. Each step then moves its prepared prefix into
the venv (``provision.movein``: renames, where nothing is in the way), else installs ``--offline``
from the cache (links). The first job that fails stops the others and the run, with uv's own words
and the venv as it was; where the venv did not exist, it still does not (``provision.core`` makes
it after this).

The builds against torch (``ProvisionOptions.prepare_steps``: sdists that need the installed torch
to build) are made here too, against the lock's torch in a scratch venv: the earlier steps
installed into it offline from the cache just prepared (links: seconds), the build run by the
step's hook, whose build cache the real step then takes the wheel from. A step whose earlier
steps are not all prepared here (an adopted venv's torch, a resumed run), or whose hook is not
for builds, is the exception: it builds in the real step, as before.

What each prepared wheel installs (its RECORD, ``index.records``) is kept for
``provision.overlaps``: the files two selected distributions would both own are known before
anything is installed.
"""

from __future__ import annotations

import itertools
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuild import events, layout
from envbuild._io import discard
from envbuild.errors import EnvbuildError, InstallError
from envbuild.index import records
from envbuild.installer.uv import UvInstaller
from envbuild.plan import PlannedStep
from envbuild.provision import prefetch, verify, warmup
from envbuild.provision.steps import ProvisionRun, baseline_pins
from envbuild.run import run as run_command

__all__ = ["PreparedSteps", "prepare", "wanted"]

POLL_SECONDS = 0.05


@dataclass
class PreparedSteps:
    """What the prepare made: the steps all in uv's cache, and what their wheels install."""

    # the steps whose scratch install covered every line: {step: its job}
    jobs: dict[str, prefetch.PrefetchJob] = field(default_factory=dict)
    seconds: float = 0.0
    # {canonical name: (version, RECORD rows)} of each distribution the prepared steps install
    records: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    built: tuple[str, ...] = ()  # the steps of builds against torch made in the scratch venv
    # {step: its scratch prefixes, kept whole (the stage's head's first)}: what ``provision.movein``
    # moves into the venv; only for a step whose every line they hold
    trees: dict[str, list[Path]] = field(default_factory=dict)


def wanted(run: ProvisionRun, todo: Sequence[PlannedStep]) -> bool:
    """Whether the run prepares before it installs: a lock's run (every step an exact, hash-pinned
    file) with uv, all its steps at once (not ``--step``)."""
    return (
        bool(todo)
        and bool(run.opts.lock_source)
        and run.opts.only_step is None
        and isinstance(run.installer, UvInstaller)
        and all(s.locked_file is not None for s in todo)
    )


def prepare(run: ProvisionRun, todo: Sequence[PlannedStep], python: Path) -> PreparedSteps:
    """Prepare every step of ``todo`` (see the module docstring); ``python``: the interpreter the
    venv has or will be made with. Raises the first failure (InstallError: its step, uv's words,
    and that nothing was installed)."""
    t0 = time.monotonic()
    hooked = [s for s in todo if s.name in run.opts.prepare_steps]
    prefetcher = prefetch.Prefetcher(
        installer=run.installer,
        python=python,
        scratch_root=run.paths.cache / "prepare",
        logs=run.paths.logs,
        env=run.env or {},
        baseline_pins=baseline_pins(run, todo),
        unconstrained_builds=True,  # a lock's isolated builds, as uv sync makes them
        background=False,  # nothing else runs: the run waits for them, as for uv sync's downloads
        keep=True,  # each prefix is what its step moves into the venv (``provision.movein``)
    )
    early = _early_warmup(run, todo, python)
    walk = early is not None and early.walk
    with prefetcher:
        prefetcher.release("prepare: nothing installs before every step is prepared")
        steps = [s for s in todo if s not in hooked]
        # with the import warm-up: the baseline's downloads first, at the whole link's speed, and
        # the steps that only download once it is in, beside its import (those that build start
        # now); the walk needs none of that: torch's own line goes first, in a scratch install of
        # its own beside the rest, and the walk takes only idle cores
        later = [s for s in steps[1:] if not prefetch.build_lines(s)] if early and not walk else []
        jobs = [
            job
            for s in steps
            if s not in later
            and (
                job := prefetcher.start(
                    s,
                    records=True,
                    after=early.take if early and s is todo[0] else None,
                    head=_names(run.spec.abi.package) if walk and s is todo[0] else None,
                )
            )
            is not None
        ]
        n = len(jobs) + len(later)
        events.emit("info", f"preparing {n} step(s): downloads, hash checks, builds")
        try:
            if later:
                _wait(run, prefetcher, jobs[:1], todo)
                jobs += [j for s in later if (j := prefetcher.start(s, records=True)) is not None]
            _wait(run, prefetcher, jobs, todo)
        except BaseException:
            if early is not None:
                early.close()
            prefetcher.close()
            for job in jobs:
                for one in (job.head, job):
                    if one is not None and one.kept is not None:
                        discard(one.kept)
            raise
    if early is not None and early.warmup.proc is not None:
        run.warmup = early.warmup  # linked into the venv before the final check
    out = PreparedSteps(jobs={j.step: j for j in jobs if j.covers})
    for job in jobs:
        trees = [one.kept for one in (job.head, job) if one is not None]
        if job.covers and all(trees):
            out.trees[job.step] = [t for t in trees if t is not None]
        else:
            for tree in trees:
                if tree is not None and (early is None or tree != early.folder):
                    discard(tree)
    for job in jobs:
        out.records.update(job.records or {})
        _remember(job, next(s for s in todo if s.name == job.step))
    if hooked:
        out.built = _build_against_torch(run, todo, hooked, python, set(out.jobs))
    out.seconds = round(time.monotonic() - t0, 3)
    events.emit(
        "info",
        f"prepared in {out.seconds:.1f} s: {len(out.records)} distribution(s) in the cache;"
        " installing",
    )
    return out


@dataclass
class _Early:
    """The prepare-mode import warm-up (``provision.warmup``) of the baseline step's scratch."""

    warmup: warmup.Warmup
    folder: Path  # where the scratch target is moved to be kept
    walk: bool = False  # the walk mode (``warmup.early_mode``), else the import from the scratch
    closed: bool = False  # the prepare failed: nothing starts any more
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, job: prefetch.PrefetchJob) -> None:
        """The baseline job's ``after`` (its thread): keep its scratch, start the import."""
        with self.lock:
            # the import needs the whole stage in the scratch; the walk, torch's own files
            if self.closed or not (job.covers or self.walk):
                return
            try:
                shutil.rmtree(self.folder, ignore_errors=True)
                job.scratch.rename(self.folder)
            except OSError:
                return
            sites = prefetch.prefix_sites(self.folder)
            workdir = self.folder.with_name(f"{self.folder.name}.cwd")
            if len(sites) == 1 and self.warmup.start_in(
                sites[0], workdir, job.step, walk=self.walk, tree=self.folder
            ):
                job.kept = self.folder  # the step moves it into the venv once the warm-up ended
            else:
                shutil.rmtree(self.folder, ignore_errors=True)
                shutil.rmtree(workdir, ignore_errors=True)

    def close(self) -> None:
        """The prepare failed: stop the warm-up (if it started) and delete its folders."""
        with self.lock:
            self.closed = True
            self.warmup.stop()


def _early_warmup(run: ProvisionRun, todo: Sequence[PlannedStep], python: Path) -> _Early | None:
    """The prepare-time warm-up of a run whose first step to prepare is the baseline, where a
    warm-up can help (``warmup.wanted``): the import from the scratch or the walk
    (``warmup.early_mode``); None where neither is the one to run."""
    if not todo or todo[0].role != "baseline" or todo[0].name in run.opts.prepare_steps:
        return None
    import_env = verify.import_env(layout.overlay_env(run.spec, run.paths))
    if not warmup.wanted(
        install_env=run.env or {},
        import_env=import_env,
        compiles_at_install=False,  # uv (``wanted``)
        single_step=run.opts.only_step is not None,
    ):
        return None
    module = run.spec.abi.package.replace("-", "_")
    python_version = (run.manifest.marker_env or {}).get("python_version") or run.spec.python
    listing = warmup.listing_path(run.paths.cache, module, run.spec.abi.version, python_version)
    mode = warmup.early_mode(import_env, listing)
    if mode is None:
        return None
    logs = run.paths.logs
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "import-warmup.log"
    log.unlink(missing_ok=True)
    folder = run.paths.cache / "prepare" / f"warm-{todo[0].number:02d}-{todo[0].name}"
    return _Early(warmup.Warmup(python, module, import_env, log), folder, walk=mode == "walk")


def _names(package: str) -> Callable[[str], bool]:
    """Whether a line of a locked file installs ``package``: its requirement (the line without its
    ``--hash`` options and its comment) read by ``packaging`` (``prefetch.requirement_names``)."""
    wanted = [canonicalize_name(package)]

    def named(line: str) -> bool:
        words = itertools.takewhile(lambda w: not w.startswith("#"), line.split())
        requirement = " ".join(w for w in words if not w.startswith("--"))
        return prefetch.requirement_names([requirement]) == wanted

    return named


_HASHED = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*\S+\.whl\S*\s.*--hash=sha256:(?P<sha>[0-9a-f]{64})"
)


def _remember(job: prefetch.PrefetchJob, planned: PlannedStep) -> None:
    """Each prepared wheel's files into the RECORD cache by its sha256 (``index.records``), where
    ``check-lock`` reads them offline."""
    if not job.records or planned.locked_file is None:
        return
    for line in planned.locked_file.read_text(encoding="utf-8").splitlines():
        m = _HASHED.match(line.strip())
        if m is not None and (got := job.records.get(canonicalize_name(m["name"]))) is not None:
            records.put(m["sha"], got[1])


def _wait(
    run: ProvisionRun,
    prefetcher: prefetch.Prefetcher,
    jobs: Sequence[prefetch.PrefetchJob],
    todo: Sequence[PlannedStep],
) -> None:
    """Until every job has finished; the first one that failed stops the rest and the run."""
    while not all(j.done.is_set() for j in jobs) and prefetcher.failed() is None:
        time.sleep(POLL_SECONDS)
    bad = prefetcher.failed()
    if bad is None:
        return
    planned = next(s for s in todo if s.name == bad.step)
    raise _failure(run, planned, bad)


def _failure(run: ProvisionRun, planned: PlannedStep, job: prefetch.PrefetchJob) -> EnvbuildError:
    """The paragraph of a failed preparation: uv's own words (``classify_failure``), and what
    state the venv is in: as it was."""
    from envbuild.installer.base import classify_failure

    where = f"Full log: {job.log_file}"
    if job.result is None:
        err: EnvbuildError = InstallError(
            f"step {planned.number} ({planned.name!r}) could not be prepared (its scratch install"
            " did not start)"
        )
    else:
        err = classify_failure(planned, run.spec, job.result)
    fix = (err.hint or where).replace("The venv is kept as it is for inspection. ", "")
    err.message = f"preparing {err.message[0].lower()}{err.message[1:]}"
    err.hint = (
        "Nothing was installed: every step's downloads and builds are prepared before the first"
        f" one installs. {fix}"
    )
    return err


def _build_against_torch(
    run: ProvisionRun,
    todo: Sequence[PlannedStep],
    hooked: Sequence[PlannedStep],
    python: Path,
    prepared: set[str],
) -> tuple[str, ...]:
    """The builds against torch, made in a scratch venv that holds the steps before each (linked
    offline from uv's cache): returns the steps built. A step whose earlier steps are not all
    prepared here is left to the real run (said once)."""
    assert isinstance(run.installer, UvInstaller)
    built: list[str] = []
    for planned in hooked:
        earlier = [s for s in todo if s.number < planned.number]
        done_before = [s for s in run.plan.steps if s.number < planned.number and s not in todo]
        # the scratch venv holds the lock's torch only through the baseline step: where the torch
        # is the adopted venv's own (``--venv``), the build is the real step's, against it
        has_torch = any(s.role == "baseline" for s in earlier)
        if done_before or not has_torch or not all(s.name in prepared for s in earlier):
            events.emit(
                "info",
                f"step {planned.name}: its builds need the installed torch and are made when the"
                " step runs (the steps before it, torch's among them, are not all prepared here)",
            )
            continue
        scratch = run.paths.cache / "prepare" / f"venv-{planned.number:02d}-{planned.name}"
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            scratch_python = _scratch_venv(run, python, scratch, earlier)
            run.opts.prepare_steps[planned.name](planned, scratch_python)
        except EnvbuildError as exc:
            exc.hint = (
                f"Nothing was installed: the builds are made against the lock's torch in a scratch"
                f" venv before the first step installs. {exc.hint or ''}"
            ).strip()
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        built.append(planned.name)
    return tuple(built)


def _scratch_venv(
    run: ProvisionRun, python: Path, scratch: Path, steps: Sequence[PlannedStep]
) -> Path:
    """A venv at ``scratch`` holding ``steps`` (from uv's cache, no deps)."""
    assert isinstance(run.installer, UvInstaller)
    log = run.paths.logs / f"{scratch.name}.prepare.log"
    run.installer.create_venv(python, scratch, log_file=log, seed=False)
    scratch_python = scratch / "bin" / "python"
    for planned in steps:
        assert planned.locked_file is not None
        argv = [
            run.installer.uv,
            "pip",
            "install",
            "--no-deps",
            "--python",
            str(scratch_python),
            *prefetch.source_args(planned.args),
            "-r",
            str(planned.locked_file),
        ]
        # from the cache alone where the index lets uv keep its answers, else as the real step
        # installs it (an index that answers ``no-store`` is asked again; its files are cached)
        result = run_command([*argv, "--offline"], log_file=log, env=run.env or {})
        if not result.ok:
            result = run_command(argv, log_file=log, env=run.env or {})
        if not result.ok:
            raise InstallError(
                f"the scratch venv for the builds against torch could not take step"
                f" {planned.name!r}: {result.describe('uv')}:\n{result.tail}",
                hint=f"Full log: {log}",
            )
    return scratch_python
