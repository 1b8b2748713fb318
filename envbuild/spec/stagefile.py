"""A stage file of ``provision --lock``: the notes its lines carry and how an installer reads them.

A stage of ``provision --lock`` names each file by its exact URL (``name @ URL --hash=...``); a
file that comes from a package index carries the note ``# index: URL`` (``# index`` where the lock
names no index URL). uv installs such a file as uv sync does only when it is told it is an index
file: from a ``pylock.toml`` (``wheels``/``sdist`` of a package), never from a direct reference,
which it records as a URL install (``direct_url.json``: ``uv pip freeze`` says ``name @ URL`` and
``uv sync`` reinstalls it). A git pin carries ``# git: SOURCE``, the lock's git source
(``URL?rev=REF&subdirectory=DIR#COMMIT``, uv.lock's form): uv sync records the ref it was asked
for (``requested_revision``), which the pin's own ``git+URL@COMMIT`` does not say, and a wheel
built from the pin (the builds stage) is recorded as that git install (``installer.records``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from envbuild.errors import LockError
from envbuild.spec.stepfile import (
    STAGE_NOTES,
    LockedReq,
    is_commit,
    logical_lines,
    parse_requirements_text,
)

if TYPE_CHECKING:
    from packaging.pylock import Package

__all__ = [
    "GIT_NOTE",
    "INDEX_NOTE",
    "GitSource",
    "IndexRuns",
    "StagePylock",
    "git_note",
    "index_note",
    "index_runs",
    "noted_git",
    "noted_index",
    "stage_pylock",
]

INDEX_NOTE, GIT_NOTE = STAGE_NOTES
_ARCHIVES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar")


def index_note(index: str | None) -> str:
    """The comment a stage's line of an index file ends with."""
    return f"  # {INDEX_NOTE}: {index}" if index else f"  # {INDEX_NOTE}"


def noted_index(comments: Iterable[str]) -> str | None:
    """The index a line's comments name: the URL, "" (an index file, its URL not recorded), or None
    (not an index file)."""
    for c in comments:
        head, _, rest = c.partition(":")
        if head.strip() == INDEX_NOTE:
            return rest.strip()
    return None


def git_note(source: str) -> str:
    """The comment a stage's line of a git pin (or of the wheel built from it) ends with."""
    return f"  # {GIT_NOTE}: {source}"


@dataclass(frozen=True)
class GitSource:
    """A git pin as uv.lock records it: ``URL?rev=REF&subdirectory=DIR#COMMIT`` (``rev``, ``tag``
    or ``branch``: the ref asked for, absent where none was)."""

    source: str  # as the lock has it
    url: str  # the repository, without the query and the commit
    commit: str
    requested_revision: str | None
    subdirectory: str | None


def noted_git(comments: Iterable[str]) -> GitSource | None:
    """The git source a line's comments name (``# git: SOURCE``), or None."""
    from urllib.parse import parse_qs

    for c in comments:
        head, _, rest = c.partition(":")
        if head.strip() != GIT_NOTE:
            continue
        source = rest.strip()
        parts = urlsplit(source)
        if not is_commit(parts.fragment):
            return None
        query = parse_qs(parts.query)
        ref = next((query[k][0] for k in ("rev", "tag", "branch") if query.get(k)), None)
        sub = query["subdirectory"][0] if query.get("subdirectory") else None
        url = parts._replace(query="", fragment="").geturl()
        return GitSource(source, url, parts.fragment, ref, sub)
    return None


@dataclass(frozen=True)
class StagePylock:
    """A lock stage's file as uv installs it: a ``pylock.toml`` of its index files and archives,
    and the lines a pylock cannot hold (editables, folders, git), installed after it."""

    pylock: str | None  # the pylock.toml text; None: nothing in the stage is an index file
    rest: str  # the other lines, as a requirements file ("" when none)


