"""PEP 751 ``pylock.toml`` export of a lock: the whole environment, for tools that read it (uv, pip).

Built and validated with ``packaging.pylock`` (the reference implementation of the format).
One package entry per distribution in the final environment: when two steps lock the same
name, the later step's pin wins, as it does on disk. Local artifacts (a find-links folder) are
written as ``path``, remote ones as ``url``; a git requirement becomes a ``vcs`` entry pinned to
its commit. Packages whose artifacts the lock could not locate are left out, with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.pylock import Package, PackageSdist, PackageVcs, PackageWheel, Pylock
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from envbuild import __version__, events
from envbuild._io import atomic_write_text
from envbuild.lock.model import PYLOCK


def build_pylock(manifest: Mapping[str, Any]) -> Pylock:
    final: dict[NormalizedName, dict[str, Any]] = {}
    for step in manifest.get("steps", []):
        if not step.get("locked", True):
            continue
        for p in step.get("packages", []):
            final[canonicalize_name(p["name"])] = p
    packages = []
    for name, p in sorted(final.items()):
        pkg = _package(name, p)
        if pkg is None:
            events.emit("warn", f"pylock.toml: {name} left out (no artifact location recorded in the lock)")
            continue
        packages.append(pkg)
    py = manifest.get("python")
    return Pylock(
        lock_version=Version("1.0"),
        created_by=f"envbuild {__version__}",
        requires_python=None if not py else _specifier(f"=={py}.*"),
        packages=packages,
    )


def _specifier(text: str) -> Any:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(text)


def _package(name: NormalizedName, p: Mapping[str, Any]) -> Package | None:
    vcs = p.get("vcs")
    if vcs:
        url = str(vcs["url"])
        repo: str = url[4:] if url.startswith("git+") else url
        repo = repo.split("#", 1)[0].rsplit("@", 1)[0] if vcs.get("commit") else repo
        if not vcs.get("commit"):
            return None
        return Package(name=name, vcs=PackageVcs(type="git", url=repo, commit_id=str(vcs["commit"])))
    wheels, sdist = [], None
    for a in p.get("artifacts", []):
        aurl, path = _location(str(a["url"]))
        hashes = {"sha256": str(a["sha256"])}
        if a["filename"].endswith(".whl"):
            wheels.append(PackageWheel(name=a["filename"], url=aurl, path=path, hashes=hashes))
        elif sdist is None:
            sdist = PackageSdist(name=a["filename"], url=aurl, path=path, hashes=hashes)
    if not wheels and sdist is None:
        return None
    return Package(name=name, version=Version(p["version"]), wheels=wheels or None, sdist=sdist)


def _location(url: str) -> tuple[str | None, str | None]:
    parts = urlsplit(url)
    if parts.scheme == "file":
        return None, unquote(parts.path)
    return url, None


# ----------------------------------------------------------------------------- TOML


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
    """A small TOML writer for pylock data: scalars and inline values, arrays of tables one level deep."""
    lines = [f"{_key(k)} = {_inline(v)}" for k, v in data.items()
             if not (isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v))]
    for k, v in data.items():
        if isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            for item in v:
                lines.append("")
                lines.append(f"[[{_key(k)}]]")
                lines += [f"{_key(ik)} = {_inline(iv)}" for ik, iv in item.items()]
    return "\n".join(lines) + "\n"


def write_pylock(folder: Path, manifest: Mapping[str, Any]) -> Path:
    lock = build_pylock(manifest)
    lock.validate()
    path = folder / PYLOCK
    atomic_write_text(path, "# PEP 751 export of lock.json, written by `envbuild lock`; do not edit.\n"
                      + dumps_toml(lock.to_dict()))
    return path
