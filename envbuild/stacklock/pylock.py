"""PEP 751 ``pylock.toml`` export of a lock: the whole environment, for tools that read it (uv,
pip).

Built and validated with ``packaging.pylock`` (the reference implementation of the format).
One package entry per distribution in the final environment: when two steps lock the same
name, the later step's pin wins, as it does on disk. Local artifacts (a find-links folder) are
written as ``path``, remote ones as ``url``; a git requirement becomes a ``vcs`` entry pinned to
its commit. Packages whose artifacts the lock could not locate are left out, with a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.pylock import Package, PackageSdist, PackageVcs, PackageWheel, Pylock
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from envbuild import __version__, events
from envbuild._io import atomic_write_text, dumps_toml
from envbuild.stacklock.model import PYLOCK, Lock, LockedPackage


def build_pylock(lock: Lock) -> Pylock:
    final: dict[NormalizedName, LockedPackage] = {}
    for step in lock.steps:
        for p in step.packages:
            final[canonicalize_name(p.name)] = p
    packages = []
    for name, p in sorted(final.items()):
        pkg = _package(name, p)
        if pkg is None:
            events.emit(
                "warn", f"pylock.toml: {name} left out (no artifact location recorded in the lock)"
            )
            continue
        packages.append(pkg)
    py = lock.python
    return Pylock(
        lock_version=Version("1.0"),
        created_by=f"envbuild {__version__}",
        requires_python=None if not py else _specifier(f"=={py}.*"),
        packages=packages,
    )


def _specifier(text: str) -> Any:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(text)


def _package(name: NormalizedName, p: LockedPackage) -> Package | None:
    if p.vcs is not None:
        if not p.vcs.commit:
            return None
        url = p.vcs.url
        repo = url[4:] if url.startswith("git+") else url
        repo = repo.split("#", 1)[0].rsplit("@", 1)[0]
        return Package(name=name, vcs=PackageVcs(type="git", url=repo, commit_id=p.vcs.commit))
    wheels, sdist = [], None
    for a in p.artifacts:
        aurl, path = _location(a.url)
        hashes = {"sha256": a.sha256 or ""}
        if a.is_wheel:
            wheels.append(PackageWheel(name=a.filename, url=aurl, path=path, hashes=hashes))
        elif sdist is None:
            sdist = PackageSdist(name=a.filename, url=aurl, path=path, hashes=hashes)
    if (not wheels and sdist is None) or p.version is None:
        return None
    return Package(name=name, version=Version(p.version), wheels=wheels or None, sdist=sdist)


def _location(url: str) -> tuple[str | None, str | None]:
    parts = urlsplit(url)
    if parts.scheme == "file":
        return None, unquote(parts.path)
    return url, None


def write_pylock(lock: Lock) -> Path:
    pylock = build_pylock(lock)
    pylock.validate()
    path = lock.folder / PYLOCK
    atomic_write_text(
        path,
        "# PEP 751 export of lock.json, written by `envbuild lock`; do not edit.\n"
        + dumps_toml(pylock.to_dict()),
    )
    return path
