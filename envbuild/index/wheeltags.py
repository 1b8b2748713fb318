"""The one owner of wheel tags: which files of a package install in an environment.

Every caller asks here: the gate (``check-lock``: does a file of an entry install on ``linux
x86_64``, Python 3.12?), ``provision --lock`` (which of an entry's wheels to take on the target,
best tag first), ``wheelhouse mirror`` and ``provision --offline`` (which wheels a ``[target]
platform`` such as ``manylinux_2_28_x86_64`` takes). The tags are ``packaging.tags``' own, as pip
computes them: CPython and the compatible tags of a Python minor, on a platform's tags
(``platform_tags``); no other module generates tags (``tests/test_wheeltags.py`` fails if one does).

A platform is named in the gate's words (``linux x86_64``, ``macos arm64``, ``windows amd64``; the
key form ``linux-x86_64`` too) or by a manylinux tag (``manylinux_2_28_x86_64``). Linux is glibc
Linux, as the lockers resolve it: every manylinux tag up to ``glibc`` (default ``NEWEST_GLIBC``, a
host newer than any wheel; ``provision --lock`` passes its host's), the legacy aliases and
``linux_<cpu>``; macOS: ``packaging.tags.mac_platforms`` from macOS 16 down (so a
``macosx_10_9_x86_64`` wheel installs on ``macos x86_64``, and a universal2 one on both).

Also what a wheelhouse holds (``wheelhouse_files``) and which of a locked project's files a
wheelhouse keeps for its target (``select_target``).
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from packaging.tags import Tag, compatible_tags, cpython_tags, mac_platforms, sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from envbuild import events

# the index client (requests) only where a wheelhouse is read: the gate starts without it
if TYPE_CHECKING:
    from envbuild.index.client import Artifact

__all__ = [
    "NEWEST_GLIBC",
    "SDIST_SUFFIXES",
    "WheelPick",
    "best_wheel",
    "fits_target",
    "fits_tag_filter",
    "host_tags",
    "is_pure",
    "rank_among",
    "installs_on",
    "installs_where",
    "platform_tags",
    "select_target",
    "tag_rank",
    "target_tags",
    "wheel_tags",
    "wheelhouse_files",
]

NEWEST_GLIBC = 45  # manylinux_2_45 and older: what a Linux host newer than any wheel installs
SDIST_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2", ".tgz")


def is_sdist(filename: str) -> bool:
    """A source distribution's file name (any of ``SDIST_SUFFIXES``, any case)."""
    return filename.lower().endswith(SDIST_SUFFIXES)


_MANYLINUX = re.compile(r"^manylinux_2_(?P<glibc>\d+)_(?P<arch>\w+)$")
_LEGACY = (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))
_MAC_ARCH = {"arm64": "arm64", "aarch64": "arm64", "x86_64": "x86_64"}


def _plats(platform: str, glibc: int | None) -> list[str]:
    m = _MANYLINUX.match(platform)
    if m is not None:
        system, arch = "linux", m.group("arch")
        glibc = int(m.group("glibc")) if glibc is None else glibc
    else:
        system, _, arch = platform.replace("-", " ", 1).partition(" ")
    if system == "linux":
        newest = NEWEST_GLIBC if glibc is None else glibc
        out = [f"manylinux_2_{n}_{arch}" for n in range(newest, 4, -1)]
        return out + [f"{alias}_{arch}" for alias, n in _LEGACY if n <= newest] + [f"linux_{arch}"]
    if system == "macos":
        return list(mac_platforms((16, 0), _MAC_ARCH.get(arch, arch)))
    if system == "windows":
        return ["win_arm64"] if arch == "arm64" else ["win_amd64"]
    raise ValueError(f"not a platform envbuild knows: {platform!r}")


@functools.lru_cache(maxsize=256)
def platform_tags(python: str, platform: str, *, glibc: int | None = None) -> tuple[Tag, ...]:
    """Every wheel tag CPython ``python`` (``3.12``) installs on ``platform``, best first (pip's
    order). ``glibc``: the newest manylinux minor a Linux host takes (default: the platform tag's,
    else ``NEWEST_GLIBC``). ValueError for a platform that is none of the above."""
    plats = _plats(platform, glibc)
    major, minor = (int(x) for x in python.split(".")[:2])
    tags = list(cpython_tags((major, minor), platforms=plats))
    tags += list(compatible_tags((major, minor), interpreter=f"cp{major}{minor}", platforms=plats))
    return tuple(dict.fromkeys(tags))


