"""The rules across a stack's steps, read from the step files and lock.json alone (milliseconds;
metadata the lock lacks comes from the metadata cache, or the index unless ``--offline``).

A stack installs its steps in turn and freezes torch and the protected set once the baseline step
ran, so where a uv.lock has one environment these rules read the order: a protected package pinned
once, never after the baseline; a later step that pins an earlier step's package at another version
only where its spec says ``replaces``; and the requirements of each package of a step with
dependencies against what that step and the earlier ones lock (pip would re-resolve them).
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.gate.rules.ownlock.steps import StackContext, StepView
from envbuild.gate.rules.pins import TRITON, pypi_triton_beside, pypi_triton_required
from envbuild.index.client import cached_requires
from envbuild.stacklock.compile import marker_env
from envbuild.stacklock.model import LockedPackage, LockedReq

__all__ = ["check"]


def check(ctx: StackContext, *, fetch: bool) -> None:
    """``fetch``: read metadata the lock and the cache lack from the steps' indexes."""
    pins = _protected_pins(ctx)
    _step_disagrees(ctx)
    _requirements(ctx, pins, fetch=fetch)


def _baseline(ctx: StackContext) -> int:
    return ctx.spec.baseline_index if ctx.spec.baseline_index is not None else -1


def _protected_pins(ctx: StackContext) -> dict[str, tuple[str, str]]:
    """{protected name: (version, where) first pinned}, with a finding for each pin that disagrees
    with it or with ``abi.version``, and for each one after the baseline."""
    abi = ctx.spec.abi
    baseline = _baseline(ctx)
    pins: dict[str, tuple[str, str]] = {}
    if abi.adopt:
        pins[abi.package] = (abi.version, "abi.version")
    for v in ctx.views:
        for r in v.reqs:
            if not ctx.is_protected(r.name) or r.version is None:
                continue
            if r.name == abi.package and r.version != abi.version:
                ctx.add(
                    v.file,
                    r.name,
                    "protected-pin-mismatch",
                    f"pinned to {r.version}, but abi.version is {abi.version}",
                )
            first = pins.setdefault(r.name, (r.version, v.file))
            if first[0] != r.version:
                ctx.add(
                    v.file,
                    r.name,
                    "protected-pin-mismatch",
                    f"pinned to {r.version} here but to {first[0]} in {first[1]}",
                )
            if v.index > baseline:
                ctx.add(
                    v.file,
                    r.name,
                    "protected-after-baseline",
                    f"{r.name} {r.version} is in step {v.name!r}, after the baseline; it is frozen"
                    " once the baseline step ran (leave it to the baseline, or make this step"
                    " no_deps)",
                )
    return pins


def _step_disagrees(ctx: StackContext) -> None:
    """A package pinned by an earlier step at another version, without ``replaces`` in the later
    step."""
    steps = ctx.spec.steps
    first: dict[str, tuple[str, str]] = {}  # name -> (version, step name) as installed so far
    for v in sorted(ctx.views, key=lambda v: v.index):
        replaces = steps[v.index].replaces if v.index < len(steps) else ()
        for r in v.reqs:
            if r.version is None or ctx.is_protected(r.name):
                continue
            prior = first.get(r.name)
            if prior is not None and prior[0] != r.version and r.name not in replaces:
                ctx.add(
                    v.file,
                    r.name,
                    "step-disagrees",
                    f"pinned to {r.version} here, but step {prior[1]!r} installs {r.name}"
                    f" {prior[0]}; make the "
                    f'steps agree, or say replaces = ["{r.name}"] in step {v.name!r}',
                )
            first[r.name] = (r.version, v.name)


def _applies(req: Requirement, env: dict[str, str], extras: set[str]) -> bool:
    if req.marker is None:
        return True
    try:
        return any(req.marker.evaluate({**env, "extra": e}) for e in {""} | extras)
    except Exception:  # noqa: BLE001 - an unknown marker variable: count it (conservative)
        return True


def _req_text(dep: Requirement) -> str:
    return f"{dep.name}{dep.specifier}" if dep.specifier else dep.name


