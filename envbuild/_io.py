"""Small file helpers shared by every module that reads or writes state: atomic writes, hashing,
and the one TOML parser (``parse_toml``; nothing else in the tree imports tomli or tomllib)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

# tomli, a dependency: its wheels are compiled with mypyc, 3x tomllib on a 2 MB uv.lock (0.5 s
# against 1.6 s), which is most of the gate's time; the same parser and errors as tomllib, which
# stands in where tomli is absent
try:
    import tomli as tomllib
except ImportError:  # pragma: no cover
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        raise

TOMLDecodeError = tomllib.TOMLDecodeError


def parse_toml(text: str) -> dict[str, Any]:
    """The TOML document ``text``; raises ``TOMLDecodeError`` (and ``RecursionError`` where it
    nests too deeply): each caller turns those into its own error."""
    data: dict[str, Any] = tomllib.loads(text)
    return data


def atomic_write_text(path: Path, text: str, *, private: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, then ``os.replace``).

    ``private``: mode 0600 from the start (a file that may hold secrets: credentials in URLs,
    ``[env]`` values), never readable by others even for a moment.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    if private:
        os.fchmod(fd, 0o600)  # an old temp file of the same name keeps its mode otherwise
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def json_text(data: Any) -> str:
    """The text ``atomic_write_json`` writes for ``data``."""
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


def atomic_write_json(path: Path, data: Any, *, private: bool = False) -> None:
    atomic_write_text(path, json_text(data), private=private)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
