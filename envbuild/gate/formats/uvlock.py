"""uv.lock (version 1): entries per fork, and what each environment installs, from the lock's edges.

A uv.lock may hold one name several times (a ``version`` + ``source`` per fork or per conflicting
extra/group); an edge that must say which it means carries ``version`` and ``source`` too. So the
installed set of an environment is found the way ``uv sync`` finds it: from the workspace members
(``[manifest] members``, else the ``editable``/``virtual`` entries) along every edge whose marker
holds there, with the members' extras and groups switched on per the environment's choice.
Conflicting extras/groups are uv's pseudo-extras inside markers
(``extra == 'extra-{len(project)}-{project}-{extra}'``, ``'group-…'``).

Three layers, each testable alone:

- the file as frozen tables (``UvLock``, ``UvPackage``, ``UvEdge``, ``UvFile``, ``UvSource``,
  ``UvManifest``, ``UvSupplied``, ``UvConflict``): each ``from_dict`` checks the keys the reader
  uses and names the first value not shaped as uv writes it, with its path;
- the edges resolved to entries (``UvIndex``, ``UvLink``) and walked (``UvGraph``: the
  ``LockGraph`` of ``envbuild.gate.model``);
- ``parse``: the tables and the graph as the gate's ``ParsedLock``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Literal, NamedTuple

from packaging.utils import canonicalize_name

from envbuild.gate.formats._common import entry_lines, sha, toml_loads
from envbuild.gate.markers import InvalidMarker, MarkerCache
from envbuild.gate.model import Entry, Grid, Item, LockParseError, ParsedLock, Reach
from envbuild.gate.project import Project, project_of

__all__ = [
    "UvConflict",
    "UvEdge",
    "UvFile",
    "UvGraph",
    "UvIndex",
    "UvLink",
    "UvLock",
    "UvManifest",
    "UvPackage",
    "UvSource",
    "UvSupplied",
    "parse",
    "pseudo",
]

# a TOML table before it is checked: its values may be anything TOML holds
Table = Mapping[str, object]
ConflictKind = Literal["extra", "group", "project"]

_ROOT_SOURCES = ("editable", "virtual", "directory")
_SOURCE_KEYS = ("registry", "url", "git", "path", "editable", "virtual", "directory")


def pseudo(project: str, name: str, kind: str) -> str:
    """uv's encoding of a conflict item in markers: ``extra-7-trainer-cu128``,
    ``project-7-trainer``."""
    project = canonicalize_name(project)
    if kind == "project":
        return f"project-{len(project)}-{project}"
    return f"{kind}-{len(project)}-{project}-{canonicalize_name(name)}"


# ----------------------------------------------------------------------------- checked getters


def _wrong(key: str, value: object, kind: str, where: str) -> LockParseError:
    return LockParseError(f"{where}: `{key}` is a {type(value).__name__}, where uv writes a {kind}")


def _string(table: Table, key: str, where: str) -> str | None:
    """``table[key]`` (None when absent) when it is a string, else ``LockParseError`` at
    ``where``."""
    value = table.get(key)
    if value is None or isinstance(value, str):
        return value
    raise _wrong(key, value, "string", where)


def _table(table: Table, key: str, where: str) -> Table | None:
    """``table[key]`` (None when absent) when it is a table, else ``LockParseError`` at
    ``where``."""
    value = table.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise _wrong(key, value, "table", where)


def _array(table: Table, key: str, where: str) -> list[object] | None:
    """``table[key]`` (None when absent) when it is an array, else ``LockParseError`` at
    ``where``."""
    value = table.get(key)
    if value is None or isinstance(value, list):
        return value
    raise _wrong(key, value, "array", where)


def _strings(value: object, where: str) -> tuple[str, ...]:
    """``value`` as the array of strings uv writes there, else ``LockParseError`` at ``where``."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise LockParseError(f"{where} is not an array of strings")
    return tuple(value)


# ----------------------------------------------------------------------------- the file's tables


