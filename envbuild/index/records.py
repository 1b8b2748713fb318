"""The files a wheel installs: its RECORD, parsed by the one reader (``parse_record``), kept by the
sha256 of the wheel it came from (``$ENVBUILD_CACHE_DIR/records/<sha256>.json``), and where two
distributions of one environment install the same file (``find_overlaps``).

A wheel's RECORD is read, in order, from the cache; from an installed copy (``remember``: what
``provision --lock``'s prepare unpacked); from a local wheel file; or, online, from the remote
wheel by HTTP Range requests (``index.remotezip.RangeFile``: the zip's central directory and the
RECORD member, kilobytes of a 900 MB wheel). A server that does not answer ranges is not streamed
whole for this: the wheel's files are then unknown (``None``), and the caller says so.

Two owners of one path overwrite each other; which copy stays depends on the order the installer
writes them. uv installs a step's wheels in parallel, so between two wheels installed by one
``uv pip install`` or ``uv sync`` the winner is a race (measured with uv 0.13.9: two wheels that
both install ``cvlike/__init__.py``, 20 installs each way round, gave 19/1 and 16/4).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild.index.remotezip import dist_info_member

__all__ = [
    "FileOverlap",
    "find_overlaps",
    "overlap_groups",
    "get",
    "installed_files",
    "local_record",
    "parse_record",
    "put",
    "remember",
    "remote_record",
]


def parse_record(text: str) -> dict[str, str]:
    """A RECORD's rows as {path: "sha256=..." or ""}: the one RECORD parser."""
    out: dict[str, str] = {}
    for row in csv.reader(io.StringIO(text)):
        if row:
            out[row[0]] = row[1] if len(row) > 1 else ""
    return out


def installed_files(record: Mapping[str, str]) -> dict[str, str]:
    """The rows of the files a wheel puts in site-packages that another wheel could also own: not
    its own dist-info, not bytecode, not the scripts an installer writes its own way (``../bin``,
    ``*.data/scripts``)."""
    return {
        path: digest
        for path, digest in record.items()
        if ".dist-info/" not in path
        and "__pycache__" not in path
        and not path.startswith("../")
        and ".data/scripts/" not in path
    }


def _path(sha: str) -> Path:
    from envbuild.index.metacache import cache_dir

    return cache_dir() / "records" / f"{sha}.json"


def get(sha: str | None) -> dict[str, str] | None:
    """The cached files of the wheel whose sha256 is ``sha`` (``installed_files``), or None."""
    if not sha:
        return None
    try:
        data = json.loads(_path(sha).read_text(encoding="utf-8"))
        return {str(k): str(v) for k, v in data["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def put(sha: str | None, record: Mapping[str, str]) -> dict[str, str]:
    """Cache the files of the wheel ``sha`` from its RECORD rows; returns ``installed_files``."""
    files = installed_files(record)
    if sha:
        from envbuild._io import atomic_write_json

        with contextlib.suppress(OSError):  # a read-only cache only costs a read later
            atomic_write_json(_path(sha), {"files": files}, durable=False)
    return files


def remember(sha: str | None, dist_info: Path) -> dict[str, str]:
    """The files of an installed copy of the wheel ``sha`` (its ``dist_info`` folder's RECORD),
    cached. An installer rewrites RECORD's own row and adds its INSTALLER/REQUESTED; the files a
    wheel installs are the wheel's."""
    try:
        text = (dist_info / "RECORD").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return put(sha, parse_record(text))


def local_record(path: Path, sha: str | None = None) -> dict[str, str] | None:
    """The files of a wheel on disk (cached by ``sha``); None where it is not a readable wheel."""
    try:
        with zipfile.ZipFile(path) as zf:
            return put(sha, parse_record(dist_info_member(zf, "RECORD")))
    except (OSError, ValueError, zipfile.BadZipFile):
        return None


def remote_record(url: str, sha: str | None, *, http: Any, timeout: Any) -> dict[str, str] | None:
    """The files of a remote wheel read by HTTP Range requests (cached by ``sha``); None where the
    server does not answer ranges. A network failure raises ``index.net.SourceError``."""
    from envbuild.index.net import SourceError, redact
    from envbuild.index.remotezip import NoRanges, RangeFile, Read

    try:
        with RangeFile(url, http, timeout, Read()) as remote, zipfile.ZipFile(remote) as zf:
            text = dist_info_member(zf, "RECORD")
    except NoRanges:
        return None
    except (zipfile.BadZipFile, ValueError) as exc:
        raise SourceError(f"{redact(url)}: not a readable wheel ({exc})") from exc
    return put(sha, parse_record(text))


@dataclass(frozen=True)
class FileOverlap:
    """Distributions of one environment that install the same files (other bytes: one copy
    overwrites the other). ``packages`` sorted; ``paths``: the paths they share, sorted."""

    packages: tuple[str, ...]
    paths: tuple[str, ...]

    def touches(self, names: Sequence[str]) -> bool:
        """Whether one of ``names`` (canonical) is among the owners."""
        return bool(set(self.packages) & {canonicalize_name(n) for n in names})

    def shown(self) -> str:
        more = f" and {len(self.paths) - 1} more file(s)" if len(self.paths) > 1 else ""
        return f"{' and '.join(self.packages)} both install {self.paths[0]}{more}"


def find_overlaps(files: Mapping[str, Mapping[str, str]]) -> list[FileOverlap]:
    """The overlaps among ``files`` ({distribution: {path: RECORD hash}}): each group of owners
    once, with every path they share. A path every owner installs with the same sha256 (a namespace
    package's ``__init__.py``) overwrites nothing and is left out."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for name, rows in files.items():
        canon = canonicalize_name(name)
        for path, digest in installed_files(rows).items():
            owners.setdefault(path, []).append((canon, digest))
    return overlap_groups(owners)


def overlap_groups(owners: Mapping[str, Sequence[tuple[str, str]]]) -> list[FileOverlap]:
    """``find_overlaps`` from {path: ((owner, RECORD hash), ...)} (``guard.shared_files`` keeps
    this for an installed environment)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for path, rows in owners.items():
        names = {n for n, _ in rows}
        if len(names) < 2:
            continue
        digests = {h for _, h in rows}
        if len(digests) == 1 and next(iter(digests)).startswith("sha256="):
            continue
        groups.setdefault(tuple(sorted(names)), []).append(path)
    return [FileOverlap(g, tuple(sorted(paths))) for g, paths in sorted(groups.items())]
