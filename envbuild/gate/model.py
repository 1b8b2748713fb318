"""The gate's view of any lockfile: entries, the environments a lock can install, and what each
environment installs.

A lock is not one environment. uv.lock forks per platform (``resolution-markers``) and per
conflicting extra or group; poetry.lock, pylock.toml and ``uv pip compile --universal`` output
carry markers. Each format module turns its file into a ``ParsedLock``: a flat list of ``Entry``
and ``members(env)``, which says which entries one concrete ``Environment`` installs: by each
entry's marker, or, for a format that records its edges (uv.lock), along them (its ``LockGraph``,
which also says which entry of a name another entry's edge points at).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from envbuild.gate.markers import InvalidMarker, MarkerCache

Format = Literal["uv.lock", "pylock", "requirements", "poetry.lock", "pixi.lock"]
FORMATS: tuple[str, ...] = get_args(Format)

__all__ = [
    "FORMATS",
    "KNOWN_EXTENSIONS",
    "Entry",
    "EnvList",
    "Environment",
    "Format",
    "Grid",
    "Item",
    "LockGraph",
    "ParsedLock",
    "LockParseError",
    "Members",
    "Reach",
    "UnreadLine",
    "where_words",
]

# Projects that ship compiled torch extensions, the one list of them: one of these without a
# readable claim is listed by --explain (a wheel from PyPI or a source build carries none), and in
# a notice when it is a prebuilt wheel (``unread_tag``); ``provision --lock`` builds their sdists
# against the installed torch (``projectlock.stages``); a conda package of one of these names is
# checked against the pytorch build it pins (``gate.formats.pixi``).
KNOWN_EXTENSIONS = frozenset(
    {
        "flash-attn",
        "flash-attn-3",
        "flash-attn-4",
        "flash-attn-cute",
        "flash-attn-3-nv",
        "mamba-ssm",
        "causal-conv1d",
        "flashinfer-python",
        "xformers",
        "apex",
        "transformer-engine",
        "transformer-engine-torch",
        "deepspeed",
        "vllm-flash-attn",
        "sageattention",
        "sageattn3",
        "torch-scatter",
        "torch-sparse",
        "torch-cluster",
        "torch-spline-conv",
        "pyg-lib",
        "grouped-gemm",
        "deep-gemm",
        "natten",
        "fused-dense-lib",
        "dropout-layer-norm",
        "rotary-emb",
        "qoptim-cuda",
        "bitsandbytes",
        "gptqmodel",
        "auto-gptq",
    }
)


class LockParseError(Exception):
    """The file is not a readable lock of its format (a finding, not a crash)."""


@dataclass(frozen=True)
class UnreadLine:
    """A line of a lock its reader could not take (a requirements line pip would refuse): a finding
    that names it, while the rest of the file is judged."""

    line: int  # 1-based
    text: str
    why: str


@dataclass(frozen=True)
class Entry:
    """One locked distribution, whatever the format (one of several entries of a name in a fork)."""

    key: int  # position in the lock's list
    name: str  # canonical
    version: str | None  # exact pin; None when not pinned exactly
    raw: str = ""  # as written (requirements) or name==version
    line: int | None = None  # 1-based line of the entry in the file
    hashes: tuple[str, ...] = ()  # sha256 hex of its artifacts
    index: str | None = None  # the registry it comes from
    url: str | None = None  # a direct-URL source (a prebuilt wheel from a release page)
    files: tuple[tuple[str, str | None], ...] = ()  # (url or file name, sha256) of its artifacts
    requires: tuple[str, ...] | None = None  # declared requirements (PEP 508); None: not recorded
    dependencies: tuple[str, ...] | None = None  # resolved dependency names; None: not recorded
    via: tuple[str, ...] | None = None  # requirements files: who pulled it in
    marker: str | None = None  # when it applies (requirements, pylock, poetry)

    def label(self) -> str:
        return f"{self.name} {self.version}" if self.version else (self.raw or self.name)


@dataclass(frozen=True)
class Environment:
    """One concrete target: a platform, a Python, the extras/groups chosen."""

    platform: str  # "linux x86_64"
    python: str  # "3.12"
    values: dict[str, str] = field(compare=False, hash=False)
    extras: frozenset[str] = frozenset()  # canonical: real extras and uv pseudo-extras
    groups: frozenset[str] = frozenset()  # dependency groups (PEP 735 / PEP 751)
    # the conflicting extras/groups chosen, in words ("extra cu128")
    selection: tuple[str, ...] = ()
    pythons: tuple[str, ...] = ()  # when merged: every Python this label stands for
    _cache: dict[str, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _answers: dict[int, list[bool]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @property
    def name(self) -> str:
        parts = [self.platform]
        pys = self.pythons or (self.python,)
        if len(pys) > 1 or self.pythons:
            parts.append(_python_words(pys))
        parts += list(self.selection)
        return ", ".join(parts)

    @property
    def system(self) -> str:
        return self.values.get("sys_platform", "")

    def holds(self, marker: str | None, cache: MarkerCache) -> bool:
        """Whether ``marker`` is true here (an empty marker always is); raises InvalidMarker."""
        if not marker:
            return True
        got = self._cache.get(marker)
        if got is None:
            answers = self._answers.setdefault(id(cache), [])
            got = self._cache[marker] = cache.evaluate(
                marker, self.values, self.extras, self.groups, answers
            )
        return got


def _python_words(pys: tuple[str, ...]) -> str:
    """``python 3.9–3.12, 3.14``: runs of consecutive minors as ranges."""
    minors = sorted({int(p.split(".")[1]) for p in pys})
    runs: list[list[int]] = []
    for n in minors:
        if runs and runs[-1][-1] + 1 == n:
            runs[-1].append(n)
        else:
            runs.append([n])
    return "python " + ", ".join(
        f"3.{r[0]}" if len(r) == 1 else f"3.{r[0]}–3.{r[-1]}" for r in runs
    )


def where_words(envs: Iterable[Environment]) -> str:
    """Environments in words, one part per platform and selection with every Python of them
    (``linux x86_64, python 3.8, 3.13; macos arm64, python 3.8``)."""
    merged: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    shown = False
    for env in envs:
        shown = shown or bool(env.pythons)
        merged.setdefault((env.platform, env.selection), []).extend(env.pythons or (env.python,))
    parts = []
    for (platform, selection), pythons in merged.items():
        words = [platform, *([_python_words(tuple(pythons))] if shown else []), *selection]
        parts.append(", ".join(words))
    return "; ".join(parts)


@dataclass
class Members:
    """What one environment installs: the entries, and (uv.lock) which entry each edge names."""

    entries: list[Entry]
    roots: frozenset[int] = frozenset()  # the project's own entries (not installed from an index)
    # resolved for many environments at once: entry key -> dep name -> [(target key, env mask)],
    # this one's bit
    edge_masks: dict[int, dict[str, list[tuple[int, int]]]] | None = None
    bit: int = 0

    def named(self, name: str) -> list[Entry]:
        return [e for e in self.entries if e.name == name]

    def target_of(self, entry: Entry, name: str, all_entries: list[Entry]) -> Entry | None:
        """The entry of ``name`` that ``entry``'s own edge points at here (uv.lock), else None."""
        for target, mask in (self.edge_masks or {}).get(entry.key, {}).get(name, ()):
            if mask & self.bit:
                return all_entries[target]
        return None