@dataclass(frozen=True, kw_only=True)
class UvSource:
    """A ``source`` table: where an entry comes from (``registry``, ``url``, ``git``, ``path``,
    ``editable``, ``virtual``, ``directory``), or, on an edge, which entry of a name it means."""

    registry: str | None = None
    url: str | None = None
    kinds: frozenset[str] = frozenset()  # the keys written
    # every key and value as text: what tells two entries of a name apart
    identity: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_dict(cls, d: Table, where: str | None = None) -> UvSource:
        """With ``where`` (a package's source) each key uv writes must be a string; an edge's
        source is only compared with the packages' (``identity``)."""
        if where is not None:
            for key in _SOURCE_KEYS:
                _string(d, key, where)
        registry, url = d.get("registry"), d.get("url")
        return cls(
            registry=registry if isinstance(registry, str) else None,
            url=url if isinstance(url, str) else None,
            kinds=frozenset(d),
            identity=tuple(sorted((str(k), str(v)) for k, v in d.items())),
        )

    @property
    def is_project(self) -> bool:
        """A tree of the workspace (editable, virtual, a directory), not a file from somewhere."""
        return any(k in self.kinds for k in _ROOT_SOURCES)


@dataclass(frozen=True, kw_only=True)
class UvFile:
    """One item of ``wheels``, or the ``sdist``: where the file is, and its hash."""

    url: str | None = None
    filename: str | None = None
    path: str | None = None
    hash: str | None = None

    @classmethod
    def from_dict(cls, d: Table, where: str) -> UvFile:
        return cls(
            url=_string(d, "url", where),
            filename=_string(d, "filename", where),
            path=_string(d, "path", where),
            hash=_string(d, "hash", where),
        )

    @property
    def sha256(self) -> str | None:
        return sha(self.hash)


@dataclass(frozen=True, kw_only=True)
class UvEdge:
    """One item of ``dependencies`` (or of an extra's or a group's): a name and, where the name
    alone is ambiguous (one name locked per fork), the ``version`` and ``source`` of the entry."""

    name: str  # as written
    version: str | None = None
    source: UvSource | None = None
    marker: str | None = None
    extra: tuple[str, ...] = ()  # the target's extras it switches on, as written

    @classmethod
    def from_dict(cls, d: Table, package: str, array: str) -> UvEdge | None:
        """The edge in ``package``'s ``array``; None for one without a name (skipped, as uv writes
        none)."""
        where = f"{package}: an edge in `{array}`"
        name, version = _string(d, "name", where), _string(d, "version", where)
        source, marker = _table(d, "source", where), _string(d, "marker", where)
        extra = _array(d, "extra", where)
        extras = _strings(
            extra if extra is not None else [], f"{package}: `extra` of an edge in `{array}`"
        )
        if name is None:
            return None
        return cls(
            name=name,
            version=version,
            source=UvSource.from_dict(source) if source is not None else None,
            marker=marker,
            extra=extras,
        )

    @property
    def pinned(self) -> bool:
        """Whether it says which entry of its name it means."""
        return self.version is not None or self.source is not None


