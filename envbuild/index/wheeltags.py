"""Which wheels a target takes (the lock's Python and ``[target]`` platform), and what a wheelhouse holds.

Below the lock and the wheelhouse (beside ``index.py``): ``gate.rules.ownlock.online``, ``wheelhouse.mirror``
and ``provision.offline`` all ask it.

``wheelhouse mirror`` keeps, per locked project and version, the wheels that install on the
target (``target_tags``: the tags pip on that host accepts, from ``packaging.tags``), and the
sdist only where no wheel does. ``provision --offline`` and ``check-lock --online`` read what a
wheelhouse holds by sha256 (``wheelhouse_files``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from envbuild import events
from envbuild._io import sha256_file
from envbuild.index.client import Artifact, find_links_files, parse_filename

__all__ = ["fits_target", "select_target", "target_tags", "wheelhouse_files"]


_MANYLINUX = re.compile(r"^manylinux_2_(?P<glibc>\d+)_(?P<arch>\w+)$")
_LEGACY = (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))


@functools.lru_cache(maxsize=16)
def target_tags(python: str, platform: str) -> frozenset[Tag]:
    """Every wheel tag pip on the target installs: CPython ``python`` (``3.11``) on a host of the
    ``[target] platform`` (``manylinux_2_28_x86_64``: every manylinux tag of that glibc or older,
    the legacy aliases, ``linux_<cpu>``), from ``packaging.tags``, as pip itself computes them."""
    m = _MANYLINUX.match(platform)
    if m is None:
        raise ValueError(f"not a manylinux platform tag: {platform!r}")
    glibc, arch = int(m.group("glibc")), m.group("arch")
    plats = [f"manylinux_2_{n}_{arch}" for n in range(glibc, 4, -1)]
    plats += [alias + f"_{arch}" for alias, n in _LEGACY if n <= glibc] + [f"linux_{arch}"]
    major, minor = (int(x) for x in python.split(".")[:2])
    version = (major, minor)
    found = set(cpython_tags(version, platforms=plats))
    found |= set(compatible_tags(version, interpreter=f"cp{major}{minor}", platforms=plats))
    return frozenset(found)


def fits_target(filename: str, python: str, platform: str) -> bool:
    """Whether a wheel installs on the target (an sdist: whether it is one; see ``select_target``)."""
    if not filename.endswith(".whl"):
        return False
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    wanted = target_tags(python, platform)
    return any(t in wanted for t in tags)


def select_target(artifacts: Iterable[Artifact], python: str, platform: str) -> tuple[list[Artifact], list[Artifact]]:
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
            events.emit("warn", f"{project} {version}: no locked file installs on Python {python} {platform} "
                        f"({', '.join(a.filename for a in arts[:3])}); nothing of it is mirrored")
        kept += chosen
        left += [a for a in arts if a not in chosen]
    return kept, left


def wheelhouse_files(location: str) -> dict[str, str]:
    """{sha256: file name} of every distribution file in a wheelhouse folder (hashes from its
    ``wheelhouse.json`` / ``.envbuild-hashes.json`` where name and size agree, else read) or on a
    find-links page (its ``#sha256=`` fragments)."""
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
