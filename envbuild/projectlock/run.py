"""``provision --lock``: read, choose, gate, stage, adopt, then provision's own guarded run.

Every refusal comes before anything is made: an unreadable or unsupported lock and an ambiguous
selection (exit 2), a lock the gate fails (exit 8), a venv whose torch is not the lock's (exit 6),
file hosts that do not answer (exit 3), an offline wheelhouse that lacks a file or holds other
bytes than the lock pins (exit 5, ``projectlock.offlinefiles``). Then
``envbuild.provision.provision`` runs the stages as steps (``projectlock.stagestack``), and removes
what the selection does not install (``provision.exact``, unless ``--inexact``).

Beside it: ``request`` (what is asked, what is prepared), ``adopt`` (the torch a ``--venv``
already has, kept as the baseline), ``unhashed`` (files the lock records no sha256 for); the
interpreter for a lock's ``requires-python`` is ``installer.python.python_for``'s choice.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from envbuild import events, layout
from envbuild.errors import (
    ConfigError,
    EnvbuildError,
    LockError,
    PreflightError,
)
from envbuild.gate.selection import (
    Chosen,
    host_platform_key,
    judge_selection,
    python_for_lock,
    refuse,
)
from envbuild.projectlock.adopt import (
    adopt,
    base_torch_of,
    first_adoption,
    record_adoption,
    say_python_has_torch,
    verify_adoption,
)
from envbuild.projectlock.record import write_record
from envbuild.projectlock.request import LockRequest, Prepared
from envbuild.projectlock.stages import StagePlan, host_glibc, plan_stages
from envbuild.projectlock.stagestack import HOME_LINKS, stack_for, stage_files
from envbuild.projectlock.unhashed import pin_unhashed, say_unhashed
from envbuild.provision.options import ProvisionOptions, ProvisionResult
from envbuild.spec import StackSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from envbuild.index.records import FileOverlap
    from envbuild.projectlock.image import SliceSourceJSON


__all__ = [
    "LockRequest",
    "Prepared",
    "adopt",
    "base_torch_of",
    "prepare",
    "prepare_lock",
    "provision_lock",
    "provision_slice",
    "python_for_lock",
    "unreachable_hosts",
    "verify_adoption",
]


DEFAULT_ROOT = "/mnt/data"


def prepare(req: LockRequest, python: str | None = None, *, refusing: bool = True) -> Prepared:
    """Choose, gate and stage the lock (no network, no venv): what ``plan --lock`` prints. The
    gate answers which environment, on ``python`` (a minor; None: the request's interpreter, else
    the lock's), and its verdict in one call (``gate.selection.judge_selection``). A lock the gate
    fails is refused here (exit 8), unless ``refusing`` is off: ``plan --lock`` shows its stages
    first, then refuses it."""
    judged = judge_selection(req.selection, python)
    chosen, report, failing = judged.chosen, judged.report, judged.failing
    if not req.rebuild_mismatched:
        if refusing:
            refuse(chosen, failing, req.accept)
        prepared = Prepared(chosen, report, _stages(chosen, req), failing=tuple(failing))
        say_unhashed(prepared, req)
        _check_base_torch(prepared)
        return prepared
    from envbuild.projectlock.offlinefiles import wheelhouse_folder
    from envbuild.projectlock.rebuild import RULE, rebuild_mismatched

    # refused before any index is asked for an sdist
    if refusing and any(f.rule != RULE for f in failing):
        refuse(chosen, failing, req.accept, rebuild=True)
    folder = wheelhouse_folder(req.wheelhouse) if req.wheelhouse else None
    plan, failing = rebuild_mismatched(_stages(chosen, req), failing, wheelhouse=folder)
    if refusing:
        refuse(chosen, failing, req.accept, rebuild=True)
    prepared = Prepared(chosen, report, plan, failing=tuple(failing))
    say_unhashed(prepared, req)
    _check_base_torch(prepared)
    return prepared


def _stages(chosen: Chosen, req: LockRequest) -> StagePlan:
    """The stages of ``chosen``, an sdist whose own build requirements name torch among the builds
    (``projectlock.torchbuilds``: read from the sdist, offline from the wheelhouse)."""
    from envbuild.projectlock.offlinefiles import wheelhouse_folder
    from envbuild.projectlock.torchbuilds import route_torch_builds

    plan = plan_stages(chosen, project=req.project, base_torch=req.base_torch)
    try:
        folder = wheelhouse_folder(req.wheelhouse) if req.wheelhouse else None
    except ConfigError:  # a wheelhouse served over HTTP: the sdists are read from their sources
        folder = None
    return route_torch_builds(plan, folder)


def prepare_lock(req: LockRequest, *, refusing: bool = True) -> Prepared:
    """The one path of every ``--lock`` front end (``plan``, ``provision``, ``docker``,
    ``wheelhouse mirror``, ``preflight``): a ``req.venv``'s torch as the baseline of a lock that
    leaves torch to it, then ``prepare`` (the lock read once, its interpreter chosen from
    ``req.python`` / ``req.venv``, chosen and judged by the gate, staged)."""
    if req.venv is not None and req.base_torch is None:
        req = replace(req, base_torch=base_torch_of(req.venv))
    return prepare(req, refusing=refusing)


def _prepare_or_reuse(
    req: LockRequest, opts: ProvisionOptions
) -> tuple[Prepared, Callable[[], None]]:
    """``prepare_lock`` for a provision, or the last run's answer where nothing it read has changed
    (``projectlock.reuse``); and what to call once the provision has finished (keeps a fresh
    answer)."""
    from envbuild.projectlock.reuse import reuse_for

    root = Path(opts.root) if opts.root is not None else Path(DEFAULT_ROOT)
    kept = reuse_for(root, req)
    if kept is None:
        return prepare_lock(req), lambda: None
    prepared = kept.load()
    if prepared is not None:
        return prepared, lambda: None
    with kept.recording() as reads:
        fresh = prepare_lock(req)
    return fresh, lambda: kept.keep(fresh, reads)


def _check_base_torch(prepared: Prepared) -> None:
    """A lock that leaves torch to the base environment: every locked package that depends on torch
    has its declared requirement on torch checked against the torch that is there (its metadata:
    from the lock, the cache, else its index). LockError (exit 8) naming the packages it does not
    meet, before anything is made; a requirement that cannot be read is said, not guessed."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    from envbuild.gate.metadata import declared_requirements
    from envbuild.projectlock.stages import BASE_TORCH_KEY

    plan = prepared.plan
    if plan.torch.key != BASE_TORCH_KEY or not plan.torch.version:
        return
    try:
        have = Version(plan.torch.version)
    except InvalidVersion:
        return
    values = prepared.chosen.env.values
    unmet: list[str] = []
    unread: list[str] = []
    for p in plan.placed:
        if "torch" not in (p.entry.dependencies or ()):
            continue
        reqs = declared_requirements(p.entry, prepared.chosen.lock, offline=False)
        if reqs is None:
            unread.append(p.label)
            continue
        for text in reqs:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.name.lower() != "torch" or (
                req.marker is not None and not req.marker.evaluate({**values, "extra": ""})
            ):
                continue
            if (
                req.specifier
                and not req.specifier.contains(have.public, prereleases=True)
                and not req.specifier.contains(have, prereleases=True)
            ):
                unmet.append(f"{p.label} requires {text.split(';')[0].strip()}")
    if unread:
        events.emit(
            "warn",
            f"the requirement on torch of {', '.join(unread)} could not be read (no metadata in the"
            " lock, the cache or a reachable index): not checked against the environment's torch",
        )
    if unmet:
        raise LockError(
            f"{prepared.chosen.path}: the lock leaves torch to the environment, whose torch"
            f" {plan.torch.version} does not meet what locked packages require, so nothing was"
            f" installed: {'; '.join(unmet)}",
            hint="Use a base image with a torch they accept, or re-lock them for this torch.",
        )


def rebuilt_record(plan: StagePlan) -> dict[str, object]:
    """What a receipt's lock record says of ``--rebuild-mismatched`` builds: {name: where its sdist
    came from, and that the lock does not pin it} ({} where nothing was rebuilt)."""
    rebuilt = {p.entry.name: p.rebuilt for p in plan.placed if p.rebuilt}
    return {"rebuilt": rebuilt} if rebuilt else {}


def unreachable_hosts(prepared: Prepared, spec_steps: set[str]) -> list[str]:
    """HEAD of one file per host the stages still to run download from (file:// is the
    installer's)."""
    from envbuild.index.net import unreachable

    first: dict[str, str] = {}
    for p in prepared.plan.placed:
        if p.stage not in spec_steps or p.artifact is None:
            continue
        parts = urlsplit(p.artifact.url)
        if parts.scheme in ("http", "https"):
            first.setdefault(f"{parts.scheme}://{parts.netloc}", p.artifact.url)
    return unreachable(first.values())


def provision_lock(req: LockRequest, opts: ProvisionOptions) -> tuple[Prepared, ProvisionResult]:
    """Provision the lock's chosen environment (see the module docstring)."""
    from envbuild.installer import installer_for
    from envbuild.installer.pip import refuse_without_pip
    from envbuild.projectlock.buildreqs import build_sources
    from envbuild.projectlock.builds import BuildCache, caches
    from envbuild.projectlock.offlinebuilds import check_builds
    from envbuild.projectlock.offlinefiles import check_files, in_wheelhouse, wheelhouse_folder
    from envbuild.provision.core import began, pending_steps, provision
    from envbuild.wheelhouse.sharedcache import open_shared

    folder = wheelhouse_folder(req.wheelhouse) if req.wheelhouse else None
    prepared, keep = _prepare_or_reuse(req, opts)
    here = host_platform_key().replace("-", " ")
    if prepared.chosen.env.platform != here:
        raise ConfigError(
            f"--environment chose {prepared.chosen.env.platform}, and this host is {here}:"
            " provision installs on this host",
            hint="`envbuild plan --lock` shows another platform's stages.",
        )
    newer = [p for p in prepared.plan.placed if p.needs_glibc is not None]
    if newer:
        have = host_glibc()
        raise ConfigError(
            f"{prepared.chosen.path}: {len(newer)} package(s) of {prepared.chosen.env.name} have"
            f" only wheels for a newer glibc than this host's ({f'2.{have}' if have else 'none'}),"
            " so nothing was installed: "
            + ", ".join(
                f"{p.label} ({p.artifact.filename if p.artifact else '?'})" for p in newer[:5]
            ),
            hint=(
                "Provision on a host with that glibc (or in an image based on one: `envbuild docker"
                " --lock`), or re-lock with an older manylinux wheel of them."
            ),
        )
    if opts.venv is not None:
        # the files: first_adoption
        prepared = adopt(prepared, opts.venv, req.replace_torch, verify=False)
    elif opts.python is not None:
        say_python_has_torch(opts.python, prepared.plan.torch.version or "")
    backend = installer_for(opts.backend).name
    pip_backend = backend == "pip"
    root = str(opts.root) if opts.root is not None else DEFAULT_ROOT
    # --home: $HOME/venv and $HOME/data, as the stacks make them
    links = HOME_LINKS if opts.home is not None else None
    # where isolated builds get theirs
    build = build_sources(prepared.chosen.source.project, req.build_constraints)
    if folder is not None:  # offline: from the wheelhouse alone (``--no-index --find-links DIR``)
        build = replace(
            build, index_url=None, extra_index_urls=(), find_links=(str(folder),), no_index=True
        )
    spec = stack_for(
        prepared.plan,
        root=root,
        adopt=prepared.adopted is not None,
        pip_backend=pip_backend,
        torch_version=prepared.adopted,
        digest_plan=prepared.full,
        links=links,
        build=build,
    )
    paths = layout.paths_for(spec, opts.root)
    venv_python = opts.venv.expanduser() / "bin" / "python" if opts.venv else paths.python
    refuse_without_pip(venv_python, backend)
    if prepared.full is not None and opts.venv is not None:
        kept = first_adoption(prepared, spec.digest, paths, opts.venv)
        if kept is not prepared:
            prepared = kept
            spec = stack_for(
                prepared.plan,
                root=root,
                adopt=True,
                pip_backend=pip_backend,
                torch_version=prepared.adopted,
                digest_plan=prepared.full,
                links=links,
                build=build,
            )
    source = {
        **prepared.chosen.to_json(),
        "stages": {s.name: list(s.packages) for s in spec.steps},
        "adopted_torch": prepared.adopted,
        "wheelhouse": str(folder) if folder else None,
        # what the adopted venv already held, by the stage it would have gone to (smoke checks them
        # too)
        "kept": {
            p.entry.name: p.stage
            for p in (prepared.full.placed if prepared.full else ())
            if p.entry.name in prepared.already
        },
        **rebuilt_record(prepared.plan),
    }
    run_opts = replace(
        opts,
        backend=backend,
        seed=pip_backend,
        lock_source=source,
        selection=selected_names(prepared),
        exact=not req.inexact,
        accept_overlap=overlap_acceptor(req, prepared),
    )
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        if folder is None:
            plan, pinned = pin_unhashed(prepared.plan, paths.state)  # projectlock.unhashed
            if pinned:
                source["unhashed"] = pinned
                run_opts = replace(run_opts, lock_source=source)
        else:
            plan = in_wheelhouse(prepared.plan, folder)
        locked = stage_files(plan, spec, Path(tmp), pip_backend=pip_backend)
        # what provision will run
        todo = set(pending_steps(spec, replace(run_opts, locked=locked), paths))
        if folder is None:
            if todo and (bad := unreachable_hosts(prepared, todo)):
                raise PreflightError(
                    "the lock's file hosts do not answer: " + "; ".join(bad),
                    hint="Check the network (or a proxy), or provision where they can be reached.",
                )
        # the offline check hashes the files of the steps still to run: a finished root re-verifies
        else:
            check_files(plan, folder, todo)
            check_builds(plan, folder, todo, build)  # and what their isolated builds need
        builds = BuildCache(
            plan.chosen.path,
            caches(paths.root, folder),
            paths.state / "builds",
            Path(tmp),
            open_shared(opts.build_cache),
            pins=plan.stage("builds"),  # the typed pins, as stage_files wrote them
        )
        source["builds"] = builds.provenance  # filled as the builds stage runs: the receipt's
        try:
            result = provision(
                spec, replace(run_opts, locked=locked, prepare_steps={"builds": builds})
            )
        except (EnvbuildError, KeyboardInterrupt):  # finished or not, the venv names its lock
            if began(spec, opts.root):
                write_record(
                    opts.venv or paths.venv,
                    paths.root,
                    spec,
                    {**prepared.chosen.to_json(), "adopted_torch": prepared.adopted},
                )
            raise
    if opts.venv is not None:
        record_adoption(prepared, spec.digest, paths, opts.venv)  # provision raised if unfinished
    keep()
    return prepared, result


def overlap_acceptor(req: LockRequest, prepared: Prepared) -> Callable[[FileOverlap], str | None]:
    """Whether the lock's reviewed exceptions (``--accept``, else beside the lock) accept an
    overlap over the protected baseline (``provision.overlaps``): the reason, or None."""
    from envbuild.gate.findings import Finding
    from envbuild.provision.overlaps import RULE

    where = prepared.chosen.env.name

    def accept(overlap: FileOverlap) -> str | None:
        # read when an overlap asks (the gate read the same file while preparing: a broken one
        # was refused there)
        from envbuild.gate.accept import load_for

        project = prepared.chosen.source.project
        exceptions = [x for x in load_for(req.lock, req.accept, project) if x.rule == RULE]
        for name in overlap.packages:
            finding = Finding(file=str(req.lock), package=name, rule=RULE, reason="")
            hit = next((x for x in exceptions if x.matches(finding, where)), None)
            if hit is not None:
                return hit.reason
        return None

    return accept


def selected_names(prepared: Prepared) -> tuple[str, ...]:
    """The names the chosen selection installs (torch, every stage, what an adopted venv already
    held of it): what an exact sync keeps."""
    plan = prepared.full or prepared.plan
    return tuple(sorted({plan.torch.name, *(p.entry.name for p in plan.placed)}))


def provision_slice(
    path: Path, opts: ProvisionOptions
) -> tuple[StackSpec, SliceSourceJSON, ProvisionResult]:
    """``provision --lock SLICE``: the stages of one image layer's slice (``projectlock.image``).
    The gate ran when the Dockerfile was rendered; the slice's stages are installed as
    ``provision_lock`` installs them, each from its hash-pinned lines, the guard after each."""
    from envbuild.installer import installer_for
    from envbuild.projectlock.builds import BuildCache, caches
    from envbuild.projectlock.image import read_slice
    from envbuild.provision.core import provision
    from envbuild.wheelhouse.sharedcache import open_shared

    backend = installer_for(opts.backend).name
    spec, texts, source = read_slice(
        path, str(opts.root) if opts.root is not None else DEFAULT_ROOT
    )
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        locked = {}
        for n, step in enumerate(spec.steps, 1):
            locked[step.name] = Path(tmp) / f"{n:02d}-{step.name}.txt"
            locked[step.name].write_text(texts[step.name], encoding="utf-8")
        paths = layout.paths_for(spec, opts.root)
        builds = BuildCache(
            path,
            caches(paths.root, None),
            paths.state / "builds",
            Path(tmp),
            open_shared(opts.build_cache),
        )
        result = provision(
            spec,
            replace(
                opts,
                backend=backend,
                locked=locked,
                seed=backend == "pip",
                lock_source={**source, "builds": builds.provenance},
                prepare_steps={"builds": builds},
            ),
        )
    return spec, source, result