def _edges(items: object, package: str, array: str) -> tuple[UvEdge, ...]:
    if not isinstance(items, list):
        raise LockParseError(f"{package}: `{array}` is not an array of tables")
    out: list[UvEdge] = []
    for d in items:
        if not isinstance(d, dict):
            raise LockParseError(f"{package}: `{array}` holds a value that is not a table")
        edge = UvEdge.from_dict(d, package, array)
        if edge is not None:
            out.append(edge)
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class UvPackage:
    """One ``[[package]]``: an entry of the lock (a name may have several, one per fork)."""

    name: str  # as written
    version: str | None = None
    source: UvSource = UvSource()
    dependencies: tuple[UvEdge, ...] = ()
    # extra (as written) -> edges
    optional_dependencies: Mapping[str, tuple[UvEdge, ...]] = field(default_factory=dict)
    # group (as written) -> edges
    dev_dependencies: Mapping[str, tuple[UvEdge, ...]] = field(default_factory=dict)
    wheels: tuple[UvFile, ...] = ()
    sdist: UvFile | None = None
    # ``metadata.requires-dist`` as PEP 508; None: not recorded
    requires_dist: tuple[str, ...] | None = None
    resolution_markers: tuple[str, ...] = ()  # the forks it is locked for

    @classmethod
    def from_dict(cls, d: Table, i: int) -> UvPackage:
        """``package[i]``; every error names it (with its name when it has one)."""
        written = d.get("name")
        where = f"package[{i}]" + (f" ({written})" if isinstance(written, str) else "")
        name, version, source = (
            _string(d, "name", where),
            _string(d, "version", where),
            _table(d, "source", where),
        )
        deps = _array(d, "dependencies", where)
        optional, dev = (
            _table(d, "optional-dependencies", where),
            _table(d, "dev-dependencies", where),
        )
        wheels, sdist = _array(d, "wheels", where), _table(d, "sdist", where)
        metadata, forks = _table(d, "metadata", where), _array(d, "resolution-markers", where)
        if name is None:
            raise LockParseError(f"{where} has no name")
        resolution_markers = _strings(
            forks if forks is not None else [], f"{where}: `resolution-markers`"
        )
        dependencies = _edges(deps if deps is not None else [], where, "dependencies")
        extras = {
            k: _edges(v, where, f"optional-dependencies.{k}") for k, v in (optional or {}).items()
        }
        groups = {k: _edges(v, where, f"dev-dependencies.{k}") for k, v in (dev or {}).items()}
        files = []
        for w in wheels or []:
            if not isinstance(w, dict):
                raise LockParseError(f"{where}: `wheels` holds a value that is not a table")
            files.append(UvFile.from_dict(w, f"{where}: a wheel"))
        sdist_file = UvFile.from_dict(sdist if sdist is not None else {}, f"{where}: `sdist`")
        origin = UvSource.from_dict(source if source is not None else {}, f"{where}: `source`")
        return cls(
            name=name,
            version=version,
            source=origin,
            dependencies=dependencies,
            optional_dependencies=extras,
            dev_dependencies=groups,
            wheels=tuple(files),
            sdist=sdist_file if sdist is not None else None,
            requires_dist=_requires_dist(metadata or {}, where),
            resolution_markers=resolution_markers,
        )

    @property
    def files(self) -> list[tuple[str, str | None]]:
        """(url or file name or path, sha256) of each wheel, then of the sdist."""
        out = [(w.url or w.filename or w.path or "", w.sha256) for w in self.wheels]
        if self.sdist is not None:
            out.append((self.sdist.url or self.sdist.path or "", self.sdist.sha256))
        return out

    def entry(self, key: int, line: int | None) -> Entry:
        files = self.files
        return Entry(
            key=key,
            name=canonicalize_name(self.name),
            version=self.version,
            raw=f"{self.name}=={self.version}" if self.version is not None else self.name,
            line=line,
            hashes=tuple(h for _, h in files if h),
            index=self.source.registry,
            url=self.source.url,
            files=tuple((u, h) for u, h in files if u),
            requires=self.requires_dist,
            dependencies=tuple(canonicalize_name(d.name) for d in self.dependencies),
        )


def _requires_dist(metadata: Table, where: str) -> tuple[str, ...] | None:
    """``metadata.requires-dist`` (tables of ``name``, ``specifier``, ``marker``) as PEP 508
    strings."""
    requires = metadata.get("requires-dist")
    if requires is None:
        return None
    if not isinstance(requires, list):
        raise LockParseError(f"{where}: `metadata.requires-dist` is not an array")
    out = []
    for r in requires:
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            out.append(
                f"{r['name']}{r.get('specifier', '')}"
                + (f"; {r['marker']}" if r.get("marker") else "")
            )
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class UvSupplied:
    """A ``[[manifest.dependency-metadata]]`` item: requirements a project supplied by hand for a
    package whose own metadata is unusable (flash-attn, mamba-ssm): what uv resolved with."""

    name: str  # as written
    version: str | None = None
    requires_dist: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: object, i: int) -> UvSupplied | None:
        """None for an item without a name (not read)."""
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            return None
        requires = _array(d, "requires-dist", f"`manifest.dependency-metadata[{i}]`")
        version = d.get("version")
        return cls(
            name=d["name"],
            version=str(version) if version is not None else None,
            requires_dist=tuple(r for r in requires or [] if isinstance(r, str)),
        )


