"""One module per lockfile format; ``detect`` tells them apart, ``parse`` reads one.

- ``uvlock``        uv.lock (forks, conflicting extras/groups, edges that name an entry)
- ``pylock``        PEP 751 pylock.toml (``pip lock``, ``uv export``, ``uv pip compile -o
  pylock.toml``)
- ``requirements``  pip-compile / ``uv pip compile`` (``--universal``) / pip freeze output
- ``poetry``        poetry.lock
- ``pixi``          pixi.lock (conda-forge and PyPI packages, every environment x platform)

A new format is one module with ``parse(path, text) -> Lock`` and a line in ``detect``.
"""

from __future__ import annotations

import re
from pathlib import Path

from envbuild.errors import ConfigError
from envbuild.gate.model import FORMATS, Format, ParsedLock
from envbuild.gate.project import Project

__all__ = ["detect", "parse"]


def detect(path: Path, text: str) -> Format:
    name = path.name.lower()
    if name == "uv.lock":
        return "uv.lock"
    if name == "poetry.lock":
        return "poetry.lock"
    if name == "pixi.lock":
        return "pixi.lock"
    if re.fullmatch(r"pylock(\.[^.]+)?\.toml", name):
        return "pylock"
    if name.endswith((".txt", ".in")) or "requirements" in name:
        return "requirements"
    head = text[:4000]
    if re.search(r"^lock-version\s*=", head, re.M) and "[[packages]]" in text:
        return "pylock"
    if (
        re.search(r"^version\s*=\s*1\s*$", head, re.M)
        and re.search(r"^requires-python\s*=", head, re.M)
        and "[[package]]" in text
    ):
        return "uv.lock"
    if "[metadata]" in text and "content-hash" in text and "[[package]]" in text:
        return "poetry.lock"
    if re.match(r"version: \d+\s*$", head, re.M) and re.search(r"^environments:\s*$", head, re.M):
        return "pixi.lock"
    if re.search(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*(==|@|>=|~=)", text, re.M):
        return "requirements"
    raise ConfigError(
        f"{path}: cannot tell which kind of lockfile this is",
        hint=f"Name it with --format ({', '.join(FORMATS)}).",
    )


def parse(path: Path, text: str, fmt: Format, project: Project | None = None) -> ParsedLock:
    """Read a lock of ``fmt``; raises ``LockParseError`` with the reason when it is not one.
    ``project``: the project beside it, as the caller read it (uv.lock: its default groups)."""
    if fmt == "requirements":
        from envbuild.gate.formats import requirements

        return requirements.parse(path, text)
    if fmt == "uv.lock":
        from envbuild.gate.formats import uvlock

        return uvlock.parse(path, text, project)
    if fmt == "poetry.lock":
        from envbuild.gate.formats import poetry

        return poetry.parse(path, text)
    if fmt == "pixi.lock":
        from envbuild.gate.formats import pixi

        return pixi.parse(path, text)
    from envbuild.gate.formats import pylock

    return pylock.parse(path, text)
