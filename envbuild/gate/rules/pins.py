"""One torch per environment, pinned exactly; the policy's minimum and local tag; protected
packages pinned once; PyPI ``triton`` never beside ``pytorch-triton``; markers that parse."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envbuild.gate.context import Context, View
from envbuild.gate.markers import InvalidMarker

if TYPE_CHECKING:
    from packaging.version import Version

TRITON, PYTORCH_TRITON = "triton", "pytorch-triton"

__all__ = [
    "PYTORCH_TRITON",
    "TRITON",
    "check",
    "local_of",
    "public_of",
    "pypi_triton_beside",
    "pypi_triton_required",
]


def pypi_triton_beside(version: str | None, provider: str) -> str:
    """The ``pypi-triton`` reason where a lock installs PyPI triton beside ``provider``, the
    distribution torch's triton comes from (``pytorch-triton`` for nightlies)."""
    locked = f"PyPI triton {version}" if version else "PyPI triton"
    return (
        f"{locked} is locked beside {provider} (both own the `triton` module; the one installed"
        " last wins)"
    )


def pypi_triton_required(who: str, requirement: str, provider: str) -> str:
    """The ``pypi-triton`` reason where ``who`` requires PyPI triton and its step resolves its
    dependencies (envbuild's own locks): installing it brings PyPI triton next to ``provider``."""
    return (
        f"{who} requires {requirement} (PyPI triton), which installs next to {provider} from the"
        " baseline (both own the `triton` module)"
    )


def public_of(v: str) -> Version | None:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(Version(v).public)
    except InvalidVersion:
        return None


def local_of(v: str) -> str | None:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v).local
    except InvalidVersion:
        return None


def check(ctx: Context) -> None:
    _markers(ctx)
    torch_name = ctx.policy.torch
    from envbuild.gate.formats.pixi import conda_packages

    conda = conda_packages(ctx.lock)
    no_torch = []
    for view in ctx.views:
        env = view.env
        pins = view.by_name.get(torch_name, [])
        if not pins:
            no_torch.append(env.name)
            continue
        for p in pins:
            if p.version is None:
                ctx.add(
                    torch_name,
                    "torch-pins",
                    f"`{p.raw}` is not pinned to one exact version (==)",
                    env,
                    p,
                )
        versions = sorted({p.version for p in pins if p.version})
        # conda's and PyPI's: ``rules.conda`` says it (``conda-and-pypi``)
        mixed = 0 < len({p.key for p in pins} & conda.keys()) < len(pins)
        if len(versions) > 1 and not mixed:
            ctx.add(
                torch_name,
                "torch-pins",
                f"{len(versions)} torch builds in one environment "
                f"({', '.join(versions)}): one torch per environment",
                env,
                pins[-1],
            )
        elif len(versions) == 1:
            _torch_policy(ctx, versions[0], view)
        for name in sorted(ctx.policy.protected - {torch_name}):
            got = sorted({p.version or p.raw for p in view.by_name.get(name, [])})
            if len(got) > 1:
                ctx.add(
                    name,
                    "protected-pins",
                    f"pinned {len(got)} times in one environment: {', '.join(got)}",
                    env,
                    view.by_name[name][-1],
                )
        if TRITON in view.by_name and PYTORCH_TRITON in view.by_name:
            triton = view.by_name[TRITON][0]
            ctx.add(
                TRITON,
                "pypi-triton",
                pypi_triton_beside(triton.version, PYTORCH_TRITON),
                env,
                triton,
            )
    if no_torch and len(no_torch) < len(ctx.views):
        shown = "; ".join(no_torch[:6]) + (
            f" and {len(no_torch) - 6} more" if len(no_torch) > 6 else ""
        )
        ctx.note(f"no {torch_name} in {len(no_torch)} environment(s): {shown}")
    elif no_torch:
        locked = sorted({e.version or "?" for e in ctx.lock.entries if e.name == torch_name})
        # e.g. `override-dependencies = ["torch; sys_platform == 'never'"]`: the base image's torch
        if locked:
            ctx.note(
                f"{torch_name} {', '.join(locked)} is locked but no environment installs it (every"
                f" edge to it is marked off: a base image's {torch_name} is meant); its rules did"
                " not apply"
            )
        else:
            ctx.note(f"{torch_name} is not in this lock; its rules did not apply")


def _torch_policy(ctx: Context, torch: str, view: View) -> None:
    name, env, entry = ctx.policy.torch, view.env, view.torch
    if ctx.policy.minimum:
        have, floor = public_of(torch), public_of(ctx.policy.minimum)
        if have is not None and floor is not None and have < floor:
            ctx.add(
                name,
                "torch-min",
                f"{name} {torch} is below the minimum {ctx.policy.minimum}",
                env,
                entry,
            )
    tag = local_of(torch)
    if ctx.policy.local and tag != ctx.policy.local:
        ctx.add(
            name,
            "torch-local",
            f"{name} {torch} has local tag {'+' + tag if tag else 'none'}, "
            f"the policy wants +{ctx.policy.local}",
            env,
            entry,
        )


def _markers(ctx: Context) -> None:
    for entry in ctx.lock.entries:
        if entry.marker:
            try:
                ctx.lock.markers.check(entry.marker)
            except InvalidMarker as exc:
                ctx.add(
                    entry.name,
                    "broken-marker",
                    f"marker `{entry.marker}` does not parse ({_first_line(exc)}); "
                    "the entry is counted in every environment",
                    None,
                    entry,
                )
    owners = ctx.lock.extra.get("marker_owner", {})
    for text in dict.fromkeys(ctx.lock.marker_texts):
        try:
            ctx.lock.markers.check(text)
        except InvalidMarker as exc:
            owner = ctx.lock.entries[owners[text]] if text in owners else None
            what = f"a dependency marker of {owner.label()}" if owner else "marker"
            ctx.add(
                owner.name if owner else "-",
                "broken-marker",
                f"{what} `{text}` does not parse "
                f"({_first_line(exc)}); the edge is followed in every environment",
                None,
                owner,
            )


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
