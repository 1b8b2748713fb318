"""Isolated builds as ``uv sync`` runs them: a project, a workspace member, a plain sdist or git pin
(one whose build does not need the installed torch) is built in an isolated environment whose
``build-system.requires`` are resolved from the project's indexes, never with ``--no-index``.

The packages themselves stay exact: each step installs hash-pinned files (``name @ URL
--hash=sha256:...``) with ``--no-deps``, so an index only ever answers a build's requirements.
Where they come from, as uv looks (``build_sources``):

- the project's ``[tool.uv]`` beside the lock: its ``[[tool.uv.index]]`` tables (the ``default``
  one the index, the others, in order, extra indexes; ``explicit`` ones serve only the packages
  pinned to them, so not a build; ``format = "flat"`` ones are find-links), ``index-url``,
  ``extra-index-url``, ``find-links`` and ``no-index``;
- else the user's configuration: uv's own (``uv.toml``, ``UV_*``: uv reads it) and pip's
  (pip.conf, ``PIP_*``: pip reads it; the uv backend is handed it, ``installer.uv``).

Build constraints, as uv applies them to every build: ``[tool.uv] build-constraint-dependencies``
and ``--build-constraints FILE``, written to one content-addressed file in envbuild's cache
(``$ENVBUILD_CACHE_DIR/build-constraints/<sha256>.txt``) that the step names through
``UV_BUILD_CONSTRAINT`` / ``PIP_BUILD_CONSTRAINT``. ``no-build-isolation-package`` and
``extra-build-dependencies`` move a package to the ``builds`` stage (``projectlock.stages``), built
without isolation against the installed torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from envbuild.errors import ConfigError
from envbuild.gate.project import Project, project_of
from envbuild.index.wheeltags import is_sdist
from envbuild.projectlock.stages import Placed

__all__ = ["BuildSources", "build_sources", "builds_isolated", "constraints_file", "step_env"]


@dataclass(frozen=True)
class BuildSources:
    """Where an isolated build's requirements come from, and what constrains them."""

    index_url: str | None = None  # None: the user's configuration (uv's, pip's)
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False  # [tool.uv] no-index: only find-links
    constraints: tuple[
        str, ...
    ] = ()  # requirement lines: build-constraint-dependencies, --build-constraints
    where: str = "the user's index configuration (uv.toml / UV_*, pip.conf / PIP_*)"
    index_strategy: str = "first-index"  # [tool.uv] index-strategy, else uv's default


def builds_isolated(p: Placed) -> bool:
    """Whether installing ``p`` runs an isolated build: the project, a workspace member or a local
    folder, a git pin, or an sdist, outside the ``builds`` stage (built against torch)."""
    if p.stage == "builds":
        return False
    return p.artifact is None or (not p.artifact.wheel and is_sdist(p.artifact.filename))


def build_sources(project: Project | Path, constraint_files: Sequence[Path] = ()) -> BuildSources:
    """The sources and constraints of the lock's isolated builds (see the module docstring), from
    the project (or the one beside the lock at a path). ConfigError (exit 2): a
    ``--build-constraints`` file that cannot be read."""
    project = project_of(project)
    folder = project.folder
    uv = project.tool_uv
    lines = [
        str(x).strip() for x in uv.get("build-constraint-dependencies") or () if isinstance(x, str)
    ]
    for f in constraint_files:
        lines += _constraint_lines(f)
    index, extras, links = _indexes(uv, folder)
    legacy = uv.get("index-url")
    if isinstance(legacy, str) and index is None:
        index = _located(legacy, folder)
    extras += [_located(u, folder) for u in _strings(uv.get("extra-index-url"))]
    links += [_located(u, folder) for u in _strings(uv.get("find-links"))]
    configured = index is not None or bool(extras or links) or uv.get("no-index") is True
    return BuildSources(
        index_url=index,
        extra_index_urls=tuple(extras),
        find_links=tuple(links),
        no_index=uv.get("no-index") is True,
        constraints=tuple(dict.fromkeys(x for x in lines if x)),
        index_strategy=(
            str(uv["index-strategy"])
            if uv.get("index-strategy")
            in ("first-index", "unsafe-first-match", "unsafe-best-match")
            else "first-index"
        ),
        where=(
            f"the indexes of {folder / 'pyproject.toml'} ([tool.uv])"
            if configured
            else BuildSources.where
        ),
    )


def _indexes(uv: dict[str, Any], folder: Path) -> tuple[str | None, list[str], list[str]]:
    index: str | None = None
    extras: list[str] = []
    links: list[str] = []
    for t in uv.get("index") or ():
        if (
            not isinstance(t, dict)
            or not isinstance(t.get("url"), str)
            or t.get("explicit") is True
        ):
            continue
        url = _located(t["url"], folder)
        if t.get("format") == "flat":
            links.append(url)
        elif t.get("default") is True:
            index = url
        else:
            extras.append(url)
    return index, extras, links


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _located(url: str, folder: Path) -> str:
    """A URL as the installer reads it: a relative path (``./wheels``) is the project folder's."""
    if urlsplit(url).scheme in ("http", "https", "file"):
        return url
    return str((folder / Path(url).expanduser()).resolve())


def _constraint_lines(path: Path) -> list[str]:
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--build-constraints {path}: cannot be read ({exc})") from exc
    return [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]


def constraints_file(lines: Sequence[str]) -> Path:
    """The build constraints as one file named by its content, in envbuild's cache (written
    once)."""
    from envbuild._io import atomic_write_text
    from envbuild.index.metacache import cache_dir

    text = "".join(f"{ln}\n" for ln in lines)
    path = (
        cache_dir() / "build-constraints" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"
    )
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    return path


def step_env(sources: BuildSources) -> dict[str, str]:
    """The installer environment of a step with isolated builds: uv's index strategy, the
    project's (``[tool.uv] index-strategy``) else uv's default ``first-index`` (the indexes in
    order, each package from the first that has it: what uv sync reads, and no more), and its
    build constraints, for uv and pip alike (each reads its own variable)."""
    from envbuild.plan import INDEX_STRATEGY

    out = {INDEX_STRATEGY: sources.index_strategy}
    if sources.constraints:
        path = str(constraints_file(sources.constraints))
        out.update({"UV_BUILD_CONSTRAINT": path, "PIP_BUILD_CONSTRAINT": path})
    return out
