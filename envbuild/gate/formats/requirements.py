"""Requirement files: pip-compile, ``uv pip compile`` (``--universal`` writes markers), ``pip
freeze``, and any file ``pip install -r`` reads.

Read as pip reads them, line by line (``spec.stepfile.logical_lines``: continuations, comments):

- a requirement (``name[extras] ==1.0 ; marker``, ``name @ URL``), with its per-requirement
  options (``--hash``; ``--config-settings`` and the like are kept out of it);
- a bare URL or path, as pip takes it (``git+https://host/org/repo.git@ref``,
  ``https://host/pkg-1.0-py3-none-any.whl``, ``./pkg``), and the same after ``-e`` /
  ``--editable``: its name from an ``#egg=`` fragment or its file name, else from its last path
  segment (pip would build it to learn the name; the entry says so in its label);
- options: ``-i``/``--index-url`` (replaces the package index, PyPI by default) and
  ``--extra-index-url`` (the lock's indexes: metadata is read from each, the package index
  included), and the options that install nothing (``--find-links``, ``--pre``, ``-c``, ...);
  ``-r FILE`` includes another file, which is not followed (a note says so: check it on its own);
- ``${VAR}`` is left as written (pip expands it from the environment the gate does not share);
- the header its locker writes says the Pythons it was resolved for: pip-compile's "with Python
  3.11" (that one), ``uv pip compile --python-version 3.10`` (that one; ``--universal``: from it
  on); the lock's range, as a ``requires-python``.

A line that is none of these (a typo, an unknown option) is one ``UnreadLine``, which the check
reports as a ``broken-line`` finding naming it, and the rest of the file is judged.

Each requirement applies where its marker holds; the ``# via`` annotations name the packages that
pulled a line in. Libraries for this were tried and not taken: pip-requirements-parser (its last
release is from 2022; it vendors pip 22's parser, keeps comments apart from the requirement they
annotate, so the ``# via`` annotations this gate relies on would be lost) and requirements-parser
0.13 (it drops a ``--hash`` on a continuation line, the URL of ``name @ URL``, relative paths and
index options, gives no line numbers, and stops at the first line it cannot read).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from envbuild.gate.formats._common import exact
from envbuild.gate.model import Entry, ParsedLock, UnreadLine
from envbuild.index import PYPI
from envbuild.spec.stepfile import logical_lines

if TYPE_CHECKING:
    from packaging.requirements import Requirement

__all__ = ["parse"]

_HASH = re.compile(r"^--hash[= ](sha256):([0-9a-fA-F]{64})$")
# options pip reads on a line of their own: (its names, whether it takes a value)
_OPTIONS: dict[str, bool] = {
    **dict.fromkeys(("-i", "--index-url", "--extra-index-url", "-f", "--find-links"), True),
    **dict.fromkeys(("-r", "--requirement", "-c", "--constraint", "-e", "--editable"), True),
    **dict.fromkeys(("--trusted-host", "--only-binary", "--no-binary", "--use-feature"), True),
    **dict.fromkeys(("--no-index", "--pre", "--prefer-binary", "--require-hashes"), False),
}
# options pip takes after a requirement on its line
_PER_REQUIREMENT = ("--hash", "--config-settings", "--global-option", "--install-option")
_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|(?:git|hg|svn|bzr)\+|file:)", re.I)
_ARCHIVE = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz")


def _via(comments: list[str]) -> tuple[str, ...] | None:
    """pip-compile's ``# via a, b`` or ``# via`` followed by ``#   a`` lines."""
    names: list[str] = []
    found = False
    for c in comments:
        if c.startswith("via"):
            found = True
            rest = c[3:].strip()
            # "-r requirements.in", "--override x.txt": not packages
            if rest and not rest.startswith("-"):
                names += [x for x in re.split(r"[,\s]+", rest) if x]
        elif found and c and not c.startswith("-"):
            names.append(c.split()[0])
    if not found:
        return None
    return tuple(
        canonicalize_name(n) for n in names if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", n)
    )


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[Entry] = []
        self.main: str | None = None  # -i: the package index pip uses in place of PyPI
        self.extra: list[str] = []
        self.markers: list[str] = []
        self.unread: list[UnreadLine] = []
        self.included: list[str] = []

    def line(self, lineno: int, line: str, comments: list[str]) -> None:
        tokens = line.split()
        head = tokens[0]
        if head.startswith("-") and not head.startswith(_PER_REQUIREMENT):
            name, _, value = head.partition("=")
            if name not in _OPTIONS:
                self.unread.append(UnreadLine(lineno, line, f"pip has no option {name}"))
                return
            if _OPTIONS[name] and not value:
                value = tokens[1] if len(tokens) > 1 else ""
                if not value:
                    self.unread.append(UnreadLine(lineno, line, f"{name} takes a value"))
                    return
                tokens = tokens[1:]
            self._option(lineno, name, value, tokens[1:], comments)
            return
        self._requirement(lineno, " ".join(tokens), comments)

    def _option(
        self, lineno: int, name: str, value: str, rest: list[str], comments: list[str]
    ) -> None:
        if name in ("-i", "--index-url"):
            self.main = value
        elif name == "--extra-index-url":
            self.extra.append(value)
        elif name in ("-r", "--requirement"):
            self.included.append(value)
        elif name in ("-e", "--editable"):
            self._requirement(lineno, " ".join([value, *rest]), comments, editable=True)

    def _requirement(
        self, lineno: int, text: str, comments: list[str], *, editable: bool = False
    ) -> None:
        from packaging.requirements import InvalidRequirement, Requirement

        words = text.split()
        req_words = [w for w in words if not w.startswith("--")]
        raw = " ".join(req_words)
        hashes = tuple(m.group(2).lower() for w in words if (m := _HASH.match(w)))
        if not raw:
            self.unread.append(UnreadLine(lineno, text, "no requirement before its options"))
            return
        if editable or _is_location(req_words[0]):
            self._location(lineno, raw, comments, hashes)
            return
        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            why = str(exc).splitlines()[0] if str(exc) else "not a requirement"
            self.unread.append(UnreadLine(lineno, text, why))
            return
        version = exact(str(req.specifier)) if not req.url else _url_version(req.url, req.name)
        self._add(req, raw, lineno, hashes, version, comments)

    def _location(
        self, lineno: int, raw: str, comments: list[str], hashes: tuple[str, ...]
    ) -> None:
        """A bare URL or path (``git+https://...@ref``, a wheel's URL, ``./pkg``), as pip takes it:
        ``URL ; marker`` (a space before the ``;``)."""
        from packaging.markers import InvalidMarker, Marker

        location, _, marker_text = raw.partition(" ;")
        location = location.strip()
        marker = None
        if marker_text.strip():
            try:
                marker = str(Marker(marker_text.strip()))
            except InvalidMarker as exc:
                self.unread.append(UnreadLine(lineno, raw, f"marker: {exc}"))
                return
            self.markers.append(marker)
        name, version = _name_of_location(location)
        if name in ("", "-"):  # `-e .`: the folder, relative to the file
            name = canonicalize_name((self.path.parent / location).resolve().name or "project")
        self.entries.append(
            Entry(
                key=len(self.entries),
                name=name,
                version=version,
                raw=raw,
                line=lineno,
                hashes=hashes,
                url=location,
                via=_via(comments),
                marker=marker,
                files=((location, hashes[0] if hashes else None),),
            )
        )

    def _add(
        self,
        req: Requirement,
        raw: str,
        lineno: int,
        hashes: tuple[str, ...],
        version: str | None,
        comments: list[str],
    ) -> None:
        marker = str(req.marker) if req.marker is not None else None
        if marker:
            self.markers.append(marker)
        self.entries.append(
            Entry(
                key=len(self.entries),
                name=canonicalize_name(req.name),
                version=version,
                raw=raw,
                line=lineno,
                hashes=hashes,
                url=req.url,
                via=_via(comments),
                marker=marker,
                files=((req.url, hashes[0] if hashes else None),) if req.url else (),
            )
        )

    def lock(self) -> ParsedLock:
        # pip reads PyPI unless -i names another package index; --extra-index-url adds to it
        indexes = [self.main or PYPI, *self.extra] if self.main or self.extra else []
        lock = ParsedLock(
            self.path,
            "requirements",
            self.entries,
            list(dict.fromkeys(indexes)),
            marker_texts=self.markers,
            unread=self.unread,
        )
        if self.included:
            lock.notes.append(
                f"-r {', '.join(self.included)}: an included file is not read here; check it on"
                " its own"
            )
        return lock


