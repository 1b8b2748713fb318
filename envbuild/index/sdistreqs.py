"""An sdist's build requirements: ``[build-system] requires`` of the ``pyproject.toml`` at its top,
read from the file itself, by the sha256 of the file (``$ENVBUILD_CACHE_DIR/build-requires/``).

An sdist is a gzipped tar (or a zip): its members cannot be read by HTTP ranges as a wheel's
``METADATA`` is (``index.remotezip``), so a remote one is downloaded by the one downloader
(``index.download``: retried, its sha256 checked) into a temporary file, read and dropped; a local
one (a path, ``file://``) is read where it is. An sdist without a ``pyproject.toml``, or one without
``[build-system] requires``, builds with PEP 517's default (``setuptools>=40.8.0``, ``wheel``).
"""

from __future__ import annotations

import contextlib
import json
import tarfile
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envbuild.index.metacache import cache_dir

__all__ = ["DEFAULT_REQUIRES", "build_requires", "cached_build_requires"]

DEFAULT_REQUIRES = ("setuptools>=40.8.0", "wheel")  # PEP 517's, for a project that names none
_MAX_PYPROJECT = 1 << 20  # a pyproject.toml larger than this is no pyproject an sdist ships


def cached_build_requires(sha256: str | None) -> tuple[str, ...] | None:
    """The build requirements read before from the sdist of ``sha256``, or None (never read)."""
    if not sha256:
        return None
    try:
        data = json.loads((cache_dir() / "build-requires" / f"{sha256}.json").read_text())
        return tuple(str(r) for r in data["requires"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build_requires(url: str, sha256: str | None, filename: str) -> tuple[str, ...]:
    """The build requirements of the sdist at ``url`` (``filename`` says tar or zip), its bytes
    checked against ``sha256``; cached by it. ``SourceError`` when it cannot be fetched,
    ``ValueError`` when it is no readable sdist."""
    cached = cached_build_requires(sha256)
    if cached is not None:
        return cached
    parts = urlsplit(url)
    if parts.scheme == "" or (parts.scheme == "file" and sha256 is None):
        got = _read(Path(unquote(parts.path)), filename)
    else:
        from envbuild.index.download import download

        with tempfile.TemporaryDirectory(prefix="envbuild-sdist-") as tmp:
            got = _read(download(url, Path(tmp) / "sdist", sha256), filename)
    if sha256:
        from envbuild._io import atomic_write_json

        with contextlib.suppress(OSError):  # a read-only cache only costs a download
            path = cache_dir() / "build-requires" / f"{sha256}.json"
            atomic_write_json(path, {"requires": list(got)}, durable=False)
    return got


def _read(path: Path, filename: str) -> tuple[str, ...]:
    text = _pyproject(path, filename)
    if text is None:
        return DEFAULT_REQUIRES
    from envbuild._io import parse_toml

    try:
        table = parse_toml(text).get("build-system")
    except (ValueError, RecursionError) as exc:  # tomllib's TOMLDecodeError is a ValueError
        raise ValueError(f"{filename}: its pyproject.toml does not parse ({exc})") from exc
    requires = table.get("requires") if isinstance(table, dict) else None
    if not isinstance(requires, list):
        return DEFAULT_REQUIRES
    return tuple(str(r) for r in requires)


def _pyproject(path: Path, filename: str) -> str | None:
    """The text of ``<top>/pyproject.toml`` in the sdist at ``path``, or None."""
    try:
        if filename.lower().endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    if _top_pyproject(info.filename) and info.file_size <= _MAX_PYPROJECT:
                        return zf.read(info).decode("utf-8")
            return None
        with tarfile.open(path, mode="r|*") as tf:  # streamed: stops at the member
            for member in tf:
                if _top_pyproject(member.name) and member.isfile():
                    f = tf.extractfile(member)
                    if f is None or member.size > _MAX_PYPROJECT:
                        return None
                    return f.read().decode("utf-8")
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"{filename}: not a readable sdist ({exc})") from exc
    return None


def _top_pyproject(name: str) -> bool:
    parts = name.strip("/").split("/")
    return len(parts) == 2 and parts[1] == "pyproject.toml"
