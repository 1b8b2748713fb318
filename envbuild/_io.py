"""Small file helpers shared by every module that reads or writes state: atomic writes, hashing,
and the one TOML parser (``parse_toml``; nothing else in the tree imports tomli or tomllib) and
writer (``dumps_toml``, for pylock.toml files)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Mapping
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


def atomic_write_text(
    path: Path, text: str, *, private: bool = False, durable: bool = True
) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, then ``os.replace``).

    ``private``: mode 0600 from the start (a file that may hold secrets: credentials in URLs,
    ``[env]`` values), never readable by others even for a moment.
    ``durable``: synced to disk before it takes the name (a record of state). A cache entry that a
    reader checks and can rebuild (``index.records``, ``index.metacache``) passes False: a crash
    may lose it, never tear a state file, and a run does not wait on a hundred fsyncs for it.
    """
    atomic_write_bytes(path, text.encode("utf-8"), private=private, durable=durable)


def atomic_write_bytes(
    path: Path, data: bytes, *, private: bool = False, durable: bool = True
) -> None:
    """``atomic_write_text`` for bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    if private:
        os.fchmod(fd, 0o600)  # an old temp file of the same name keeps its mode otherwise
    deferred = _deferred
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        if durable and deferred is None:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable and deferred is not None:
        deferred.add(path)


# the durable writes made inside ``synced_at_end`` (None: outside, each is synced on its own)
_deferred: set[Path] | None = None


@contextlib.contextmanager
def synced_at_end() -> Iterator[None]:
    """Inside it, a durable write (``atomic_write_*``) takes its name at once, atomic as ever, and
    is synced to disk when the block ends (each file once, its last bytes), not on its own.

    ``provision`` installs inside it: its first fsync after the prepare waited for the
    filesystem's journal to take every file the prepare had unpacked (1.1 s of a docling run's
    critical path, for a 2 KB overlay file); at the end, the kernel's own commits have mostly done
    that. A process killed in between loses nothing (the page cache keeps what was written); a
    power cut may lose state written since the block began, as it may lose the installer's files,
    which no installer syncs."""
    global _deferred
    if _deferred is not None:  # nested: the outer block syncs
        yield
        return
    _deferred = set()
    try:
        yield
    finally:
        pending, _deferred = _deferred, None
        for path in sorted(pending):
            with contextlib.suppress(OSError):  # gone since (a moved folder): nothing to sync
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


def json_text(data: Any) -> str:
    """The text ``atomic_write_json`` writes for ``data``."""
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


def atomic_write_json(
    path: Path, data: Any, *, private: bool = False, durable: bool = True
) -> None:
    atomic_write_text(path, json_text(data), private=private, durable=durable)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# the one TOML writer (pylock.toml files: envbuild's export, a lock stage's install)
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else _str(k)


def _str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _inline(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_inline(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_inline(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def dumps_toml(data: Mapping[str, Any]) -> str:
    """A small TOML writer for pylock data: scalars and inline values, arrays of tables one level
    deep."""
    lines = [
        f"{_key(k)} = {_inline(v)}"
        for k, v in data.items()
        if not (isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v))
    ]
    for k, v in data.items():
        if isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            for item in v:
                lines.append("")
                lines.append(f"[[{_key(k)}]]")
                lines += [f"{_key(ik)} = {_inline(iv)}" for ik, iv in item.items()]
    return "\n".join(lines) + "\n"


def discard(folder: Path) -> None:
    """Delete ``folder`` off the caller's path: renamed aside at once (the name is free again), its
    tens of thousands of links removed by a thread of their own (not a daemon: the process waits
    for it before it exits). Never raises."""
    if not folder.exists():
        return
    aside = folder.with_name(f".discard-{folder.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        folder.rename(aside)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return
    # never a daemon, also when called from one (a thread inherits its creator's flag): the
    # interpreter waits for it at exit, and nothing is left on disk
    threading.Thread(target=_remove, args=(aside,), name="discard", daemon=False).start()


def _remove(folder: Path) -> None:
    """``discard``'s thread: at the lowest priority (Linux: a thread's own nice value), so the run's
    work beside it keeps the cores."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    shutil.rmtree(folder, ignore_errors=True)


def discard_leftovers(folder: Path) -> None:
    """What ``discard`` left in ``folder`` when a process was killed before its thread ended."""
    with contextlib.suppress(OSError):
        for left in folder.glob(".discard-*"):
            shutil.rmtree(left, ignore_errors=True)