@dataclass(frozen=True, kw_only=True)
class UvManifest:
    """``[manifest]``: the workspace members, and requirements supplied by hand."""

    members: tuple[str, ...] = ()
    dependency_metadata: tuple[UvSupplied, ...] = ()

    @classmethod
    def from_dict(cls, d: Table) -> UvManifest:
        members = _strings(d.get("members", []), "`manifest.members`")
        supplied = d.get("dependency-metadata", [])
        if not isinstance(supplied, list):
            raise LockParseError("`manifest.dependency-metadata` is not an array of tables")
        return cls(
            members=members,
            dependency_metadata=tuple(
                s for i, x in enumerate(supplied) if (s := UvSupplied.from_dict(x, i))
            ),
        )


@dataclass(frozen=True, kw_only=True)
class UvConflict:
    """One item of a ``conflicts`` set: an ``extra`` or a ``group`` of ``package`` (the project
    when not written), or, with neither, ``package``'s own dependencies."""

    package: str | None = None
    extra: str | None = None
    group: str | None = None

    @classmethod
    def from_dict(cls, d: Table, i: int) -> UvConflict:
        got: dict[str, str] = {}
        for key in ("package", "extra", "group"):
            value = d.get(key)
            if value is not None and not isinstance(value, str):
                raise LockParseError(f"`conflicts[{i}]`: `{key}` is not a string")
            if value is not None:
                got[key] = value
        return cls(package=got.get("package"), extra=got.get("extra"), group=got.get("group"))

    @property
    def kind(self) -> ConflictKind:
        return (
            "extra" if self.extra is not None else "group" if self.group is not None else "project"
        )


@dataclass(frozen=True, kw_only=True)
class UvLock:
    """A uv.lock as uv writes it, checked: what the gate reads of it, nothing more."""

    requires_python: str | None = None
    resolution_markers: tuple[str, ...] = ()
    supported_markers: tuple[str, ...] = ()
    conflicts: tuple[tuple[UvConflict, ...], ...] = ()
    manifest: UvManifest = UvManifest()
    packages: tuple[UvPackage, ...] = ()

    @classmethod
    def from_dict(cls, d: Table) -> UvLock:
        """The lock, or ``LockParseError`` naming the first value not shaped as uv writes it."""
        where = "the lock"
        requires_python = _string(d, "requires-python", where)
        resolution, supported = (
            _array(d, "resolution-markers", where),
            _array(d, "supported-markers", where),
        )
        conflicts, manifest, packages = (
            _array(d, "conflicts", where),
            _table(d, "manifest", where),
            _array(d, "package", where),
        )
        resolution_markers = _strings(
            resolution if resolution is not None else [], "`resolution-markers`"
        )
        supported_markers = _strings(
            supported if supported is not None else [], "`supported-markers`"
        )
        sets = []
        for i, group in enumerate(conflicts or []):
            if not isinstance(group, list) or not all(isinstance(x, dict) for x in group):
                raise LockParseError(f"`conflicts[{i}]` is not an array of tables")
            sets.append(tuple(UvConflict.from_dict(x, i) for x in group))
        man = UvManifest.from_dict(manifest if manifest is not None else {})
        pkgs = []
        for i, p in enumerate(packages or []):
            if not isinstance(p, dict):
                raise LockParseError(f"package[{i}] is not a table")
            pkgs.append(UvPackage.from_dict(p, i))
        return cls(
            requires_python=requires_python,
            resolution_markers=resolution_markers,
            supported_markers=supported_markers,
            conflicts=tuple(sets),
            manifest=man,
            packages=tuple(pkgs),
        )


