"""The last preparation of the same lock, reused: a re-run of ``provision --lock`` on a finished
root skips ``uv export`` and the gate when nothing they read has changed.

Choosing, gating and staging a lock (``projectlock.run.prepare_lock``) is most of a no-op
provision's time: ``uv export`` and the gate's reading of every entry (0.5-1.5 s on the public
locks), where the rest of a no-op is a scan of the venv and a cached import verdict. Its answer
depends only on what it read, so it is kept, after each run that prepared it, in
``<root>/cache/envbuild/prepared-lock.pickle`` with:

- **the inputs it read**: every file the envbuild process opened while preparing (the lock, each
  ``pyproject.toml`` and ``.python-version``, the accept file, the RECORD and hash caches: Python's
  ``open`` audit event), the files ``uv export`` reads as uv's own cache keys do (each local
  source's ``pyproject.toml``, ``setup.py`` and ``setup.cfg``, present or absent; the project's and
  the user's ``uv.toml``), each local file the lock installs (a path wheel, whose sha256 may have
  come from a cache keyed by its size and time), and each program it ran (``uv``): each by sha256
  (by size and mtime above ``HASH_LIMIT``), an absent one as absent;
- **the question**: the request, ``--python``, the working folder, the ``UV_``/``PIP_``/
  ``ENVBUILD_`` variables and ``PATH``, envbuild's version and its source files' times;
- **what it said**: the events it emitted (the unhashed-files warning, ...), said again on reuse.

A run whose question and inputs all match takes the kept ``Prepared`` and says so in one line;
any difference (a re-lock, an edited ``pyproject.toml``, another uv, a flag), or a file that cannot
be read back, prepares afresh as before. Nothing else is skipped: the venv is still scanned, the
guard and the import verdict still judge it, and the receipt still records the run. It is not used
with ``--venv`` (the adopted venv's torch is read each run) or ``--rebuild-mismatched`` (asks an
index), and ``ENVBUILD_REUSE_PREPARED=0`` turns it off. The file is the data root owner's, written
0600, and read only when owned by the user running envbuild.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from envbuild import __version__, events
from envbuild._io import atomic_write_bytes, sha256_bytes, sha256_file
from envbuild.gate.formats.uvlock import sources_of
from envbuild.projectlock.request import LockRequest, Prepared

__all__ = ["Reuse", "reuse_for"]

FILE_NAME = "prepared-lock.pickle"
FORMAT = 1
HASH_LIMIT = 8 << 20  # bigger files are known by size and mtime
ENV_PREFIXES = ("UV_", "PIP_", "ENVBUILD_")
ENV_NAMES = ("PATH", "VIRTUAL_ENV", "XDG_CONFIG_HOME", "HOME", "SSL_CERT_FILE", "SSL_CERT_DIR")
# what uv reads beside a local source to know it changed (its default ``cache-keys``)
SOURCE_KEYS = ("pyproject.toml", "setup.py", "setup.cfg")
_SKIP_SUFFIXES = (".py", ".pyc", ".so", ".zip")
_SKIP_PREFIXES = ("/dev/", "/proc/", "/sys/")


def _identity(path: Path) -> str:
    """What ``path`` holds: its sha256, ``size:mtime_ns`` above HASH_LIMIT, or ``absent``."""
    try:
        st = path.stat()
        if not path.is_file():
            return f"not-a-file:{st.st_mode:o}"
        if st.st_size > HASH_LIMIT:
            return f"stat:{st.st_size}:{st.st_mtime_ns}"
        return sha256_file(path)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable:{exc.errno}"


def _code_times() -> int:
    """The newest mtime of envbuild's own source files (a checkout that moved on re-prepares)."""
    here = Path(__file__).resolve().parents[1]
    newest = 0
    for folder, _dirs, files in os.walk(here):
        for name in files:
            if name.endswith(".py"):
                with contextlib.suppress(OSError):
                    newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
    return newest