@dataclass(frozen=True)
class Item:
    """One member of a conflict set: an extra, a group, or a package's own dependencies (uv's
    ``project`` conflicts), as the pseudo-extras/groups that switch it on."""

    key: str  # unique: uv's pseudo-extra ("extra-7-trainer-cu128"), else "extra:cu128"
    words: str  # "extra cu128", "group dev", "project trainer"
    extras: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    name: str = ""  # the extra/group/package name, canonical (what --extra/--group match)
    kind: str = "extra"  # extra | group | project
    # on in the locker's default install (uv: the project; its default-groups)
    default: bool = False


class Grid(Protocol):
    """Many environments at once, each a bit: what ``Lock.walk`` reads
    (``envbuild.gate.environments.Space``)."""

    def __len__(self) -> int: ...

    @property
    def everything(self) -> int: ...

    def tag_mask(self, tag: str) -> int: ...

    def marker_mask(self, text: str | None, cache: MarkerCache) -> int: ...


class EnvList:
    """A plain list of environments as a ``Grid`` (each marker decided per environment)."""

    def __init__(self, envs: list[Environment]) -> None:
        self.envs = envs

    def __len__(self) -> int:
        return len(self.envs)

    @property
    def everything(self) -> int:
        return (1 << len(self.envs)) - 1

    def tag_mask(self, tag: str) -> int:
        return sum(1 << j for j, env in enumerate(self.envs) if tag in env.extras)

    def marker_mask(self, text: str | None, cache: MarkerCache) -> int:
        if not text:
            return self.everything
        return cache.masks(
            text, self.envs, self.__dict__.setdefault("_atoms", {}).setdefault(id(cache), [])
        )


