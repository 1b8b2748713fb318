"""A project's lockfile, read once per command: the bounded read, its format, the project beside
it, and the parse, into one typed value (``ProjectLock``) that every later step is handed.

``check-lock FILE`` reads it here and judges it (``gate.check``); ``provision --lock`` and the
other ``--lock`` front ends read it here too (``selection.read_project_lock``, with their
own refusals of the formats they do not install) and pass the value down, so the lock and its
``pyproject.toml`` are each opened once by the envbuild process.
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from envbuild.errors import ConfigError
from envbuild.gate.findings import Finding
from envbuild.gate.formats import detect, parse
from envbuild.gate.model import Format, LockParseError, ParsedLock
from envbuild.gate.project import Project

__all__ = [
    "MAX_BYTES",
    "MAX_PACKAGES",
    "LockText",
    "ProjectLock",
    "gate_read",
    "parse_lock_text",
    "read_lock_text",
    "read_lockfile",
]

MAX_BYTES = 64 << 20  # the largest real uv.lock files are a few MB
MAX_PACKAGES = 20_000  # the largest real locks hold a few thousand


def read_lockfile(path: Path) -> str:
    """The text of a lockfile: a regular file, at most ``MAX_BYTES``, UTF-8 (else ConfigError, exit
    2)."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such lockfile") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file; a lockfile is read from a file")
    if st.st_size > MAX_BYTES:
        raise ConfigError(
            f"{path}: {st.st_size / (1 << 20):.0f} MiB; a lockfile is read up to "
            f"{MAX_BYTES >> 20} MiB (the largest real locks are a few MB)"
        )
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); lockfiles are UTF-8"
        ) from exc


@dataclass(frozen=True)
class LockText:
    """A lockfile as read, before it is parsed: its text, its format and the project beside it."""

    path: Path
    text: str
    format: Format
    project: Project

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def read_lock_text(path: Path, fmt: Format | None = None) -> LockText:
    """The lockfile at ``path`` (``read_lockfile``) and its format (``fmt``, else ``detect``'s
    ConfigError when it cannot be told)."""
    text = read_lockfile(path)
    return LockText(path, text, fmt or detect(path, text), Project(path.parent))


@dataclass(frozen=True)
class ProjectLock:
    """A project's lock read and parsed once: its path, the sha256 of its text, its format, the
    typed reader's ``ParsedLock`` and the project beside it (its pyproject read once, when a
    setting of it is first asked)."""

    source: LockText
    parsed: ParsedLock

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def sha256(self) -> str:
        return self.source.sha256

    @property
    def format(self) -> Format:
        return self.source.format

    @property
    def project(self) -> Project:
        return self.source.project


def parse_lock_text(text: LockText) -> ProjectLock:
    """``text`` parsed by its format's reader; ``LockParseError`` with the reason when it is not
    one."""
    return ProjectLock(text, parse(text.path, text.text, text.format, text.project))


def gate_read(text: LockText, file: str) -> tuple[ProjectLock | None, list[Finding]]:
    """What the gate reads of ``text`` (shown as ``file``): the parsed lock, or None where it is
    broken (more ``[[package]]`` tables or entries than any real lock holds, not readable as its
    format: one ``broken-lock`` finding, not a crash); and the findings of the read (``broken-lock``
    ones, a ``broken-line`` per line its reader could not take)."""
    # [[package]] / [[packages]], counted unread
    tables = text.text.count("\n[[package") + text.text.startswith("[[package")
    if tables > MAX_PACKAGES:
        why = (
            f"{tables} packages: more than any real lock holds (the gate reads up to"
            f" {MAX_PACKAGES})"
        )
        return None, [Finding(file, "-", "broken-lock", why)]
    try:
        lock = parse_lock_text(text)
    except LockParseError as exc:
        why = f"not a readable {text.format} file: {exc}"
        return None, [Finding(file, "-", "broken-lock", why)]
    entries = lock.parsed.entries
    if len(entries) > MAX_PACKAGES:
        why = (
            f"{len(entries)} packages: more than any real lock holds (the gate reads up to"
            f" {MAX_PACKAGES})"
        )
        return None, [Finding(file, "-", "broken-lock", why)]
    return lock, [
        Finding(
            file,
            "-",
            "broken-line",
            f"`{bad.text}` is not a line pip reads ({bad.why}); the rest of the file is judged",
            line=bad.line,
        )
        for bad in lock.parsed.unread
    ]