def host_tags() -> tuple[Tag, ...]:
    """The tags this interpreter installs, best first (``packaging.tags.sys_tags``)."""
    return tuple(sys_tags())


def host_python() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


@functools.lru_cache(maxsize=256)
def _ranks(python: str, platform: str, glibc: int | None) -> dict[Tag, int]:
    return {t: i for i, t in enumerate(platform_tags(python, platform, glibc=glibc))}


@functools.lru_cache(maxsize=8192)
def wheel_tags(filename: str) -> frozenset[Tag]:
    """The tags of a wheel file name (empty for anything else)."""
    if not filename.endswith(".whl"):
        return frozenset()
    try:
        return parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return frozenset()


def _name_of(file: str) -> str:
    """A file name from a file name, path or URL (its query and fragment dropped, unquoted)."""
    return unquote(file.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1])


def tag_rank(
    filename: str,
    python: str,
    platform: str,
    *,
    glibc: int | None = None,
    order: dict[Tag, int] | None = None,
) -> int | None:
    """How good a wheel is on the target: the position of its best tag in ``platform_tags`` (0 is
    best), or None when it does not install there (an sdist, or a wheel of another platform).
    ``order``: another ranking to use (``host_tags``')."""
    ranks = order if order is not None else _ranks(python, platform, glibc)
    return min((ranks[t] for t in wheel_tags(_name_of(filename)) if t in ranks), default=None)


def rank_among(filename: str, order: Mapping[str, int]) -> int | None:
    """``tag_rank`` against a target's own order of tags as ``py-abi-plat`` strings (best first,
    ``projectlock.stages.target_tag_order``): the position of the wheel's best tag, None where none
    of its tags is there."""
    return min(
        (order[t] for t in map(str, wheel_tags(_name_of(filename))) if t in order), default=None
    )


def is_pure(filename: str) -> bool:
    """Whether a wheel installs anywhere (every tag's platform ``any``)."""
    return all(t.platform == "any" for t in wheel_tags(_name_of(filename)))


@dataclass(frozen=True)
class WheelPick:
    """The wheel a target takes of a package's files (``best_wheel``)."""

    at: int  # its position among the names given
    rank: int  # the position of its best tag in the target's order (0 is best)
    pure: bool  # it installs anywhere (``is_pure``)


def best_wheel(names: Sequence[str], order: Mapping[str, int]) -> WheelPick | None:
    """The wheel of ``names`` (file names, paths or URLs) the target takes: the one whose best tag
    comes first in ``order`` (``rank_among``), the first given among equals, and whether it is pure;
    None where none of them installs there."""
    best: tuple[int, int] | None = None
    for i, name in enumerate(names):
        rank = rank_among(name, order)
        if rank is not None and (best is None or rank < best[1]):
            best = (i, rank)
    if best is None:
        return None
    return WheelPick(best[0], best[1], is_pure(names[best[0]]))


def _fits_python(interpreter: str, abi: str, python: str) -> bool:
    """Whether a wheel's interpreter/abi tag installs on ``python`` (``cp311``): its own tag,
    ``py3``/``py311``, or a stable-ABI ``cp37-abi3`` wheel of an older 3.x (numbers, not strings:
    ``cp37`` is older than ``cp311``)."""
    if interpreter in (python, "py3", f"py{python[2:]}", f"py{python[2:3]}"):
        return True
    if abi == "abi3" and interpreter.startswith("cp3") and python.startswith("cp3"):
        try:
            return int(interpreter[3:] or 0) <= int(python[3:])
        except ValueError:
            return False
    return False


def fits_tag_filter(filename: str, python: str | None, platform: str | None) -> bool:
    """Whether a wheel is kept by ``wheelhouse mirror``'s filter: an interpreter tag (``cp313``) and
    a platform glob (``manylinux*_x86_64``), each where given. InvalidWheelFilename for a ``.whl``
    name that does not parse."""
    import fnmatch

    tags = parse_wheel_filename(filename)[3]
    if python and not any(_fits_python(t.interpreter, t.abi, python) for t in tags):
        return False
    return not platform or any(
        t.platform == "any" or fnmatch.fnmatch(t.platform, platform) for t in tags
    )


