"""The requirements a locked entry declares: from the lock where the format records them, else
from the metadata cache (by sha256, offline too), else from its index (cached), else unknown."""

from __future__ import annotations

from envbuild import events
from envbuild.gate.model import Entry, Lock

__all__ = ["PYPI", "declared_requirements"]

PYPI = "https://pypi.org/simple"


def declared_requirements(entry: Entry, lock: Lock, *, offline: bool, index_urls: tuple[str, ...] = (),
                          supplied: bool = True) -> tuple[str, ...] | None:
    """``supplied``: metadata the project supplied by hand counts (uv.lock's
    ``[[manifest.dependency-metadata]]``: what the resolver used); the runtime rule says False,
    since a hand-written torch metadata that drops its CUDA runtime is the fault it looks for."""
    if entry.requires is not None:
        return entry.requires
    if supplied:
        by_hand = lock.extra.get("supplied_requires", {})
        got = by_hand.get((entry.name, entry.version)) or by_hand.get((entry.name, None))
        if got is not None:
            return tuple(got)
    from envbuild.metacache import cached_requires

    if entry.hashes:
        cached = cached_requires(entry.hashes)
        if cached is not None:
            return tuple(cached)
    if offline or entry.version is None:
        return None
    return _from_index(entry, lock, index_urls)


def _from_index(entry: Entry, lock: Lock, index_urls: tuple[str, ...]) -> tuple[str, ...] | None:
    """Requires-Dist of the locked artifact, read from where it came from (cached by sha256)."""
    from envbuild.errors import EnvbuildError
    from envbuild.index import Artifact, ArtifactFinder, Sources, requires_of

    events.emit("debug", f"reading the metadata of {entry.name} {entry.version} from its index")
    try:
        named = [(u, h) for u, h in entry.files if u.startswith(("http://", "https://", "file:"))]
        if named:
            url, sha = next(((u, h) for u, h in named if u.split("?")[0].endswith(".whl")), named[0])
            return tuple(requires_of(Artifact(url.rsplit("/", 1)[-1].split("#")[0], url, sha)))
        if entry.url and entry.url.startswith(("http://", "https://")):
            return tuple(requires_of(Artifact(entry.url.rsplit("/", 1)[-1].split("#")[0], entry.url, None)))
        indexes = tuple(dict.fromkeys([x for x in (entry.index, *index_urls, *lock.indexes) if x] or [PYPI]))
        finder = ArtifactFinder(Sources(index_urls=indexes))
        arts = finder.matching(entry.name, entry.version or "", entry.hashes) if entry.hashes else \
            finder.matching_all(entry.name, entry.version or "")
        if not arts:
            return None
        return tuple(requires_of(next((a for a in arts if a.is_wheel), arts[0])))
    except (EnvbuildError, OSError, ValueError):
        return None