def _requirements(ctx: StackContext, pins: dict[str, tuple[str, str]], *, fetch: bool) -> None:
    """Each step after the baseline: PyPI triton locked, and every declared requirement of its
    packages against what is locked so far (``torch-requirement``, ``unmet-requirement``,
    ``pypi-triton``); a no_deps step installs none of them, so only unmet ones are noted."""
    spec, abi = ctx.spec, ctx.spec.abi
    torch_version = pins.get(abi.package, (abi.version, ""))[0]
    env = marker_env(spec)
    provider = (
        abi.triton_provider if abi.triton_provider and abi.triton_provider != TRITON else None
    )
    missing_meta: list[str] = []
    seen: dict[str, tuple[str, str]] = {}  # name -> (version, file) locked by earlier steps
    for v in ctx.views:
        locked = {r.name: (r.version, v.file) for r in v.reqs if r.version}
        if v.index <= _baseline(ctx):
            seen.update(locked)
            continue
        extras: dict[str, set[str]] = {}
        if v.index < len(spec.steps):
            extras = {
                canonicalize_name(q.name): set(q.extras) for q in spec.steps[v.index].requirements
            }
        visible = {**seen, **locked}
        seen.update(locked)
        for r in v.reqs:
            if r.name == TRITON and provider:
                ctx.add(v.file, r.name, "pypi-triton", pypi_triton_beside(r.version, provider))
            if r.is_vcs or r.version is None:
                continue
            requires = _requires_for(ctx, r, v, fetch)
            if requires is None:
                missing_meta.append(f"{r.name} {r.version}")
                continue
            for raw in requires:
                try:
                    dep = Requirement(raw)
                except InvalidRequirement:
                    continue
                if _applies(dep, env, extras.get(r.name, set())):
                    _requirement(ctx, v, r, dep, visible, pins, torch_version, provider)
    if missing_meta:
        ctx.note(
            "metadata not available offline for: "
            + ", ".join(missing_meta)
            + " (their torch/triton requirements were not checked; run without --offline)"
        )


def _requirement(
    ctx: StackContext,
    v: StepView,
    r: LockedReq,
    dep: Requirement,
    visible: dict[str, tuple[str, str]],
    pins: dict[str, tuple[str, str]],
    torch_version: str,
    provider: str | None,
) -> None:
    """One declared requirement ``dep`` of ``r`` (locked in step ``v``)."""
    abi = ctx.spec.abi
    dn = canonicalize_name(dep.name)
    have = visible.get(dn)
    if (
        have is not None
        and not ctx.is_protected(dn)
        and dep.specifier
        and not dep.specifier.contains(have[0], prereleases=True)
    ):
        text = (
            f"{r.name} {r.version} requires {_req_text(dep)}, but {dn} {have[0]} is locked in"
            f" {have[1]}"
        )
        if v.no_deps:
            ctx.note(f"{v.file}: {text} (no_deps step: left unmet)")
        else:
            ctx.add(v.file, r.name, "unmet-requirement", text)
    if v.no_deps:
        return
    if dn == TRITON and provider:
        ctx.add(
            v.file,
            r.name,
            "pypi-triton",
            pypi_triton_required(f"{r.name} {r.version}", _req_text(dep), provider),
        )
        return
    pinned = torch_version if dn == abi.package else (pins[dn][0] if dn in pins else None)
    if pinned is None or not ctx.is_protected(dn) or not dep.specifier:
        return
    if not dep.specifier.contains(pinned, prereleases=True):
        ctx.add(
            v.file,
            r.name,
            "torch-requirement",
            f"{r.name} {r.version} requires {_req_text(dep)}, which the pinned {dn} {pinned} does"
            " not satisfy (it would replace it; make the step no_deps or pin another version)",
        )


def _requires_for(ctx: StackContext, r: LockedReq, view: StepView, fetch: bool) -> list[str] | None:
    """The Requires-Dist of a locked pin: from lock.json where it records them for the same file,
    else the metadata cache by sha256, else (``fetch``) the step's index."""
    entry: LockedPackage | None = view.packages.get(r.name)
    if (
        entry is not None
        and entry.version == r.version
        and entry.requires_dist is not None
        and set(r.hashes) & set(entry.hashes)
    ):
        return list(entry.requires_dist)
    got = cached_requires(r.hashes)
    if got is not None or not fetch:
        return got
    from envbuild.index.client import ArtifactFinder, requires_of
    from envbuild.stacklock.compile import step_sources

    if view.index >= len(ctx.spec.steps):
        return None
    sources, _ = step_sources(ctx.spec.steps[view.index], None)
    arts = ArtifactFinder(sources).matching(r.name, r.version or "", r.hashes)
    if not arts:
        return None
    return requires_of(next((a for a in arts if a.is_wheel), arts[0]))
