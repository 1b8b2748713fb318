"""The project's ``pyproject.toml`` beside a lock: one reader, one error rule, read once.

Every reader of the project's settings (the gate's exceptions table, uv's default groups, the
extras and groups a selection may name, the build settings and indexes of ``provision --lock``)
reads them from one ``Project``: the file is read and parsed the first time a setting is asked
(``read_pyproject``) and kept in that value, which travels with the lock (``gate.lockfile``), so a
command reads it once. No file is an empty table; a file that cannot be read or is not valid TOML
is the user's error to fix (``ConfigError``, exit 2), never silently an empty table.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError

__all__ = ["Project", "parse_pyproject", "project_of", "read_pyproject", "table"]

_MAX_BYTES = 4 << 20  # a pyproject.toml is kilobytes; a bigger one is not a project's


def parse_pyproject(text: str) -> dict[str, Any]:
    """A ``pyproject.toml``'s text parsed (one read elsewhere: an sdist's); ``LockParseError``
    where it is not valid TOML."""
    from envbuild.gate.formats._common import toml_loads

    return toml_loads(text)


def read_pyproject(folder: Path) -> dict[str, Any]:
    """The parsed ``folder/pyproject.toml``; {} when there is none. ConfigError (exit 2) naming
    the file and what is wrong when it cannot be read or is not valid TOML."""
    from envbuild.gate.model import LockParseError

    path = folder / "pyproject.toml"
    if not path.is_file():
        return {}
    hint = (
        "Fix the project's pyproject.toml (uv reads it too: `uv lock --check` says what it finds)."
    )
    try:
        size = path.stat().st_size
        if size > _MAX_BYTES:
            raise ConfigError(
                f"{path}: {size} bytes; a project's pyproject.toml is at most 4 MiB", hint=hint
            )
        return parse_pyproject(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: the project's pyproject.toml cannot be read ({exc})", hint=hint
        ) from exc
    except LockParseError as exc:
        raise ConfigError(f"{path}: the project's pyproject.toml is {exc}", hint=hint) from exc


def table(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``data[k1][k2]...`` where each is a table; {} where one is missing or not a table."""
    for key in keys:
        got = data.get(key)
        if not isinstance(got, dict):
            return {}
        data = got
    return data


class Project:
    """The project in ``folder``: its ``pyproject.toml`` parsed the first time a setting is asked,
    then kept (a file that is not there is an empty project)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __repr__(self) -> str:
        return f"Project({str(self.folder)!r})"

    @cached_property
    def data(self) -> dict[str, Any]:
        """The parsed file ({} where there is none); ConfigError as ``read_pyproject`` says."""
        return read_pyproject(self.folder)

    @property
    def path(self) -> Path:
        return self.folder / "pyproject.toml"

    def exists(self) -> bool:
        return self.path.is_file()

    def table(self, *keys: str) -> dict[str, Any]:
        """``[k1.k2...]`` of the file ({} where one is missing or not a table)."""
        return table(self.data, *keys)

    @property
    def name(self) -> str | None:
        """``[project] name``, canonical (None: not named)."""
        name = self.table("project").get("name")
        return str(canonicalize_name(name)) if isinstance(name, str) else None

    @property
    def tool_uv(self) -> dict[str, Any]:
        return self.table("tool", "uv")


def project_of(where: Project | Path) -> Project:
    """``where`` itself, or the project beside the lock at the path ``where``."""
    return where if isinstance(where, Project) else Project(where.parent)
