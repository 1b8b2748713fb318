"""``envbuild lock``: every step of a stack into a hash-pinned requirement file, and what moved.

Steps run in order; each step is resolved (``stacklock.compile``) with **every earlier step's pins
as constraints**, so the environment after step *i* is the one every later step was resolved
against: a step that needs another version of an earlier step's package is a ``LockError``
naming both steps and both versions, unless the spec says so for that step (``replaces =
["numpy"]``). Pins an earlier step made are left out of a later step's file (it installs on top
of them), as are torch and the protected set: no file after the baseline can carry another torch.

Day 2 (``stacklock.relock``): a step the last lock already holds for the same spec is kept as it is,
not resolved; a step that must be resolved again prefers its last pins; ``upgrade`` moves only
what it names. A relock of an unchanged spec writes nothing. The run reports every change per
step with its reason (``stacklock.changes``), and, when torch moved, the wheelhouse wheels built
against the old one.

Every step entry of ``lock.json`` records its ``step_digest`` (``stacklock.serve.step_digests``), so
a spec cut after a step (a Docker layer's slice) can be checked against the lock step by step.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envbuild import events, guard
from envbuild._io import atomic_write_text, sha256_file
from envbuild.errors import ConfigError, LockError, PreflightError
from envbuild.index.client import ArtifactFinder, Sources, cache_dir, requires_of
from envbuild.index.net import redact
from envbuild.plan import PlannedStep, make_plan
from envbuild.spec import StackSpec, Step
from envbuild.stacklock.changes import Change, StaleWheel, lock_changes, stale_wheels, torch_moved
from envbuild.stacklock.compile import (
    baseline_protected,
    check_reachable,
    compile_step,
    extra_args,
    file_header,
    git_refs,
    marker_env,
    package_entry,
    pin_no_deps,
    recorded_sources,
    resolver_python,
    step_flags,
    step_sources,
    tool_versions,
    uv_tools,
)
from envbuild.stacklock.git import pin_git
from envbuild.stacklock.model import (
    LOCK_VERSION,
    MANIFEST,
    PYLOCK,
    Lock,
    LockedReq,
    LockedStep,
    VcsPin,
    format_requirement,
    lock_dir,
    read_stack_lock,
    step_filename,
    write_lock,
)
from envbuild.stacklock.relock import (
    StepStatus,
    Upgrade,
    check_upgrade_names,
    old_pins,
    preferences,
    stale_steps,
)
from envbuild.stacklock.resolver import (
    Resolver,
    ResolverChoice,
    choose_resolver,
    uv_compile_step,
    uv_source_args,
)
from envbuild.stacklock.serve import step_digests

__all__ = ["LockOptions", "LockResult", "LockStatus", "lock_stack", "lock_status"]


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    python: str | None = (
        None  # pip-compile under this interpreter (default: see stacklock.resolver)
    )
    # auto: pip-compile when this interpreter is the target, else uv
    resolver: ResolverChoice = "auto"
    wheelhouse: str | None = None  # resolve only from this find-links folder/page (offline)
    # steps recorded as not locked (a partial lock), e.g. an unreachable index
    skip: tuple[str, ...] = ()
    output: Path | None = None  # default: the folder of the spec
    export_pylock: bool = True
    # --upgrade / --upgrade-package NAME[==VERSION]
    upgrade: Upgrade = field(default_factory=Upgrade)
    resolve_all: bool = False  # resolve every step again (still preferring the last pins)
    # wheelhouse folders checked for wheels built against an old torch
    wheel_dirs: tuple[Path, ...] = ()


@dataclass(frozen=True)
class LockResult:
    folder: Path
    files: list[Path]  # what this run wrote
    skipped: list[str]
    seconds: float
    written: bool = True  # False: the lock was current; nothing was resolved or written
    resolved: tuple[str, ...] = ()  # steps resolved again
    kept: tuple[str, ...] = ()  # steps kept as the last lock had them
    changes: tuple[Change, ...] = ()
    torch_moved: tuple[str, str] | None = None  # (old, new) torch version
    rebuild: tuple[StaleWheel, ...] = ()  # wheelhouse wheels built against the old torch


@dataclass(frozen=True)
class LockStatus:
    """``envbuild lock --check``: is the lock current for the spec, and if not, which steps are
    stale."""

    current: bool
    steps: tuple[StepStatus, ...]
    reason: str = ""  # why the lock is not current when every step is (lock.json's spec digest)


def _old_lock(folder: Path) -> Lock | None:
    try:
        return read_stack_lock(folder)
    except LockError as exc:  # a broken lock is replaced; its step files are left alone
        events.emit(
            "warn", f"the lock in {folder} is broken ({exc.message}); every step is resolved again"
        )
        return None


def lock_status(spec: StackSpec, output: Path | None = None) -> LockStatus:
    """Whether ``envbuild lock`` would have nothing to do, without resolving anything."""
    folder = output or lock_dir(spec)
    digests = step_digests(spec)
    if digests is None:
        raise LockError(
            f"{spec.path} no longer holds the spec envbuild loaded (was it edited just now?)"
        )
    old = _old_lock(folder)
    skip = tuple(s.name for s in old.steps if not s.locked) if old is not None else ()
    statuses = tuple(stale_steps(spec, old, digests, skip=skip))
    if any(not s.current for s in statuses):
        return LockStatus(False, statuses)
    assert old is not None
    if old.spec_digest != spec.digest:
        return LockStatus(
            False,
            statuses,
            "lock.json records another spec digest (something outside the steps "
            "changed, e.g. [layout]); `envbuild lock` rewrites lock.json without resolving",
        )
    return LockStatus(True, statuses)


class _Run:
    """One lock run's state across its steps."""

    def __init__(self, spec: StackSpec, opts: LockOptions, old: Lock | None, work: Path) -> None:
        self.spec, self.opts, self.old, self.work = spec, opts, old, work
        self.baseline = spec.baseline_index if spec.baseline_index is not None else -1
        self.pins: dict[str, tuple[str, str]] = {}  # name -> (version, step that pinned it last)
        if spec.abi.adopt:
            self.pins[spec.abi.package] = (spec.abi.version, "[abi]")
        self.protected: set[str] = {spec.abi.package}
        self.resolver: Resolver | None = None
        self.python: Path | None = None
        self.moved = False  # a step resolved again came out with other pins than the last lock's
        self.last_pins = old_pins(old)
        self.last_vcs: dict[str, VcsPin] = {}
        for s in old.steps if old is not None else ():
            for p in s.packages:
                if p.vcs is not None:
                    self.last_vcs.setdefault(canonicalize_name(p.name), p.vcs)

    def resolver_kind(self) -> Resolver:
        if self.resolver is None:
            self.resolver = choose_resolver(self.spec, self.opts.resolver, self.opts.python)
            events.emit("info", f"resolving with {self.resolver.kind} ({self.resolver.why})")
            if self.resolver.kind == "pip-compile":
                self.python = resolver_python(self.spec, self.opts.python)
        return self.resolver

    def compile(
        self,
        step: Step,
        requirements: list[str],
        sources: Sources,
        source_args: list[str],
        constraints: dict[str, str],
        prefs: list[str],
    ) -> list[LockedReq]:
        log = cache_dir() / "lock-logs" / self.spec.name / f"{step.name}.log"
        cons = [f"{n}=={v}" for n, v in sorted(constraints.items())]
        if self.resolver_kind().kind == "uv":
            return uv_compile_step(
                step,
                self.spec,
                requirements=requirements,
                source_args=uv_source_args(sources, step, self.opts.wheelhouse),
                constraints=cons,
                preferences=prefs,
                work=self.work,
                log_file=log,
            )
        assert self.python is not None
        return compile_step(
            step,
            python=self.python,
            requirements=requirements,
            source_args=source_args,
            constraints=cons,
            preferences=prefs,
            work=self.work,
            log_file=log,
        )

    def resolve(
        self, i: int, step: Step, planned: PlannedStep
    ) -> tuple[list[dict[str, Any]], list[str], Sources]:
        """Resolve one step: its ``lock.json`` package entries, its source arguments, its
        sources."""
        opts, upgrade = self.opts, self.opts.upgrade
        sources, source_args = step_sources(step, opts.wheelhouse)
        check_reachable(sources, step)
        resolve_from = sources
        if i > self.baseline >= 0 and not opts.wheelhouse:
            # the resolver must see the pinned torch: the baseline's sources as extras
            base = step_sources(self.spec.steps[self.baseline], None)[0]
            source_args = source_args + extra_args(base, step)
            resolve_from = Sources(
                (*sources.index_urls, *base.index_urls), (*sources.find_links, *base.find_links)
            )
        finder = ArtifactFinder(sources)
        events.emit("step", f"locking step {planned.number} ({step.name})", step=step.name)
        requirements = [
            pin_git(p, self.last_vcs, move=upgrade.asks(Requirement(p).name)) for p in step.packages
        ]
        earlier = {n: pin for n, pin in self.pins.items() if n not in step.replaces}
        forced = upgrade.constraints()
        if step.no_deps:
            reqs = pin_no_deps(
                step,
                finder,
                requirements=requirements,
                earlier=earlier,
                last=self.last_pins.get(step.name, {}),
                forced=forced,
                move=None if upgrade.everything else set(upgrade.packages),
            )
        else:
            constraints = {n: v for n, (v, _) in earlier.items()} | forced
            prefs = preferences(step.name, self.last_pins, upgrade)
            try:
                reqs = self.compile(
                    step, requirements, resolve_from, source_args, constraints, prefs
                )
            except LockError as exc:
                raise self.disagreement(
                    step, requirements, resolve_from, source_args, earlier, exc
                ) from exc
        for n in step.replaces:
            if n not in self.pins:
                events.emit(
                    "warn", f"step {step.name!r}: replaces {n}, but no earlier step pins it"
                )
        requested = set(step.names)
        if i > self.baseline:  # what the earlier steps installed is not installed again
            reqs = [
                r
                for r in reqs
                if r.name in requested
                or not (
                    r.name in self.protected
                    or (r.name in self.pins and self.pins[r.name][0] == r.version)
                )
            ]
        for r in reqs:
            prior = earlier.get(r.name)
            if (
                prior is not None
                and r.version is not None
                and r.version != prior[0]
                and r.name not in forced
            ):
                raise LockError(
                    f"step {step.name!r} pins {r.name} {r.version}, and step {prior[1]!r} pinned "
                    f"{r.name} {prior[0]}",
                    hint=_agree_hint(step, r.name, prior[1]),
                )
        refs = git_refs(list(step.packages))
        packages = [
            package_entry(r, finder, requested, refs, self.last_vcs)
            for r in sorted(reqs, key=lambda r: r.name)
        ]
        return packages, source_args, sources

    def disagreement(
        self,
        step: Step,
        requirements: list[str],
        sources: Sources,
        source_args: list[str],
        earlier: dict[str, tuple[str, str]],
        exc: LockError,
    ) -> LockError:
        """Why a step does not resolve under the earlier pins, when they are the reason: the step
        resolved again under torch and the protected set only, and compared with them."""
        loose = {
            n: v for n, (v, _) in earlier.items() if n in self.protected
        } | self.opts.upgrade.constraints()
        if len(loose) == len(earlier):
            return exc
        try:
            alone = self.compile(step, requirements, sources, source_args, loose, [])
        except LockError:
            return exc
        clashes = [
            (r, earlier[r.name])
            for r in alone
            if r.version is not None and r.name in earlier and earlier[r.name][0] != r.version
        ]
        if not clashes:
            return exc
        finder = ArtifactFinder(sources)
        parts = []
        for r, (version, owner) in clashes:
            why = _who_requires(r.name, version, alone, finder, self.spec)
            parts.append(
                f"it needs {r.name} {r.version}{f' ({why})' if why else ''}, and step {owner!r}"
                f" pinned {r.name} {version}"
            )
        first = clashes[0]
        return LockError(
            f"step {step.name!r} does not agree with the steps before it: " + "; ".join(parts),
            hint=_agree_hint(step, first[0].name, first[1][1]),
        )


