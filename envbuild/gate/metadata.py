"""The requirements a locked entry declares: from the lock where the format records them, else
from the metadata cache (by sha256, offline too), else from its index (cached), else unknown.

Online, each index host is probed once (``Sources.reachable``) under one deadline shared by the
whole run: a host that does not answer is named once, with the packages it left unchecked, and
costs seconds, not a minute of retries per package. What came from the cache is counted, so an
offline verdict says it leaned on it (``--no-cache`` judges from the lock alone).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from envbuild import events
from envbuild.gate.model import Entry, ParsedLock
from envbuild.index import PYPI

__all__ = ["PROBE_BUDGET", "PYPI", "MetadataSources", "declared_requirements", "files_on_index"]

PROBE_SECONDS = 3.0  # one host's probe
PROBE_BUDGET = 8.0  # every probe of a run together


@dataclass
class MetadataSources:
    """Where a run's metadata came from, and which hosts did not answer."""

    offline: bool = False
    use_cache: bool = True
    budget: float = PROBE_BUDGET
    dead: dict[str, str] = field(default_factory=dict)  # host -> why it did not answer
    alive: set[str] = field(default_factory=set)
    # host -> the entries it left unchecked
    skipped: dict[str, list[str]] = field(default_factory=dict)
    # entries whose requirements came from the cache
    cached: list[str] = field(default_factory=list)
    # what was read this run, by entry key and ``supplied`` (a check judges again what it splits)
    read: dict[tuple[int, bool], tuple[str, ...] | None] = field(default_factory=dict)
    _spent: float = 0.0

    def reachable(self, url: str) -> bool:
        """Whether ``url``'s host answers (probed once per run; a local path always does)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return True
        host = _host(url)
        if host in self.alive:
            return True
        if host in self.dead:
            return False
        left = self.budget - self._spent
        if left < 0.5:
            self.dead[host] = f"no time left of the {self.budget:.0f} s given to probing indexes"
            return False
        from envbuild.index.net import probe

        t0 = time.monotonic()
        root = f"{parts.scheme}://{parts.netloc}/"
        got = probe(root, timeout=min(PROBE_SECONDS, left), deadline=min(PROBE_SECONDS, left))
        self._spent += time.monotonic() - t0
        # any HTTP answer (even a 404 for the bare host) means the host is there
        if got.ok or not _no_answer(got.detail):
            self.alive.add(host)
            return True
        self.dead[host] = got.detail
        return False

    def skip(self, url: str, entry: Entry) -> None:
        host = _host(url)
        labels = self.skipped.setdefault(host, [])
        if entry.label() not in labels:
            labels.append(entry.label())

    def not_answered(self, label: str) -> bool:
        return any(label in labels for labels in self.skipped.values())

    def notes(self) -> list[str]:
        out = []
        for host, why in self.dead.items():
            labels = self.skipped.get(host, [])
            if labels:
                shown = ", ".join(labels[:6]) + (
                    f" and {len(labels) - 6} more" if len(labels) > 6 else ""
                )
                out.append(
                    f"index at {host} did not answer ({why}): {len(labels)} package(s) not checked:"
                    f" {shown}"
                )
        if self.cached:
            from envbuild.index.metacache import cache_dir

            out.append(
                f"{len(self.cached)} package(s) judged with requirements from the metadata cache "
                f"({cache_dir() / 'metadata'}); --no-cache judges from the lock alone"
            )
        return out


def _host(url: str) -> str:
    """The host (and port, when the URL names one) without credentials."""
    parts = urlsplit(url)
    host = parts.hostname or url
    return f"{host}:{parts.port}" if parts.port else host


def _no_answer(detail: str) -> bool:
    """A probe's failure that is the host's silence, not an HTTP answer."""
    return not detail.startswith("HTTP ")


def declared_requirements(
    entry: Entry,
    lock: ParsedLock,
    *,
    offline: bool,
    index_urls: tuple[str, ...] = (),
    supplied: bool = True,
    sources: MetadataSources | None = None,
) -> tuple[str, ...] | None:
    """``supplied``: metadata the project supplied by hand counts (uv.lock's
    ``[[manifest.dependency-metadata]]``: what the resolver used); the runtime rule says False,
    since a hand-written torch metadata that drops its CUDA runtime is the fault it looks for."""
    if entry.requires is not None:
        return entry.requires
    if sources is not None and (entry.key, supplied) in sources.read:
        return sources.read[(entry.key, supplied)]
    got = _declared(entry, lock, offline, index_urls, supplied, sources)
    if sources is not None:
        sources.read[(entry.key, supplied)] = got
    return got


def _declared(
    entry: Entry,
    lock: ParsedLock,
    offline: bool,
    index_urls: tuple[str, ...],
    supplied: bool,
    sources: MetadataSources | None,
) -> tuple[str, ...] | None:
    if supplied:
        by_hand = lock.extra.get("supplied_requires", {})
        got = by_hand.get((entry.name, entry.version)) or by_hand.get((entry.name, None))
        if got is not None:
            return tuple(got)
    sources = sources or MetadataSources(offline=offline)
    if entry.hashes and sources.use_cache:
        from envbuild.index.metacache import cached_requires

        cached = cached_requires(entry.hashes)
        if cached is not None:
            if entry.label() not in sources.cached:
                sources.cached.append(entry.label())
            return tuple(cached)
    if offline or entry.version is None:
        return None
    return _from_index(entry, lock, index_urls, sources)


def _from_index(
    entry: Entry, lock: ParsedLock, index_urls: tuple[str, ...], sources: MetadataSources
) -> tuple[str, ...] | None:
    """Requires-Dist of the locked artifact, read from where it came from (cached by sha256)."""
    from envbuild.errors import EnvbuildError
    from envbuild.index.client import Artifact, ArtifactFinder, requires_of
    from envbuild.index.client import Sources as IndexSources

    events.emit("debug", f"reading the metadata of {entry.name} {entry.version} from its index")
    try:
        named = [(u, h) for u, h in entry.files if u.startswith(("http://", "https://", "file:"))]
        if named:
            url, sha = next(
                ((u, h) for u, h in named if u.split("?")[0].endswith(".whl")), named[0]
            )
            if not sources.reachable(url):
                sources.skip(url, entry)
                return None
            return tuple(requires_of(Artifact(url.rsplit("/", 1)[-1].split("#")[0], url, sha)))
        if entry.url and entry.url.startswith(("http://", "https://")):
            if not sources.reachable(entry.url):
                sources.skip(entry.url, entry)
                return None
            return tuple(
                requires_of(Artifact(entry.url.rsplit("/", 1)[-1].split("#")[0], entry.url, None))
            )
        indexes = tuple(
            dict.fromkeys([x for x in (entry.index, *index_urls, *lock.indexes) if x] or [PYPI])
        )
        live = tuple(u for u in indexes if sources.reachable(u))
        if not live:
            sources.skip(indexes[0], entry)
            return None
        finder = ArtifactFinder(IndexSources(index_urls=live))
        arts = (
            finder.matching(entry.name, entry.version or "", entry.hashes)
            if entry.hashes
            else finder.matching_all(entry.name, entry.version or "")
        )
        if not arts:
            _maybe_on_dead(indexes, live, entry, sources)
            return None
        return tuple(requires_of(next((a for a in arts if a.is_wheel), arts[0])))
    except (EnvbuildError, OSError, ValueError):
        return None


def files_on_index(
    entry: Entry, lock: ParsedLock, index_urls: tuple[str, ...], sources: MetadataSources
) -> list[str] | None:
    """The names of the files a pin that names none (a requirements line, hash-pinned or not) can
    install: its ``--hash`` values looked up on its index's project page (the sha256 the page
    states; no file is downloaded), else every file of its version there. None when no index
    answered or nothing there matches (then nothing says where it installs)."""
    from envbuild.errors import EnvbuildError
    from envbuild.index.client import ArtifactFinder, same_version
    from envbuild.index.client import Sources as IndexSources

    named = [x for x in (entry.index, *index_urls, *lock.indexes) if x]
    indexes = tuple(dict.fromkeys(named or [PYPI]))
    live = tuple(u for u in indexes if sources.reachable(u))
    if not live:
        sources.skip(indexes[0], entry)
        return None
    events.emit("debug", f"reading the files of {entry.name} {entry.version} on its index")
    try:
        found = ArtifactFinder(IndexSources(index_urls=live)).files(entry.name)
    except (EnvbuildError, OSError, ValueError):
        return None
    if entry.hashes:
        names = [a.filename for a in found if a.sha256 in set(entry.hashes)]
    else:
        names = [
            a.filename
            for a in found
            if entry.version and a.version and same_version(a.version, entry.version)
        ]
    if not names:
        _maybe_on_dead(indexes, live, entry, sources)
    return names or None


def _maybe_on_dead(
    indexes: tuple[str, ...], live: tuple[str, ...], entry: Entry, sources: MetadataSources
) -> None:
    """Nothing of ``entry`` on the indexes that answered: where one did not, it may serve it (a
    PyTorch index's ``+cu128`` builds), so the entry is that index's to answer for, not a fault."""
    dead = [u for u in indexes if u not in live]
    if dead:
        sources.skip(dead[0], entry)
