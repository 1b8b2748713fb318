"""torch's own runtime is locked: every requirement torch declares for an environment (its
nvidia-* CUDA runtime wheels, ``cuda-toolkit[...]`` extras of newer builds, its triton) is
installed there, at a version torch accepts. A torch ``+cuXXX`` locked without them imports with
a missing-library error (astral-sh/uv#14540).

torch's declared requirements come from the lock where the format records them (poetry.lock),
else from the metadata cache by the locked wheel's sha256, else from its index (then cached);
``--offline`` with nothing cached says what was not checked.
"""

from __future__ import annotations

from packaging.utils import canonicalize_name

from envbuild.gate.context import Context
from envbuild.gate.metadata import declared_requirements

__all__ = ["check"]


def check(ctx: Context) -> None:
    read: dict[int, tuple[str, ...] | None] = {}
    not_checked: list[str] = []
    for view in ctx.views:
        torch = view.torch
        if torch is None or torch.version is None:
            continue
        if torch.key not in read:
            read[torch.key] = declared_requirements(
                torch,
                ctx.lock,
                offline=ctx.offline,
                index_urls=ctx.index_urls,
                supplied=False,
                sources=ctx.sources,
            )
        requires = read[torch.key]
        if requires is None:
            if torch.label() not in not_checked and not ctx.sources.not_answered(torch.label()):
                not_checked.append(torch.label())
            continue
        for raw in requires:
            req = ctx.requirement(raw)
            if req is None or not ctx.applies(req, view):
                continue
            name = canonicalize_name(req.name)
            got = view.by_name.get(name, [])
            if not got:
                ctx.add(
                    torch.name,
                    "torch-runtime",
                    f"{torch.label()} requires {req.name}{req.specifier} here, which the lock "
                    "does not install: torch will fail to load its libraries",
                    view.env,
                    torch,
                )
                continue
            versions = [e.version for e in got if e.version]
            if (
                req.specifier
                and versions
                and not any(req.specifier.contains(v, prereleases=True) for v in versions)
            ):
                ctx.add(
                    name,
                    "torch-runtime",
                    f"{torch.label()} requires {req.name}{req.specifier}, the lock "
                    f"installs {', '.join(versions)}",
                    view.env,
                    got[0],
                )
    if not_checked:
        why = (
            "--offline and nothing cached"
            if ctx.offline
            else "no metadata in the lock or on its index"
        )
        ctx.note(
            f"torch's runtime requirements were not checked for {', '.join(not_checked)} ({why})"
        )