def _agree_hint(step: Step, name: str, owner: str) -> str:
    return (
        f"Make the two steps agree on {name} (change the pin in step {owner!r}, or what step"
        f" {step.name!r} asks "
        f'for), or let step {step.name!r} replace it: replaces = ["{name}"] in its [[step]] table.'
    )


def _who_requires(
    name: str, version: str, reqs: list[LockedReq], finder: ArtifactFinder, spec: StackSpec
) -> str:
    """``"pandas 2.2.3 requires numpy>=2.3"``: a resolved package whose requirement on ``name``
    excludes ``version`` (metadata from the step's sources); "" when none is found."""
    env = marker_env(spec)
    for r in reqs:
        if r.version is None or r.name == name:
            continue
        try:
            arts = finder.matching(r.name, r.version, r.hashes)
            requires = requires_of(next((a for a in arts if a.is_wheel), arts[0])) if arts else []
        except (PreflightError, OSError, ValueError):
            continue
        for dep in guard.active(requires, env):
            if (
                canonicalize_name(dep.name) == name
                and dep.specifier
                and not dep.specifier.contains(version, prereleases=True)
            ):
                return f"{r.name} {r.version} requires {dep.name}{dep.specifier}"
    return ""


def _pins_of(packages: list[dict[str, Any]]) -> set[tuple[str, str | None, str | None]]:
    return {(p["name"], p["version"], (p["vcs"] or {}).get("commit")) for p in packages}


