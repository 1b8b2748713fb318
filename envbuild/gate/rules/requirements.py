"""A locked package that requires a torch (or protected package) the environment's one does not
satisfy: installing it would replace torch. The specifiers come from the lock where it records them
(poetry.lock; uv.lock for the project's own packages), else from the package's metadata on its
index (``envbuild.index.client``, cached by sha256); what could not be read is listed, not guessed.
"""

from __future__ import annotations

from packaging.utils import canonicalize_name

from envbuild.gate.context import Context
from envbuild.gate.metadata import declared_requirements
from envbuild.gate.model import Entry
from envbuild.gate.rules.extensions import unread_tag

__all__ = ["check"]


def check(ctx: Context) -> None:
    protected = ctx.policy.protected
    torch_name = ctx.policy.torch
    read: dict[int, tuple[str, ...] | None] = {}
    for view in ctx.views:
        if view.torch is None:
            continue
        pinned = {
            n: es[0].version
            for n in protected
            if len(es := view.by_name.get(n, [])) == 1 and es[0].version
        }
        dependents = _dependents(view.members.entries, protected)
        for entry in view.members.entries:
            if (
                entry.name in protected
                or entry.key in view.members.roots
                and entry.requires is None
            ):
                continue
            if entry.key in view.members.roots and not _project_on(
                ctx, entry.name, view.env.extras
            ):
                # `uv sync --only-group ...`: the project's own requirements are not installed
                continue
            if dependents is not None and entry.name not in dependents:
                continue
            if ctx.no_file(entry, view):
                continue
            if entry.key not in read:
                read[entry.key] = declared_requirements(
                    entry,
                    ctx.lock,
                    offline=ctx.offline,
                    index_urls=ctx.index_urls,
                    sources=ctx.sources,
                )
            requires = read[entry.key]
            if requires is None:
                # an extension wheel whose ABI tag is not read has its own notice (rules.extensions)
                if (dependents is not None or entry.version is not None) and not unread_tag(
                    entry, ctx.lock.format
                ):
                    label = entry.label()
                    if label not in ctx.unchecked and not ctx.sources.not_answered(label):
                        ctx.unchecked.append(label)
                continue
            for raw in requires:
                req = ctx.requirement(raw)
                if req is None or not req.specifier:
                    continue
                name = canonicalize_name(req.name)
                if name not in pinned or not ctx.applies(req, view):
                    continue
                target = (
                    view.members.target_of(entry, name, ctx.lock.entries)
                    if name == torch_name
                    else None
                )
                have = target.version if target is not None and target.version else pinned[name]
                if not req.specifier.contains(have, prereleases=True):
                    ctx.add(
                        entry.name,
                        "torch-requirement",
                        f"{entry.label()} requires {req.name}{req.specifier}, which the locked"
                        f" {name} {have} does not satisfy (installing it would replace {name})",
                        view.env,
                        entry,
                    )
    if ctx.unchecked:
        why = "--offline" if ctx.offline else "no metadata in the lock or on its index"
        shown = ", ".join(ctx.unchecked[:12]) + (
            f" and {len(ctx.unchecked) - 12} more" if len(ctx.unchecked) > 12 else ""
        )
        ctx.note(
            f"could not check the torch requirement of {len(ctx.unchecked)} package(s) ({why}):"
            f" {shown}"
        )


def _project_on(ctx: Context, name: str, extras: frozenset[str]) -> bool:
    """Whether a workspace member's own dependencies are installed here (uv's ``project-N-name``
    item is on; it always is unless a conflict set names the package itself)."""
    if ctx.lock.format != "uv.lock":
        return True
    return f"project-{len(name)}-{name}" in extras


def _dependents(entries: list[Entry], protected: set[str]) -> set[str] | None:
    """Names that depend on torch or a protected package, from the lock; None: not recorded."""
    vias = [e.via for e in entries if e.name in protected]
    if vias and all(v is not None for v in vias):
        return {n for v in vias for n in v or ()}
    if entries and all(e.dependencies is not None for e in entries):
        return {e.name for e in entries if set(e.dependencies or ()) & protected}
    return None