@dataclass
class Reach:
    """Which environments (bits of a ``Grid``) install each entry, and where each uv.lock edge
    leads."""

    entries: list[Entry]
    key_masks: dict[int, int]
    roots: frozenset[int] = frozenset()
    edge_masks: dict[int, dict[str, list[tuple[int, int]]]] | None = None

    def members(self, j: int) -> Members:
        bit = 1 << j
        return Members(
            [e for e in self.entries if self.key_masks.get(e.key, 0) & bit],
            self.roots,
            self.edge_masks,
            bit,
        )


class LockGraph(Protocol):
    """A lock's own edges between its entries (uv.lock), when the format records them."""

    def walk(self, grid: Grid, markers: MarkerCache) -> Reach:
        """Which of ``grid``'s environments install each entry, along the edges whose marker
        holds."""
        ...

    def reaches(self, item: Item) -> set[str]:
        """The names ``item`` switches on, along every edge whatever its marker."""
        ...


@dataclass
class ParsedLock:
    path: Path
    format: Format
    entries: list[Entry]
    indexes: list[str] = field(default_factory=list)
    # the format's own edges (uv.lock): walked along them; None: by markers
    graph: LockGraph | None = None
    # what the environments are made of
    requires_python: str | None = None
    environments: list[str] = field(default_factory=list)  # markers the lock is limited to
    conflicts: list[list[Item]] = field(default_factory=list)  # each set: at most one item on
    # extras/groups that conflict with nothing: always on
    always_extras: frozenset[str] = frozenset()
    always_groups: frozenset[str] = frozenset()
    # every marker in the file (platform/python hints)
    marker_texts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    markers: MarkerCache = field(default_factory=MarkerCache)
    extra: dict[str, Any] = field(default_factory=dict)
    unread: list[UnreadLine] = field(default_factory=list)  # lines the reader could not take

    def named(self, name: str) -> list[Entry]:
        return [e for e in self.entries if e.name == name]

    def walk(self, grid: Grid) -> Reach:
        """Which of ``grid``'s environments install each entry."""
        if self.graph is not None:
            return self.graph.walk(grid, self.markers)
        masks = {}
        for e in self.entries:
            try:
                masks[e.key] = grid.marker_mask(e.marker, self.markers)
            except InvalidMarker:
                # counted everywhere; the marker is a finding (``broken-marker``)
                masks[e.key] = grid.everything
        return Reach(self.entries, masks)

    def members(self, env: Environment) -> Members:
        return self.members_of([env])[0]

    def members_of(self, envs: list[Environment]) -> list[Members]:
        """What each of ``envs`` installs (one walk for them all)."""
        if not envs:
            return []
        reach = self.walk(EnvList(envs))
        return [reach.members(j) for j in range(len(envs))]
