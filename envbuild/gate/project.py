"""The project's ``pyproject.toml`` beside a lock: one reader, one error rule.

Every reader of the project's settings (the gate's exceptions table, uv's default groups, the
extras and groups a selection may name, the build settings and indexes of ``provision --lock``)
goes through ``read_pyproject``: no file is an empty table; a file that cannot be read or is not
valid TOML is the user's error to fix (``ConfigError``, exit 2), never silently an empty table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.errors import ConfigError

__all__ = ["read_pyproject", "table"]

_MAX_BYTES = 4 << 20  # a pyproject.toml is kilobytes; a bigger one is not a project's


def read_pyproject(folder: Path) -> dict[str, Any]:
    """The parsed ``folder/pyproject.toml``; {} when there is none. ConfigError (exit 2) naming
    the file and what is wrong when it cannot be read or is not valid TOML."""
    from envbuild.gate.formats._common import toml_loads
    from envbuild.gate.model import LockParseError

    path = folder / "pyproject.toml"
    if not path.is_file():
        return {}
    hint = "Fix the project's pyproject.toml (uv reads it too: `uv lock --check` says what it finds)."
    try:
        size = path.stat().st_size
        if size > _MAX_BYTES:
            raise ConfigError(f"{path}: {size} bytes; a project's pyproject.toml is at most 4 MiB", hint=hint)
        return toml_loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: the project's pyproject.toml cannot be read ({exc})", hint=hint) from exc
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