def stage_pylock(text: str, where: str, *, vcs: bool = True) -> StagePylock:
    """Split a lock stage's file (see above) into the pylock its files install from and the rest.
    None for ``pylock`` when no line carries an index note (or, with ``vcs``, a git note): the file
    installs as it is. ``vcs``: git pins go into the pylock too (uv, which records the ref it names;
    pip's hash-checking mode refuses a pin without a hash, so it keeps them as lines)."""
    from packaging.pylock import Package, PackageArchive, PackageSdist, PackageWheel, Pylock
    from packaging.version import Version

    from envbuild import __version__
    from envbuild._io import dumps_toml

    lines = list(logical_lines(text))
    if not any(
        noted_index(c) is not None or (vcs and _git_pin(line, c) is not None)
        for _, line, c in lines
    ):
        return StagePylock(None, text)
    packages: list[Package] = []
    rest: list[str] = []
    for lineno, line, comments in lines:
        if vcs and (pin := _git_pin(line, comments)) is not None:
            packages.append(pin)
            continue
        req = _archive_req(line, f"{where}:{lineno}")
        if req is None:
            rest.append(line)
            continue
        assert req.url is not None
        hashes = {"sha256": req.hashes[0]} if req.hashes else {}
        url, path = _url_or_path(req.url)
        filename = _filename(req.url)
        index = noted_index(comments)
        if index is None:
            archive = PackageArchive(url=url, path=path, hashes=hashes)
            packages.append(Package(name=canonicalize_name(req.name), archive=archive))
            continue
        try:
            version, wheel = _file_version(filename)
        except ValueError:  # a file name no installer parses: named by URL, as before
            rest.append(line)
            continue
        packages.append(
            Package(
                name=canonicalize_name(req.name),
                version=Version(version),
                index=index or None,
                wheels=[PackageWheel(url=url, path=path, hashes=hashes)] if wheel else None,
                sdist=None if wheel else PackageSdist(url=url, path=path, hashes=hashes),
            )
        )
    lock = Pylock(
        lock_version=Version("1.0"), created_by=f"envbuild {__version__}", packages=packages
    )
    return StagePylock(dumps_toml(lock.to_dict()), "".join(f"{line}\n" for line in rest))


@dataclass(frozen=True)
class IndexRuns:
    """A lock stage's file for a pip that reads no pylock file: its index files as exact pins
    (``name==version --hash=sha256:...``, which pip records as an install from the index, as it
    records ``pip install name==version``), one run per index, and the other lines."""

    runs: dict[str, str]  # {index URL: its lines}
    rest: str  # the other lines, as a requirements file ("" when none)


def index_runs(text: str, where: str) -> IndexRuns:
    """Split a lock stage's file (see above) into ``IndexRuns``; a file of an index the lock does
    not name (``# index`` alone) stays a line by URL."""
    runs: dict[str, str] = {}
    rest: list[str] = []
    for lineno, line, comments in logical_lines(text):
        index = noted_index(comments)
        req = _archive_req(line, f"{where}:{lineno}") if index else None
        try:
            version = _file_version(_filename(req.url))[0] if req and req.url else None
        except ValueError:
            version = None
        if req is None or index is None or version is None:
            rest.append(line)
            continue
        pin = f"{req.name}=={version}" + "".join(f" --hash=sha256:{h}" for h in req.hashes[:1])
        runs[index] = runs.get(index, "") + pin + "\n"
    return IndexRuns(runs, "".join(f"{line}\n" for line in rest))


def _filename(url: str) -> str:
    return unquote(urlsplit(url).path).rsplit("/", 1)[-1]


def _git_pin(line: str, comments: Iterable[str]) -> Package | None:
    """A git pin's line (``name @ git+URL@COMMIT``) with its git note as a pylock package (its
    ``vcs``: the ref the lock asked for, as uv sync records it), or None."""
    from packaging.pylock import Package, PackageVcs

    source = noted_git(comments)
    name, _, url = line.partition("@")
    if source is None or not url.strip().startswith("git+"):
        return None
    vcs = PackageVcs(
        type="git",
        url=source.url,
        requested_revision=source.requested_revision,
        commit_id=source.commit,
        subdirectory=source.subdirectory,
    )
    return Package(name=canonicalize_name(name.strip()), vcs=vcs)


def _archive_req(line: str, where: str) -> LockedReq | None:
    """The line as a file named by URL (``name @ URL --hash=sha256:...`` of a wheel or an sdist), or
    None (an editable, a folder, a git pin, anything else)."""
    if line.startswith("-"):
        return None
    try:
        reqs = parse_requirements_text(line, where)
    except LockError:
        return None
    req = reqs[0] if len(reqs) == 1 else None
    if req is None or req.url is None or req.is_vcs:
        return None
    parts = urlsplit(req.url)
    if parts.scheme not in ("http", "https", "file") or parts.fragment:
        return None
    if not unquote(parts.path).lower().endswith(_ARCHIVES):
        return None
    return req


def _url_or_path(url: str) -> tuple[str | None, str | None]:
    parts = urlsplit(url)
    return (None, unquote(parts.path)) if parts.scheme == "file" else (url, None)


def _file_version(filename: str) -> tuple[str, bool]:
    """(version, is a wheel) of a distribution file's name."""
    from packaging.utils import parse_sdist_filename, parse_wheel_filename

    if filename.endswith(".whl"):
        return str(parse_wheel_filename(filename)[1]), True
    return str(parse_sdist_filename(filename)[1]), False