def _kept(last: LockedStep) -> dict[str, Any]:
    d = last.to_dict()
    return {k: d[k] for k in ("locked", "file", "file_sha256", "sources", "packages")}


def _check_writable(folder: Path) -> None:
    try:  # before minutes of resolving: the lock must be writable where it goes
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise ConfigError(
            f"cannot write the lock to {folder}: {exc.strerror}",
            hint="Choose a writable folder with --output.",
        ) from exc


@dataclass
class _Locked:
    """What locking the steps made: each step's entry of lock.json in order, the files written,
    the steps resolved and the steps kept as the last lock had them."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def lock_stack(spec: StackSpec, opts: LockOptions | None = None) -> LockResult:
    opts = opts or LockOptions()
    t0 = time.monotonic()
    folder = opts.output or lock_dir(spec)
    _check_writable(folder)
    unknown = [s for s in opts.skip if s not in [st.name for st in spec.steps]]
    if unknown:
        spec.step(unknown[0])  # raises with a did-you-mean
    digests = step_digests(spec)
    if digests is None:
        raise LockError(
            f"{spec.path} no longer holds the spec envbuild loaded (was it edited just now?)",
            hint="Run `envbuild lock` again.",
        )
    old = _old_lock(folder)
    check_upgrade_names(opts.upgrade, spec, old)
    statuses = tuple(
        stale_steps(
            spec,
            old,
            digests,
            skip=opts.skip,
            upgrade=opts.upgrade,
            resolve_all=opts.resolve_all,
            resolver=opts.resolver,
        )
    )
    skipped = [s.name for s in spec.steps if s.name in opts.skip]
    if (
        old is not None
        and all(s.current for s in statuses)
        and old.spec_digest == spec.digest
        and (not opts.export_pylock or (folder / PYLOCK).is_file())
    ):
        return LockResult(
            folder,
            [],
            skipped,
            time.monotonic() - t0,
            written=False,
            kept=tuple(s.name for s in spec.steps),
        )
    run, done = _lock_steps(spec, opts, old, folder, digests, statuses)
    lock = _write(spec, opts, folder, old, run, done.entries)
    return _written(spec, opts, folder, old, lock, done, skipped, t0)


def _written(
    spec: StackSpec,
    opts: LockOptions,
    folder: Path,
    old: Lock | None,
    lock: Lock,
    done: _Locked,
    skipped: list[str],
    t0: float,
) -> LockResult:
    """After lock.json is written: the files of steps that no longer exist removed, the PEP 751
    export written, and what moved (torch too, with the wheels built against the old one)."""
    files = done.files
    if old is not None:  # files of steps that no longer exist
        keep = {s.file for s in lock.steps}
        for s in old.steps:
            if s.file and s.file not in keep and (folder / s.file).is_file():
                (folder / s.file).unlink()
    if opts.export_pylock:
        from envbuild.stacklock.pylock import write_pylock

        files.append(write_pylock(lock))
    files.append(folder / MANIFEST)
    moved = torch_moved(old, lock)
    rebuild = tuple(stale_wheels(opts.wheel_dirs, spec.abi.version)) if moved else ()
    return LockResult(
        folder,
        files,
        skipped,
        time.monotonic() - t0,
        resolved=tuple(done.resolved),
        kept=tuple(done.kept),
        changes=tuple(lock_changes(old, lock, spec, opts.upgrade)),
        torch_moved=moved,
        rebuild=rebuild,
    )


def _lock_steps(
    spec: StackSpec,
    opts: LockOptions,
    old: Lock | None,
    folder: Path,
    digests: list[str],
    statuses: tuple[StepStatus, ...],
) -> tuple[_Run, _Locked]:
    """Each step in order: left out (``--skip-step``), kept as the last lock had it, or resolved
    with every earlier step's pins as constraints and its file written into ``folder``."""
    plan = make_plan(spec)
    done = _Locked()
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        run = _Run(spec, opts, old, Path(tmp))
        for i, (step, planned) in enumerate(zip(spec.steps, plan.steps, strict=True)):
            entry: dict[str, Any] = {
                "name": step.name,
                "role": planned.role,
                "step_digest": digests[i],
                "flags": step_flags(step),
                "requirements": [redact(p) for p in step.packages],
                "replaces": list(step.replaces),
            }
            if step.name in opts.skip:
                entry.update(
                    locked=False, reason="left out with --skip-step when this lock was made"
                )
                done.entries.append(entry)
                events.emit(
                    "warn",
                    f"step {step.name!r}: not locked (--skip-step); it resolves from the spec",
                )
                continue
            last = old.step(step.name) if old is not None else None
            packages = _lock_step(run, i, step, planned, statuses[i], last, entry, folder, done)
            if i == run.baseline:
                run.protected |= baseline_protected(spec, packages)
            for p in packages:
                if p["version"]:
                    run.pins[canonicalize_name(p["name"])] = (p["version"], step.name)
            done.entries.append(entry)
    return run, done