def _shape(data: Table) -> UvLock:
    """The file read as ``UvLock``, or ``LockParseError`` naming the first value not shaped as uv
    writes it: past this the reader trusts the types, and any other exception it raises is a bug
    of envbuild's (an internal error, not a finding)."""
    return UvLock.from_dict(data)


# ----------------------------------------------------------------------------- the graph


class UvLink(NamedTuple):
    """An edge resolved: the entries it may lead to (several where its name alone is ambiguous:
    the fork decides), where it holds, and the extras of the target it switches on."""

    targets: tuple[int, ...]
    marker: str | None
    extras: frozenset[str]


class UvIndex:
    """The entries of a lock by name, and by name + version + source: which entry an edge means."""

    def __init__(self, entries: Sequence[Entry], sources: Sequence[UvSource]) -> None:
        self.entries = entries
        self.by_name: dict[str, list[int]] = {}
        self.by_exact: dict[tuple[str, str, tuple[tuple[str, str], ...]], int] = {}
        for e, source in zip(entries, sources, strict=True):
            self.by_name.setdefault(e.name, []).append(e.key)
            self.by_exact[(e.name, e.version or "", source.identity)] = e.key

    def targets(self, edge: UvEdge) -> tuple[int, ...]:
        """The entry the edge's version and source name, else every entry of its name (of its
        version)."""
        name = canonicalize_name(edge.name)
        if not edge.pinned:
            return tuple(self.by_name.get(name, []))
        hit = self.by_exact.get(
            (name, edge.version or "", edge.source.identity if edge.source else ())
        )
        if hit is not None:
            return (hit,)
        return tuple(
            k
            for k in self.by_name.get(name, [])
            if edge.version is None or self.entries[k].version == edge.version
        )

    def link(self, edge: UvEdge) -> UvLink:
        return UvLink(
            self.targets(edge),
            edge.marker or None,
            frozenset(canonicalize_name(x) for x in edge.extra),
        )

    def links(self, edges: Iterable[UvEdge]) -> tuple[UvLink, ...]:
        return tuple(self.link(e) for e in edges)


class _GridMasks:
    """One walk's masks of a grid: each marker and each tag decided once."""

    def __init__(self, grid: Grid, markers: MarkerCache) -> None:
        self.grid, self.markers = grid, markers
        self.everywhere = grid.everything
        self._markers: dict[str, int] = {}
        self._tags: dict[str, int] = {}

    def marker(self, text: str | None) -> int:
        if not text:
            return self.everywhere
        got = self._markers.get(text)
        if got is None:
            try:
                got = self.grid.marker_mask(text, self.markers) & self.everywhere
            except InvalidMarker:
                # followed everywhere; the marker is a finding (``broken-marker``)
                got = self.everywhere
            self._markers[text] = got
        return got

    def tag(self, tag: str) -> int:
        got = self._tags.get(tag)
        if got is None:
            got = self._tags[tag] = self.grid.tag_mask(tag) & self.everywhere
        return got


_Node = tuple[int, frozenset[str]]  # an entry with the extras switched on for it