def parse(path: Path, text: str) -> ParsedLock:
    reader = _Reader(path)
    for lineno, line, comments in logical_lines(text):
        reader.line(lineno, line, comments)
    lock = reader.lock()
    lock.requires_python = _header_python(text[:2000])
    return lock


_PIP_COMPILE = re.compile(
    r"^#\s*This file is autogenerated by pip-compile with Python (3\.\d+)", re.M
)
_UV_COMPILE = re.compile(r"^#\s+uv pip compile (.*)$", re.M)
_UV_PYTHON = re.compile(r"(?:^|\s)(?:--python-version|-p)(?:=|\s+)(3\.\d+)(?:\s|$)")


def _header_python(head: str) -> str | None:
    """The Pythons the file was resolved for, as its locker's header says: pip-compile's "with
    Python 3.11" (that one: it resolves for the Python it runs on), ``uv pip compile``'s
    ``--python-version 3.10`` (that one; with ``--universal``, it and every later one); else
    None (the markers, then the policy's Python, decide)."""
    m = _PIP_COMPILE.search(head)
    if m:
        return f"=={m.group(1)}.*"
    m = _UV_COMPILE.search(head)
    version = _UV_PYTHON.search(m.group(1)) if m else None
    if m and version:
        universal = "--universal" in m.group(1).split()
        return f">={version.group(1)}" if universal else f"=={version.group(1)}.*"
    return None