def _lock_step(
    run: _Run,
    i: int,
    step: Step,
    planned: PlannedStep,
    status: StepStatus,
    last: LockedStep | None,
    entry: dict[str, Any],
    folder: Path,
    done: _Locked,
) -> list[dict[str, Any]]:
    """One step kept (current, or only softly stale while nothing before it moved) or resolved
    and written; ``entry`` filled in, and the step's packages returned."""
    if last is not None and last.locked and (status.current or (status.soft and not run.moved)):
        entry.update(_kept(last))
        done.kept.append(step.name)
        packages: list[dict[str, Any]] = entry["packages"]
        return packages
    packages, source_args, sources = run.resolve(i, step, planned)
    fname = step_filename(planned.number, step.name)
    text = file_header(run.spec, step, planned.role, fname, source_args) + "".join(
        format_requirement(
            p["name"], p["version"], p["hashes"], p["vcs"]["url"] if p["vcs"] else None
        )
        for p in packages
    )
    path = folder / fname
    atomic_write_text(path, text)
    done.files.append(path)
    entry.update(
        locked=True,
        file=fname,
        file_sha256=sha256_file(path),
        sources=recorded_sources(sources, source_args),
        packages=packages,
    )
    done.resolved.append(step.name)
    if last is None or not last.locked or _pins_of(packages) != _pins_of(_kept(last)["packages"]):
        run.moved = True
    return packages


def _write(
    spec: StackSpec,
    opts: LockOptions,
    folder: Path,
    old: Lock | None,
    run: _Run,
    entries: list[dict[str, Any]],
) -> Lock:
    if run.resolver is not None:
        tools = tool_versions(run.python) if run.python is not None else uv_tools(spec)
        kind: str = run.resolver.kind
    else:  # nothing was resolved: what made the kept steps made the lock
        tools = dict(old.tools) if old is not None else {}
        kind = (old.target.get("resolver") if old is not None else None) or "pip-compile"
    manifest = {
        "lock_version": LOCK_VERSION,
        "stack": spec.name,
        "spec": (
            spec.path.name if spec.path.parent.resolve() == folder.resolve() else str(spec.path)
        ),
        "spec_digest": spec.digest,
        "python": spec.python,
        "target": {"python": spec.python, "platform": spec.target.platform, "resolver": kind},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tools": tools,
        "abi": {
            "package": spec.abi.package,
            "version": spec.abi.version,
            "local": spec.abi.local,
            "protected": sorted(run.protected),
        },
        "steps": entries,
    }
    # what is written reads back: the model's rules
    lock = Lock.from_dict(manifest, folder / MANIFEST)
    write_lock(lock)
    return lock