@dataclass(frozen=True)
class UvGraph:
    """The lock's edges resolved to its entries, per entry: its own (``plain``), per extra
    (``optional``) and per group (``dev``); and where the walk starts (``roots``)."""

    entries: list[Entry]
    roots: tuple[int, ...]
    plain: tuple[tuple[UvLink, ...], ...]
    optional: tuple[dict[str, tuple[UvLink, ...]], ...]  # canonical extra -> links
    dev: tuple[dict[str, tuple[UvLink, ...]], ...]  # canonical group -> links
    # entry -> its resolution markers
    forks: dict[int, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, lock: UvLock, entries: list[Entry]) -> UvGraph:
        index = UvIndex(entries, [p.source for p in lock.packages])
        plain = tuple(index.links(p.dependencies) for p in lock.packages)
        optional: tuple[dict[str, tuple[UvLink, ...]], ...] = tuple(
            {canonicalize_name(k): index.links(v) for k, v in p.optional_dependencies.items()}
            for p in lock.packages
        )
        dev: tuple[dict[str, tuple[UvLink, ...]], ...] = tuple(
            {canonicalize_name(k): index.links(v) for k, v in p.dev_dependencies.items()}
            for p in lock.packages
        )
        forks = {
            k: p.resolution_markers for k, p in enumerate(lock.packages) if p.resolution_markers
        }
        return cls(entries, _roots(lock, entries, plain), plain, optional, dev, forks)

    def through_extras(self, k: int) -> list[str]:
        """The names entry ``k``'s edges reach through the extras they switch on (and those
        entries' own extras edges, in turn): torch 2.11's ``cuda-toolkit[cublas, cudart, ...]``
        makes nvidia-cublas, nvidia-cuda-runtime and the rest torch's runtime, as installing
        torch makes them."""
        out: list[str] = []
        seen: set[_Node] = set()
        todo = [(t, x) for targets, _, x in self.plain[k] if x for t in targets]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            t, extras = node
            for targets, _, more in (link for x in extras for link in self.optional[t].get(x, ())):
                out += [self.entries[n].name for n in targets]
                todo += [(n, more) for n in targets if more]
        return out

    @cached_property
    def root_set(self) -> frozenset[int]:
        return frozenset(self.roots)

    def walk(self, grid: Grid, markers: MarkerCache) -> Reach:
        """Every environment in one walk: each node carries the bit mask of the environments that
        reach it, and an edge passes on the bits where its marker holds."""
        masks = _GridMasks(grid, markers)
        everywhere = masks.everywhere
        fork_mask = {k: _any(masks.marker(m) for m in ms) for k, ms in self.forks.items()}
        reach: dict[_Node, int] = {}
        edge_masks: dict[int, dict[str, list[tuple[int, int]]]] = {}
        work: list[tuple[_Node, int]] = []
        for k in self.roots:
            reach[(k, frozenset())] = everywhere
            work.append(((k, frozenset()), everywhere))
        while work:
            (key, extras), delta = work.pop()
            for links, bits in self.out_of(key, extras, delta, masks):
                for targets, marker, dep_extras in links:
                    m = bits & masks.marker(marker)
                    if not m:
                        continue
                    for t, mt in _split(targets, m, fork_mask, everywhere):
                        if not mt:
                            continue
                        slots = edge_masks.setdefault(key, {}).setdefault(self.entries[t].name, [])
                        for i, (tk, old) in enumerate(slots):
                            if tk == t:
                                slots[i] = (t, old | mt)
                                break
                        else:
                            slots.append((t, mt))
                        node = (t, dep_extras)
                        new = mt & ~reach.get(node, 0)
                        if new:
                            reach[node] = reach.get(node, 0) | new
                            work.append((node, new))
        by_key: dict[int, int] = {}
        for (k, _), bits in reach.items():
            by_key[k] = by_key.get(k, 0) | bits
        return Reach(self.entries, by_key, self.root_set, edge_masks)

    def out_of(
        self, key: int, extras: frozenset[str], delta: int, masks: _GridMasks
    ) -> Iterator[tuple[tuple[UvLink, ...], int]]:
        """The links leaving entry ``key`` with ``extras`` on, each list with the environments (of
        ``delta``) where it is followed: a workspace member's extras and groups where chosen."""
        yield self.plain[key], delta
        for x in extras:
            yield self.optional[key].get(x, ()), delta
        if key in self.root_set:
            project = self.entries[key].name
            for x, links in self.optional[key].items():
                if bits := delta & masks.tag(pseudo(project, x, "extra")):
                    yield links, bits
            for g, links in self.dev[key].items():
                if bits := delta & masks.tag(pseudo(project, g, "group")):
                    yield links, bits

    def reaches(self, item: Item) -> set[str]:
        """Every name the item's own edges lead to, along every edge whatever its marker."""
        start: list[UvLink] = []
        for k in self.roots:
            project = self.entries[k].name
            start += [
                link
                for x, v in self.optional[k].items()
                if pseudo(project, x, "extra") in item.extras
                for link in v
            ]
            start += [
                link
                for g, v in self.dev[k].items()
                if pseudo(project, g, "group") in item.extras
                for link in v
            ]
            if item.kind == "project" and pseudo(project, "", "project") in item.extras:
                start += self.plain[k]
        seen: set[_Node] = set()
        todo = [(t, x) for targets, _, x in start for t in targets]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            k, extras = node
            nxt = list(self.plain[k]) + [e for x in extras for e in self.optional[k].get(x, ())]
            todo += [(t, x) for targets, _, x in nxt for t in targets]
        return {self.entries[k].name for k, _ in seen}

    def implies(self) -> dict[str, frozenset[str]]:
        """What an extra/group of a workspace member switches on through its edges' extras (a root
        extra ``cu128 = ["cosmos-oss[cu128-torch27]"]``): the environments follow it, as uv does."""
        out: dict[str, set[str]] = {}
        for k in self.roots:
            project = self.entries[k].name
            for kind, table in (("extra", self.optional[k]), ("group", self.dev[k])):
                for name, links in table.items():
                    for targets, _, extras in links:
                        for t in targets:
                            for x in extras:
                                out.setdefault(pseudo(project, name, kind), set()).add(
                                    pseudo(self.entries[t].name, x, "extra")
                                )
        return {tag: frozenset(v) for tag, v in out.items()}


