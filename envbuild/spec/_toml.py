"""Bounded TOML input with dotted-path errors and did-you-mean, shared by the stack spec
(``spec/stack.py``) and the wheelhouse specs (``wheelhouse/spec.py``).

``read_toml`` reads only a regular file of at most ``MAX_BYTES`` (a device such as ``/dev/zero``
or a FIFO is refused before a byte is read) and turns a missing, unreadable, oversized,
non-UTF-8 or invalid file into a ``ConfigError`` naming it; ``TomlReader`` gives typed getters
that name the dotted key path of a bad value (``step[3].no_deps``), reject unknown keys with a
``difflib`` suggestion (``did_you_mean``), expand ``${VAR}``, ``${VAR:-default}`` and
``${VAR-default}`` from the environment, and refuse a string that holds a control character or
line break after expansion (``quoting.unsafe_character``): every string of a spec can reach a
rendered file or a command line. The torch index has one name, ``ENVBUILD_TORCH_INDEX``;
``TORCH_INDEX`` is its alias (``ALIASES``): a spec that names either reads the other when only
that one is set.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild._io import TOMLDecodeError, parse_toml
from envbuild.errors import ConfigError
from envbuild.quoting import shown, unsafe_character

__all__ = [
    "ALIASES",
    "MAX_BYTES",
    "TomlReader",
    "did_you_mean",
    "read_bounded",
    "read_toml",
    "variables",
]

MAX_BYTES = 1 << 20  # a stack spec is a page; 1 MiB leaves room and bounds what a bad path can cost

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|-)(?P<default>[^}]*))?\}")
# one variable under two names: a spec naming either reads the other when only that one is set
ALIASES = {"ENVBUILD_TORCH_INDEX": "TORCH_INDEX", "TORCH_INDEX": "ENVBUILD_TORCH_INDEX"}


def variables(value: object) -> tuple[str, ...]:
    """The environment variables a raw (unexpanded) spec string names, in order."""
    if not isinstance(value, str):
        return ()
    return tuple(dict.fromkeys(m.group("name") for m in _VAR.finditer(value)))


def did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class TomlReader:
    """Typed getters over nested TOML data that report a dotted key path."""

    def __init__(self, path: Path, environ: Mapping[str, str]) -> None:
        self.path = path
        self.environ = environ

    def fail(self, key: str, message: str) -> ConfigError:
        key = shown(key)  # a key path may hold what the file holds: never raw control characters
        where = f"{self.path}: {key}: " if key else f"{self.path}: "
        return ConfigError(where + message)

    def check_keys(self, data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in data:
            if key not in allowed:
                path = f"{where}.{key}" if where else key
                raise self.fail(
                    path,
                    f"unknown key{did_you_mean(key, list(allowed))}; allowed here:"
                    f" {', '.join(allowed)}",
                )

    def expand(self, value: str, key: str) -> str:
        def sub(m: re.Match[str]) -> str:
            name, op, default = m.group("name"), m.group("op"), m.group("default")
            current = self.environ.get(name)
            if current is None and name in ALIASES:
                current = self.environ.get(ALIASES[name])
            if op == ":-" and not current:
                return default or ""
            if op == "-" and current is None:
                return default or ""
            if current is None:
                raise self.fail(
                    key,
                    f"environment variable {name} is not set (used as ${{{name}}}); "
                    f"set it, or write ${{{name}:-default}} to give a default",
                )
            return current

        expanded = _VAR.sub(sub, value)
        bad = unsafe_character(expanded)
        if bad is not None:
            came = (
                " (after expanding ${...} from the environment)"
                if expanded != value and unsafe_character(value) is None
                else ""
            )
            raise self.fail(
                key,
                f"holds {bad}{came}; envbuild refuses these in every string of a spec: "
                "a line break in a value written into a Dockerfile or a shell file ends the line "
                "and can start a command",
            )
        return expanded

    def str_(
        self, data: Mapping[str, Any], key: str, where: str, default: str | None = None
    ) -> str:
        value = data.get(key, default)
        path = f"{where}.{key}" if where else key
        if value is None:
            raise self.fail(path, "is required (a string)")
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {type(value).__name__} {value!r}")
        return self.expand(value, path)

    def opt_str(self, data: Mapping[str, Any], key: str, where: str) -> str | None:
        if key not in data:
            return None
        return self.str_(data, key, where)

    def bool_(self, data: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key}", f"must be true or false, got {value!r}")
        return value

    def num(
        self, data: Mapping[str, Any], key: str, where: str, default: float | None
    ) -> float | None:
        value = data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise self.fail(f"{where}.{key}", f"must be a non-negative number, got {value!r}")
        return float(value)

    def str_list(self, data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
        value = data.get(key, [])
        path = f"{where}.{key}"
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(path, f"must be a list of strings, got {value!r}")
        # list indexes count from 1, as step numbers do
        return tuple(self.expand(v, f"{path}[{i}]") for i, v in enumerate(value, 1))

    def str_map(self, data: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
        value = data.get(key, {})
        path = f"{where}.{key}" if where else key
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a table of strings, got {value!r}")
        out: dict[str, str] = {}
        for k, v in value.items():
            if (bad := unsafe_character(k)) is not None:
                raise self.fail(f"{path}.{k}", f"the key holds {bad}")
            if not isinstance(v, str):
                raise self.fail(f"{path}.{k}", f"must be a string, got {v!r}")
            out[k] = self.expand(v, f"{path}.{k}")
        return out

    def table(self, data: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"{where}.{key}" if where else key, f"must be a table, got {value!r}")
        return value


def read_bounded(path: Path, what: str, limit: int = MAX_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes; else a ``ConfigError``.

    The file is opened without blocking (a FIFO would wait for a writer) and checked with
    ``fstat`` on the open descriptor, so what is read is what was checked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: {what} not found") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            mode = info.st_mode
            kind = (
                "a folder"
                if stat.S_ISDIR(mode)
                else (
                    "a character device"
                    if stat.S_ISCHR(mode)
                    else (
                        "a block device"
                        if stat.S_ISBLK(mode)
                        else (
                            "a FIFO"
                            if stat.S_ISFIFO(mode)
                            else "a socket"
                            if stat.S_ISSOCK(mode)
                            else "not a regular file"
                        )
                    )
                )
            )
            raise ConfigError(f"{path}: the {what} must be a regular file; this is {kind}")
        raw = b"" if info.st_size > limit else _read(fd, path, what, limit + 1)
    finally:
        os.close(fd)
    if info.st_size > limit or len(raw) > limit:
        raise ConfigError(
            f"{path}: the {what} is {_size(max(info.st_size, len(raw)))}; envbuild reads at most "
            f"{_size(limit)} of it (a spec is a page of TOML)"
        )
    return raw


def _read(fd: int, path: Path, what: str, n: int) -> bytes:
    chunks: list[bytes] = []
    try:
        while n > 0 and (chunk := os.read(fd, min(n, 1 << 16))):
            chunks.append(chunk)
            n -= len(chunk)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror}") from exc
    return b"".join(chunks)


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)" if n >= 1 << 20 else f"{n} bytes"


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """Parse a TOML file; a missing, unreadable, oversized or invalid file is a ``ConfigError``
    naming it."""
    raw = read_bounded(path, what)
    try:
        data: dict[str, Any] = parse_toml(raw.decode("utf-8"))
    except (TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(
            f"{path}: not valid TOML for envbuild: arrays or tables nested too deeply"
        ) from exc
    return data