def _stable(value: object) -> object:
    """``value`` in a form whose JSON is the same in every process (sets sorted: a set's order moves
    with each process's hash seed)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _stable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (set, frozenset)):
        return sorted((_stable(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _stable(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _question(req: LockRequest) -> str:
    env = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES) or k in ENV_NAMES
    )
    parts = [
        f"format {FORMAT}",
        f"envbuild {__version__} {_code_times()}",
        f"python {sys.version}",
        f"request {json.dumps(_stable(req), sort_keys=True)}",  # --python and --venv too
        f"cwd {os.getcwd()}",
        f"env {env!r}",
    ]
    return sha256_bytes("\n".join(parts).encode())


class _Reads:
    """The files opened for reading and the programs run while recording (an audit hook: one per
    process, idle outside ``recording``)."""

    active: list[_Reads] = []
    installed = False

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.programs: set[str] = set()

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if not cls.active:
            return
        if event == "open":
            path, mode = args[0], args[1]
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if not isinstance(path, str) or (isinstance(mode, str) and set(mode) & set("wax+")):
                return
            cls.active[-1].files.add(os.path.abspath(path))
        elif event == "subprocess.Popen":
            exe = args[0]
            if isinstance(exe, (str, bytes, os.PathLike)):
                exe = os.fsdecode(exe)
                found = shutil.which(exe) if os.sep not in exe else exe
                cls.active[-1].programs.add(os.path.abspath(found or exe))


def _wanted(path: str) -> bool:
    if path.startswith(_SKIP_PREFIXES) or path.endswith(_SKIP_SUFFIXES):
        return False
    # the interpreter's own files (the stdlib, envbuild's venv and its dist-infos)
    return not any(path.startswith(p + os.sep) for p in {sys.prefix, sys.base_prefix})


def _lock_inputs(prepared: Prepared) -> set[str]:
    """The files the answer depends on that the envbuild process may not have opened: what ``uv
    export`` reads (each local source's cache keys, the project's and the user's ``uv.toml``), and
    each local file the lock installs (a path wheel: its sha256 may have come from a cache)."""
    lock_dir = prepared.chosen.path.parent.resolve()
    folders = {lock_dir}
    for source in sources_of(prepared.chosen.lock).values():
        where = source.get("editable") or source.get("directory") or source.get("virtual")
        if isinstance(where, str):
            folders.add((lock_dir / where).resolve())
    out = {str(f / name) for f in folders for name in SOURCE_KEYS}
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    out |= {str(lock_dir / "uv.toml"), str(config / "uv" / "uv.toml"), "/etc/uv/uv.toml"}
    out.add(str(lock_dir / ".python-version"))
    for placed in prepared.plan.placed:
        url = placed.artifact.url if placed.artifact is not None else ""
        if url.startswith("file:"):
            out.add(unquote(urlsplit(url).path))  # url2pathname on POSIX, without urllib.request
    return out


@dataclasses.dataclass
class Reuse:
    """The kept preparation of one data root (``reuse_for``)."""

    path: Path
    question: str
    said: list[events.Event] = dataclasses.field(default_factory=list)

    def load(self) -> Prepared | None:
        """The kept ``Prepared`` when its question and every input match (said once), else None."""
        try:
            st = self.path.stat()
            if st.st_uid != os.getuid():
                return None
            kept = pickle.loads(self.path.read_bytes())
        except Exception:  # noqa: BLE001 (absent, torn or from another envbuild: prepare afresh)
            return None
        if not isinstance(kept, dict) or kept.get("question") != self.question:
            return None
        inputs = kept.get("inputs")
        prepared = kept.get("prepared")
        if not isinstance(inputs, dict) or not isinstance(prepared, Prepared):
            return None
        if any(_identity(Path(p)) != got for p, got in inputs.items()):
            return None
        for event in kept.get("said", ()):
            events.emit(event.level, event.message, **event.data)
        events.emit(
            "info",
            f"{prepared.chosen.path.name}: the stages of the last run reused (nothing it read has"
            f" changed: {len(inputs)} file(s) checked)",
        )
        return prepared

    @contextlib.contextmanager
    def recording(self) -> Iterator[_Reads]:
        """Record what the preparation inside reads and says."""
        if not _Reads.installed:
            sys.addaudithook(_Reads.hook)
            _Reads.installed = True
        reads = _Reads()
        self.said = []
        previous = events.set_sink(None)

        def tee(event: events.Event) -> None:
            self.said.append(event)
            previous(event)

        events.set_sink(tee)
        _Reads.active.append(reads)
        try:
            yield reads
        finally:
            _Reads.active.remove(reads)
            events.set_sink(previous)

    def keep(self, prepared: Prepared, reads: _Reads) -> None:
        """Keep ``prepared`` with the identities of what it read, taken now: after the run it served
        finished (the caches it read, filled by that run, as the next run finds them)."""
        files = {p for p in reads.files if _wanted(p)} | _lock_inputs(prepared) | reads.programs
        if str(self.path) in files:
            files.discard(str(self.path))
        data = {
            "question": self.question,
            "inputs": {p: _identity(Path(p)) for p in sorted(files)},
            "said": [e for e in self.said if e.level in ("warn", "info", "ok")],
            "prepared": prepared,
        }
        try:
            blob = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
            atomic_write_bytes(self.path, blob, private=True)
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            with contextlib.suppress(OSError):
                self.path.unlink()


def reuse_for(root: Path, req: LockRequest) -> Reuse | None:
    """The kept preparation of ``root`` for this request, or None where it is not used (see the
    module docstring)."""
    if req.venv is not None or req.rebuild_mismatched:
        return None
    if os.environ.get("ENVBUILD_REUSE_PREPARED", "1") == "0":
        return None
    return Reuse(root / "cache" / "envbuild" / FILE_NAME, _question(req))