def _is_location(word: str) -> bool:
    """A URL or a path pip installs from, rather than a requirement (pip's own test: a URL scheme,
    a path separator, or an archive's file name)."""
    if _URL.match(word):
        return True
    if "@" in word or "==" in word:
        return False
    return word.startswith((".", "/", "~")) or "/" in word or word.lower().endswith(_ARCHIVE)


def _name_of_location(location: str) -> tuple[str, str | None]:
    """(name, version) of a bare URL or path: its ``#egg=`` name, else its wheel's or sdist's file
    name, else its last path segment (a repository or folder: pip builds it to learn its name)."""
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    egg = re.search(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)", location)
    if egg:
        return canonicalize_name(egg.group(1)), None
    base = location.split("#", 1)[0].split("?", 1)[0].rstrip("/")
    filename = _unquote(base.rsplit("/", 1)[-1])
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
            return name, str(version)
        if filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
            return name, str(version)
    except (InvalidWheelFilename, InvalidSdistFilename):
        pass
    segment = re.sub(r"\.git$", "", filename.split("@", 1)[0]) or "."
    return canonicalize_name(segment), None


def _url_version(url: str, name: str) -> str | None:
    """The version in a direct wheel URL's file name (``flash_attn-2.8.3+cu12torch2.10…-….whl``)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    filename = url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1]
    if not filename.endswith(".whl"):
        return None
    try:
        parsed = parse_wheel_filename(_unquote(filename))
    except InvalidWheelFilename:
        return None
    return str(parsed[1]) if parsed[0] == canonicalize_name(name) else None


def _unquote(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text)