def _roots(
    lock: UvLock, entries: list[Entry], plain: Sequence[Sequence[UvLink]]
) -> tuple[int, ...]:
    """Where ``uv sync`` starts: the workspace members' own trees (every such tree when no member
    is recorded), else everything nothing depends on."""
    members = {canonicalize_name(m) for m in lock.manifest.members}
    roots = [
        e.key
        for e, p in zip(entries, lock.packages, strict=True)
        if (e.name in members or not members) and p.source.is_project
    ]
    if not roots:
        pointed = {k for links in plain for link in links for k in link.targets}
        roots = [e.key for e in entries if e.key not in pointed]
    return tuple(roots)


def _split(
    targets: tuple[int, ...], bits: int, fork_mask: Mapping[int, int], everywhere: int
) -> list[tuple[int, int]]:
    """Where an edge that names several entries leads: to each the environments of its fork;
    the environments no fork claims, to them all."""
    if len(targets) <= 1:
        return [(t, bits) for t in targets]
    parts, assigned = [], 0
    for t in targets:
        mt = bits & fork_mask.get(t, everywhere)
        assigned |= mt
        parts.append((t, mt))
    left = bits & ~assigned
    return [(t, mt | left) for t, mt in parts]


def _any(masks: Iterable[int]) -> int:
    bits = 0
    for m in masks:
        bits |= m
    return bits


# ----------------------------------------------------------------------------- the gate's view


def parse(path: Path, text: str, project: Project | None = None) -> ParsedLock:
    """The lock at ``path`` (``text``) as the gate reads it; ``LockParseError`` names the first bad
    field. ``project``: the project beside it (its default groups; by default the one in the lock's
    folder)."""
    lock = _shape(toml_loads(text))
    headers = entry_lines(text.splitlines(), "[[package]]")
    entries = [
        p.entry(i, headers[i] if i < len(headers) else None) for i, p in enumerate(lock.packages)
    ]
    graph = UvGraph.of(lock, entries)
    for k, e in enumerate(entries):  # the graph's list: its walks see the names added
        more = [
            n for n in dict.fromkeys(graph.through_extras(k)) if n not in (e.dependencies or ())
        ]
        if more:
            entries[k] = replace(e, dependencies=(*(e.dependencies or ()), *more))
    marker_texts = [*lock.resolution_markers, *lock.supported_markers]
    marker_texts += [m for p in lock.packages for m in p.resolution_markers]
    owners: dict[str, int] = {}
    for marker, owner in _edge_markers(lock):
        marker_texts.append(marker)
        owners.setdefault(marker, owner)
    supplied = {
        (canonicalize_name(s.name), s.version): s.requires_dist
        for s in lock.manifest.dependency_metadata
    }
    sets, always = conflict_items(lock, graph, _default_groups(project or Project(path.parent)))
    return ParsedLock(
        path,
        "uv.lock",
        entries,
        sorted({e.index for e in entries if e.index}),
        graph=graph,
        requires_python=lock.requires_python,
        environments=list(lock.supported_markers),
        conflicts=sets,
        always_extras=always,
        marker_texts=marker_texts,
        extra={
            "marker_owner": owners,
            "supplied_requires": supplied,
            "implies": graph.implies(),
            SOURCES: {i: dict(p.source.identity) for i, p in enumerate(lock.packages)},
        },
    )


