"""sdists whose own build needs torch: the builds stage, against the installed torch.

``projectlock.stages`` builds an sdist isolated, as uv sync builds it, unless the project's
``[tool.uv]`` says otherwise or it is a known CUDA extension. One more thing says otherwise: the
sdist's own ``pyproject.toml`` naming torch in ``[build-system] requires``. Built isolated, its
build environment would get a torch of its own, resolved from the index (uv sync does exactly
that): another download of a torch, and an extension compiled against a torch that is not the one
installed. Such an sdist goes to the builds stage instead, built without isolation against the
torch of stage 1, its other build requirements found in the venv or installed beside it for the
build (``wheelhouse.requires``); the plan says why.

The requirements are read from the sdist itself (``index.sdistreqs``, by its sha256: downloaded
once, the file in the wheelhouse offline), side by side. One that cannot be read leaves the sdist
isolated and says so: its install will fail the same way, with the installer's words.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild import events
from envbuild.projectlock.stages import Placed, StagePlan

__all__ = ["WHY", "names_torch", "route_torch_builds"]

WHY = (
    "sdist; its pyproject.toml names torch in [build-system] requires: built against the installed"
    " torch (isolated, as uv sync builds it, its build would get a torch of its own from the index)"
)
_WORKERS = 8


def names_torch(requires: Iterable[str]) -> bool:
    """Whether build requirements name torch."""
    for text in requires:
        try:
            if canonicalize_name(Requirement(text).name) == "torch":
                return True
        except InvalidRequirement:
            continue
    return False


def route_torch_builds(plan: StagePlan, wheelhouse: Path | None = None) -> StagePlan:
    """``plan`` with each isolated sdist whose build requirements name torch moved to the builds
    stage (see the module docstring); ``wheelhouse``: offline, where the sdists are."""
    todo = [
        i
        for i, p in enumerate(plan.placed)
        if p.stage == "rest" and p.artifact is not None and not p.artifact.wheel
    ]
    if not todo:
        return plan
    with ThreadPoolExecutor(min(_WORKERS, len(todo))) as pool:
        read = pool.map(lambda i: _requires(plan.placed[i], wheelhouse), todo)
        found = dict(zip(todo, read, strict=True))
    placed = list(plan.placed)
    for i, requires in found.items():
        if requires is not None and names_torch(requires):
            placed[i] = replace(placed[i], stage="builds", why=WHY)
    return replace(plan, placed=placed)


def _requires(p: Placed, wheelhouse: Path | None) -> tuple[str, ...] | None:
    """The build requirements of ``p``'s sdist, or None (said) when they cannot be read."""
    from envbuild.index.net import SourceError
    from envbuild.index.sdistreqs import build_requires

    assert p.artifact is not None
    url = p.artifact.url
    if wheelhouse is not None and (wheelhouse / p.artifact.filename).is_file():
        url = (wheelhouse / p.artifact.filename).as_uri()
    try:
        return build_requires(url, p.artifact.sha256, p.artifact.filename)
    except (SourceError, ValueError, OSError) as exc:
        events.emit(
            "warn",
            f"{p.label}: its build requirements could not be read ({exc}); it is built isolated,"
            " as uv sync builds it",
        )
        return None