@functools.lru_cache(maxsize=512)
def _tag_set(python: str, platform: str) -> frozenset[Tag]:
    return frozenset(platform_tags(python, platform))


def installs_where(file: str, targets: Sequence[tuple[str, str]]) -> list[bool]:
    """``installs_on`` for each (python, platform) of ``targets``, the file's name and tags read
    once (the gate asks every file of a lock on every platform and Python it judges)."""
    name = _name_of(file)
    if name.lower().endswith(SDIST_SUFFIXES) or not name.endswith(".whl"):
        return [True] * len(targets)
    tags = wheel_tags(name)
    if not tags:
        return [True] * len(targets)
    return [not tags.isdisjoint(_tag_set(py, platform)) for py, platform in targets]


@functools.lru_cache(maxsize=65536)
def installs_on(file: str, python: str, platform: str, *, glibc: int | None = None) -> bool:
    """Whether a distribution file (a name, path or URL) installs in the environment: an sdist
    always may (it is built there), a wheel when one of its tags is the platform's; a name that
    is neither (a URL naming no file) is not said to be missing."""
    name = _name_of(file)
    if name.lower().endswith(SDIST_SUFFIXES) or not name.endswith(".whl"):
        return True
    if not wheel_tags(name):
        return True  # a wheel name that does not parse: not said to be missing
    return tag_rank(name, python, platform, glibc=glibc) is not None


def target_tags(python: str, platform: str) -> frozenset[Tag]:
    """Every wheel tag pip on a ``[target] platform`` (``manylinux_2_28_x86_64``) installs.
    ValueError when ``platform`` is not a manylinux tag."""
    if _MANYLINUX.match(platform) is None:
        raise ValueError(f"not a manylinux platform tag: {platform!r}")
    return frozenset(platform_tags(python, platform))


def fits_target(filename: str, python: str, platform: str) -> bool:
    """Whether a wheel installs on the target (an sdist: False; see ``select_target``)."""
    return filename.endswith(".whl") and tag_rank(filename, python, platform) is not None


def select_target(
    artifacts: Iterable[Artifact], python: str, platform: str
) -> tuple[list[Artifact], list[Artifact]]:
    """(kept, left out): per project and version, the wheels that install on the target, or its
    sdist only where no wheel does. A version with neither is left out, with a warning."""
    groups: dict[tuple[str, str], list[Artifact]] = {}
    for a in artifacts:
        groups.setdefault((a.project or a.filename, a.version or ""), []).append(a)
    kept: list[Artifact] = []
    left: list[Artifact] = []
    for (project, version), arts in groups.items():
        wheels = [a for a in arts if fits_target(a.filename, python, platform)]
        chosen = wheels or [a for a in arts if not a.is_wheel]
        if not chosen:
            events.emit(
                "warn",
                f"{project} {version}: no locked file installs on Python {python} {platform} "
                f"({', '.join(a.filename for a in arts[:3])}); nothing of it is mirrored",
            )
        kept += chosen
        left += [a for a in arts if a not in chosen]
    return kept, left


def wheelhouse_files(location: str) -> dict[str, str]:
    """{sha256: file name} of every distribution file in a wheelhouse folder (hashes from its
    ``wheelhouse.json`` / ``.envbuild-hashes.json`` where name and size agree, else read) or on a
    find-links page (its ``#sha256=`` fragments)."""
    from envbuild._io import sha256_file
    from envbuild.index.client import find_links_files, parse_filename

    parts = urlsplit(location)
    if parts.scheme not in ("", "file"):
        return {a.sha256: a.filename for a in find_links_files(location) if a.sha256}
    folder = Path(unquote(parts.path) if parts.scheme == "file" else location)
    if not folder.is_dir():
        return {}
    known: dict[str, tuple[object, str]] = {}
    for cache in (folder / "wheelhouse.json", folder / ".envbuild-hashes.json"):
        try:
            for a in json.loads(cache.read_text()).get("artifacts", []):
                known[str(a["filename"])] = (a.get("size"), str(a["sha256"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    out: dict[str, str] = {}
    for f in folder.iterdir():
        if not f.is_file() or parse_filename(f.name) is None:
            continue
        size, sha = known.get(f.name, (None, ""))
        out[sha if size == f.stat().st_size and sha else sha256_file(f)] = f.name
    return out