SOURCES = "sources"  # ParsedLock.extra: {entry key: its ``source`` table, every value as text}


def sources_of(lock: ParsedLock) -> Mapping[int, Mapping[str, str]]:
    """Each entry's ``source`` table (``editable``, ``virtual``, ``directory``, ``path``, ``git``,
    ``registry``, ``url``) by entry key, as the typed reader read it; {} for another format."""
    got = lock.extra.get(SOURCES) if lock.format == "uv.lock" else None
    return got if isinstance(got, dict) else {}


def _edge_markers(lock: UvLock) -> Iterator[tuple[str, int]]:
    """Every edge's marker with the entry it leaves, in the file's order."""
    for owner, p in enumerate(lock.packages):
        for edges in (
            p.dependencies,
            *p.optional_dependencies.values(),
            *p.dev_dependencies.values(),
        ):
            for edge in edges:
                if edge.marker:
                    yield edge.marker, owner


def conflict_items(
    lock: UvLock, graph: UvGraph, defaults: bool | tuple[str, ...]
) -> tuple[list[list[Item]], frozenset[str]]:
    """uv's ``conflicts`` as items of conflict sets, and the pseudo-extras always on (every other
    extra/group of a member, and its own dependencies).

    An item is an extra, a group, or a package's own dependencies (``{ package = "x" }``, uv's
    ``project-N-x`` pseudo-extra, on whenever that package is installed). The locker's default
    switches on the projects and their default groups (``defaults``: True for all)."""
    conflicting: set[str] = set()
    root_names = [graph.entries[k].name for k in graph.roots]
    sets: list[list[Item]] = []
    for group in lock.conflicts:
        items = []
        for c in group:
            project: str = canonicalize_name(c.package or (root_names[0] if root_names else ""))
            kind = c.kind
            name = (
                canonicalize_name(c.extra if c.extra is not None else c.group or "")
                if kind != "project"
                else project
            )
            tag = pseudo(project, name if kind != "project" else "", kind)
            conflicting.add(tag)
            if kind == "project":
                words = f"project {project}"
            else:
                words = (
                    f"{kind} {name}" if len(set(root_names)) <= 1 else f"{kind} {project}[{name}]"
                )
            default = kind == "project" or (
                kind == "group" and (defaults is True or name in (defaults or ()))
            )
            items.append(
                Item(
                    tag,
                    words,
                    frozenset({tag}),
                    frozenset({name} if kind == "group" else ()),
                    name=name,
                    kind=kind,
                    default=default,
                )
            )
        if items:
            sets.append(items)
    always: set[str] = set()
    for k in graph.roots:
        project = graph.entries[k].name
        always |= {
            t for x in graph.optional[k] if (t := pseudo(project, x, "extra")) not in conflicting
        }
        always |= {t for g in graph.dev[k] if (t := pseudo(project, g, "group")) not in conflicting}
        if (t := pseudo(project, "", "project")) not in conflicting:
            always.add(t)
    return sets, frozenset(always)


def _default_groups(project: Project | Path) -> bool | tuple[str, ...]:
    """``[tool.uv] default-groups`` of the project (or of the one beside the lock at a path; True:
    "all"); uv's ``dev`` without one."""
    got = project_of(project).tool_uv.get("default-groups")
    if got == "all":
        return True
    if isinstance(got, list):
        return tuple(canonicalize_name(str(g)) for g in got)
    return ("dev",)
