"""The concrete environments a lock can install: platform x Python x a selection (of extras/groups
that the lock's conflicts allow, as the locker itself reads them; of a pixi.lock, one of its
environments).

- Platforms: Linux x86_64/aarch64, macOS arm64/x86_64, Windows AMD64. A lock whose markers never
  mention a platform (``pip-compile`` and ``pip lock`` output: one machine's resolution) is judged
  for Linux x86_64 only, and the report says so.
- Pythons: every minor the lock allows, each its own (``gate.pythons``).
- Selections: the lock's conflict sets name *items* (uv: an extra, a group, or a package's own
  dependencies, each one of uv's pseudo-extras ``extra-7-trainer-cu128`` / ``group-…`` /
  ``project-…``). A selection is a set of items with at most one member of every conflict set
  active, exactly the rule ``uv sync``/``uv export`` enforce ("incompatible with the declared
  conflicts"); items that conflict with nothing are always on. The selections are the independent
  sets of the conflict hypergraph, enumerated by backtracking over the items, never as the product
  of the sets (17 overlapping sets over 7 extras are 13 selections, not 3^17). The locker's default
  (uv: the project itself and its ``default-groups``) is one of them and is labelled so.
- At scale, items that can change nothing the rules read (no marker of the lock names them and
  what they switch on reaches no torch, extension or torch dependent) are left out of the
  enumeration and named in a note: every verdict holds whatever is chosen for them.

Environments are not materialised one by one: a ``Space`` is the grid platform x Python x
selection, and a marker's truth over all of it is one bit mask (``Space.atom_mask``): an atom on
an extra/group is a mask over selections repeated per platform-Python block, an atom on the
platform or Python is whole blocks. The formats walk their dependency graph once over those masks
(``Lock.walk``); ``envbuild.gate.check`` then groups the environments that install the same torch,
extensions and torch dependents, and judges each group once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError
from envbuild.gate.markers import InvalidMarker, MarkerCache, _decide
from envbuild.gate.model import Environment, Item, ParsedLock
from envbuild.gate.pythons import pythons_of

__all__ = [
    "NO_CHOICE",
    "PLATFORMS",
    "Narrow",
    "Space",
    "covers",
    "enumerate_environments",
    "make_space",
]

NO_CHOICE = "no conflicting extra"
DEFAULT = "default"
FULL_ENUMERATION = 4096  # valid selections enumerated in full; beyond, the inert items are left out
MAX_SELECTIONS = 1 << 16  # a hard bound on what is judged (a notice says when it is reached)

PLATFORMS: dict[str, tuple[str, dict[str, str]]] = {
    "linux-x86_64": (
        "linux x86_64",
        {
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": "x86_64",
            "os_name": "posix",
        },
    ),
    "linux-aarch64": (
        "linux aarch64",
        {
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": "aarch64",
            "os_name": "posix",
        },
    ),
    "macos-arm64": (
        "macos arm64",
        {
            "sys_platform": "darwin",
            "platform_system": "Darwin",
            "platform_machine": "arm64",
            "os_name": "posix",
        },
    ),
    "macos-x86_64": (
        "macos x86_64",
        {
            "sys_platform": "darwin",
            "platform_system": "Darwin",
            "platform_machine": "x86_64",
            "os_name": "posix",
        },
    ),
    "windows-amd64": (
        "windows amd64",
        {
            "sys_platform": "win32",
            "platform_system": "Windows",
            "platform_machine": "AMD64",
            "os_name": "nt",
        },
    ),
}
_PLATFORM_KEYS = re.compile(
    r"\b(sys_platform|platform_system|platform_machine|os_name|platform_release)\b"
)


@dataclass(frozen=True)
class Narrow:
    """``--environment`` (markers or platform shorthands), ``--python``, ``--extra``,
    ``--group``."""

    environment: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    group: tuple[str, ...] = ()
    default_python: str = "3.12"  # when the lock says nothing about Python
    extra: tuple[str, ...] = ()
    _markers: MarkerCache = field(default_factory=MarkerCache, compare=False)

    def validate(self) -> None:
        for text in self.environment:
            if _shorthand(text) is None:
                try:
                    self._markers.tree(text)
                except InvalidMarker as exc:
                    raise ConfigError(
                        f"--environment {text!r} is neither a platform ({', '.join(PLATFORMS)}, "
                        f"linux, macos, windows) nor a valid PEP 508 marker: {exc}"
                    ) from exc
        for py in self.python:
            if not re.fullmatch(r"3\.\d{1,2}", py):
                raise ConfigError(f"--python {py!r}: give a Python minor version such as 3.12")


def _shorthand(text: str) -> list[str] | None:
    key = (
        re.sub(r"[ _]", "-", text.strip().lower())
        .replace("darwin", "macos")
        .replace("win32", "windows")
    )
    key = key.replace("x86-64", "x86_64")
    hits = [k for k in PLATFORMS if k == key or k.split("-")[0] == key]
    return hits or None


def _values(platform: dict[str, str], python: str) -> dict[str, str]:
    return {
        **platform,
        "python_version": python,
        "python_full_version": python + ".0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "implementation_version": python + ".0",
        "platform_release": "",
        "platform_version": "",
    }


# ----------------------------------------------------------------------------- selections


def _items(lock: ParsedLock) -> tuple[list[Item], list[int]]:
    """The lock's conflicting items (deduplicated by key) and each conflict set as a bit mask of
    them."""
    index: dict[str, int] = {}
    items: list[Item] = []
    sets: list[int] = []
    for conflict in lock.conflicts:
        bits = 0
        for item in conflict:
            i = index.get(item.key)
            if i is None:
                i = index[item.key] = len(items)
                items.append(item)
            bits |= 1 << i
        if bits & (bits - 1):  # a set of one item forbids nothing
            sets.append(bits)
    return items, sets


def _independent_sets(n: int, sets: list[int], allowed: int, limit: int) -> list[int] | None:
    """Every subset of the ``allowed`` items (bit masks over ``n``) with at most one member of each
    conflict set, smallest first; None when there are more than ``limit``."""
    clash = [0] * n
    for s in sets:
        for i in range(n):
            if s >> i & 1:
                clash[i] |= s & ~(1 << i)
    order = [i for i in range(n) if allowed >> i & 1]
    out: list[int] = []
    stack: list[tuple[int, int]] = [(0, 0)]
    while stack:
        pos, chosen = stack.pop()
        if pos == len(order):
            out.append(chosen)
            if len(out) > limit:
                return None
            continue
        i = order[pos]
        stack.append((pos + 1, chosen))
        if not clash[i] & chosen:
            stack.append((pos + 1, chosen | 1 << i))
    out.sort(key=lambda m: (m.bit_count(), m))
    return out


def _inert(lock: ParsedLock, items: list[Item], judged: set[str] | None) -> int:
    """Items that can change nothing the rules read: no marker of the lock names their pseudo-extra,
    and what they switch on reaches (along every edge, whatever its marker) none of the ``judged``
    names. Leaving them out of the enumeration changes no verdict."""
    graph = lock.graph
    if judged is None or graph is None:
        return 0
    texts = "\n".join(dict.fromkeys(lock.marker_texts))
    bits = 0
    for i, item in enumerate(items):
        tags = set(item.extras) | set(item.groups)
        if any(f"'{t}'" in texts or f'"{t}"' in texts for t in tags):
            continue
        if graph.reaches(item) & judged:
            continue
        bits |= 1 << i
    return bits


def selection_words(items: list[Item], chosen: int, default: int | None) -> str:
    if default is not None and chosen == default:
        return DEFAULT if not chosen else f"{DEFAULT} ({' + '.join(_words(items, chosen))})"
    if not chosen:
        return NO_CHOICE
    return " + ".join(_words(items, chosen))


def _words(items: list[Item], chosen: int) -> list[str]:
    return [it.words for i, it in enumerate(items) if chosen >> i & 1]


# ----------------------------------------------------------------------------- the grid


@dataclass
class Space:
    """The environments platform x Python x selection, indexed ``j = block * n_sel + s`` where a
    block is one (platform, Python); ``active`` holds the ones the lock covers and the narrowing
    keeps.
    """

    lock: ParsedLock
    blocks: list[tuple[str, str]]  # (platform key, python)
    items: list[Item]
    selections: list[int]  # bit masks over items
    default: int | None  # the locker's default selection (a mask), when it is a valid one
    inert: int = 0  # items left out of the enumeration (bit mask over items)
    notes: list[str] = field(default_factory=list)
    active: int = 0
    # per item, the items it switches on through others (``_implied``); the conflict sets as masks
    implied: list[int] = field(default_factory=list)
    sets: list[int] = field(default_factory=list)
    _sel_masks: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    _atoms: dict[tuple[str, str, str, bool], int] = field(default_factory=dict, repr=False)
    _envs: dict[int, Environment] = field(default_factory=dict, repr=False)

    @property
    def n_sel(self) -> int:
        return len(self.selections)

    @property
    def pythons(self) -> list[str]:
        """The Pythons of every platform, in order (blocks run platform by platform)."""
        return list(dict.fromkeys(py for _, py in self.blocks))

    @property
    def choice_words(self) -> str:
        """What a selection is called in this lock's words."""
        return choice_words(self.lock)

    def __len__(self) -> int:
        return len(self.blocks) * len(self.selections)

    @property
    def everything(self) -> int:
        return (1 << len(self)) - 1

    @property
    def _all_sel(self) -> int:
        return (1 << self.n_sel) - 1

    def _repeat(self, sel_mask: int) -> int:
        """A mask over selections, the same in every block."""
        out = 0
        for b in range(len(self.blocks)):
            out |= sel_mask << (b * self.n_sel)
        return out

    def block_mask(self, b: int) -> int:
        return self._all_sel << (b * self.n_sel)

    def _tag_sel(self, kind: str, tag: str) -> int:
        """Selections where the pseudo-extra (``kind`` extra) or group ``tag`` is on."""
        key = (kind, tag)
        got = self._sel_masks.get(key)
        if got is None:
            always = self.lock.always_extras if kind == "extra" else self.lock.always_groups
            if tag in always:
                got = self._all_sel
            else:
                holders = 0
                for i, it in enumerate(self.items):
                    if tag in (it.extras if kind == "extra" else it.groups):
                        holders |= 1 << i
                got = 0
                if holders:
                    for s, chosen in enumerate(self.selections):
                        if chosen & holders:
                            got |= 1 << s
            self._sel_masks[key] = got
        return got

    def tag_mask(self, tag: str) -> int:
        """Environments where the pseudo-extra ``tag`` is active."""
        return self._repeat(self._tag_sel("extra", tag))

    def atom_mask(self, atom: tuple[str, str, str, bool]) -> int:
        got = self._atoms.get(atom)
        if got is None:
            got = self._atoms[atom] = self._atom_mask(atom)
        return got

    def _atom_mask(self, atom: tuple[str, str, str, bool]) -> int:
        key, op, literal, _ = atom
        if key in ("extra", "extras", "dependency_groups"):
            on = self._tag_sel(
                "group" if key == "dependency_groups" else "extra", str(canonicalize_name(literal))
            )
            if op in ("==", "in"):
                return self._repeat(on)
            if op in ("!=", "not in"):
                return self._repeat(self._all_sel & ~on)
            return 0
        out = 0
        for b, (platform, python) in enumerate(self.blocks):
            if _decide(atom, _values(PLATFORMS[platform][1], python), frozenset(), frozenset()):
                out |= self.block_mask(b)
        return out

    def marker_mask(self, text: str | None, cache: MarkerCache) -> int:
        """Where ``text`` holds (an empty marker everywhere); raises InvalidMarker."""
        if not text:
            return self.everything
        return cache.masks_by(text, self.atom_mask) & self.everything

    def env(self, j: int) -> Environment:
        got = self._envs.get(j)
        if got is None:
            b, s = divmod(j, self.n_sel)
            got = self._envs[j] = self.env_of(b, self.selections[s])
        return got

    def env_of(self, block: int, chosen: int) -> Environment:
        """The environment of one (platform, Python) block with the items of ``chosen`` (a mask
        over ``items``) on, and every item that conflicts with nothing."""
        platform, python = self.blocks[block]
        extras = set(self.lock.always_extras)
        groups = set(self.lock.always_groups)
        for i, it in enumerate(self.items):
            if chosen >> i & 1:
                extras |= it.extras
                groups |= it.groups
        words = selection_words(self.items, chosen, self.default) if self.items else None
        return Environment(
            PLATFORMS[platform][0],
            python,
            _values(PLATFORMS[platform][1], python),
            frozenset(extras),
            frozenset(groups),
            (words,) if words else (),
        )

    def located(self, j: int) -> tuple[int, int]:
        """(block, selection mask) of environment ``j``."""
        b, s = divmod(j, self.n_sel)
        return b, self.selections[s]

    def closed(self, chosen: int) -> int | None:
        """``chosen`` with what its items switch on through others, and the items left out of the
        enumeration dropped; None where that holds two items of one conflict set."""
        return _close(chosen & ~self.inert, self.implied, self.sets)

    def bits(self, mask: int) -> Iterator[int]:
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    def selections_in(self, mask: int) -> int:
        """The selections (a mask over them) that have an environment in ``mask``."""
        out = 0
        for b in range(len(self.blocks)):
            out |= (mask >> (b * self.n_sel)) & self._all_sel
        return out


def make_space(
    lock: ParsedLock, narrow: Narrow = Narrow(), judged: set[str] | None = None
) -> Space:
    """The environments of ``lock`` (narrowed). ``judged``: the names the rules read (for leaving
    inert items out at scale); None enumerates every valid selection up to ``MAX_SELECTIONS``."""
    mentions_platform = any(_PLATFORM_KEYS.search(t) for t in lock.marker_texts)
    if mentions_platform:
        platforms = list(PLATFORMS)
    else:
        platforms = ["linux-x86_64"]
        if not any("platform" in n for n in lock.notes):
            lock.notes.append(
                "the lock's markers name no platform (one machine's resolution): judged for "
                "linux x86_64; --environment names another"
            )
    shorthand = [k for text in narrow.environment for k in _shorthand(text) or []]
    marker_filters = [t for t in narrow.environment if _shorthand(t) is None]
    if shorthand:
        platforms = [p for p in PLATFORMS if p in shorthand]
    pythons = pythons_of(lock, narrow.python, narrow.default_python)
    items, sets = _items(lock)
    everything = (1 << len(items)) - 1
    notes: list[str] = []
    inert = 0
    selections = _independent_sets(len(items), sets, everything, FULL_ENUMERATION)
    if selections is None:
        inert = _inert(lock, items, judged)
        selections = _independent_sets(len(items), sets, everything & ~inert, MAX_SELECTIONS)
        if inert:
            names = ", ".join(it.words for i, it in enumerate(items) if inert >> i & 1)
            notes.append(
                f"{inert.bit_count()} conflicting extras/groups change no torch, extension or torch"
                " dependent and were not enumerated (every verdict holds whichever is chosen):"
                f" {names}"
            )
        if selections is None:
            selections = _first_selections(len(items), sets, everything & ~inert, MAX_SELECTIONS)
            notes.append(
                f"the conflicts allow more than {MAX_SELECTIONS} {choice_words(lock)}; the"
                f" first {MAX_SELECTIONS} (fewest items first) were judged; --extra/--group narrow"
                " them"
            )
    default = _default(lock, items, sets) if items else None
    if default is not None and default & inert:
        default &= ~inert
    implied = _implied(lock, items)
    # what each choice switches on through others, as uv reads it; refused combinations out
    if implied:
        selections, default = _closed(selections, default, implied, sets)
    if default is not None and default in selections:
        selections.remove(default)
        selections.insert(0, default)
    else:
        default = None
    wanted = [(w, "extra") for w in narrow.extra] + [(w, "any") for w in narrow.group]
    if wanted:
        selections = [s for s in selections if all(_chose(items, s, w, kind) for w, kind in wanted)]
    space = Space(
        lock,
        [(p, py) for p in platforms for py in pythons],
        items,
        selections,
        default,
        inert,
        notes,
        implied=implied,
        sets=sets,
    )
    active = space.everything
    for marker in marker_filters:
        active &= space.marker_mask(marker, narrow._markers)
    space.active = active & _covered(lock, space)
    return space


def _implied(lock: ParsedLock, items: list[Item]) -> list[int]:
    """Per item, the items it switches on through other extras/groups (uv.lock: a root extra
    ``cu128 = ["cosmos-oss[cu128-torch27]"]`` turns on the member's conflicting extra), closed
    under itself; [] where nothing implies anything."""
    implies: dict[str, frozenset[str]] = lock.extra.get("implies") or {}
    if not implies:
        return []
    by_tag = {tag: i for i, it in enumerate(items) for tag in (*it.extras, *it.groups)}
    out = []
    for it in items:
        seen: set[str] = set()
        todo = [t for tag in (*it.extras, *it.groups) for t in implies.get(tag, ())]
        while todo:
            tag = todo.pop()
            if tag not in seen:
                seen.add(tag)
                todo += implies.get(tag, ())
        out.append(sum(1 << by_tag[t] for t in {t for t in seen if t in by_tag}))
    return out if any(out) else []


def _closed(
    selections: list[int], default: int | None, implied: list[int], sets: list[int]
) -> tuple[list[int], int | None]:
    """Each selection with what it switches on; one that then holds two items of a conflict set is
    refused by uv ("conflicting extras enabled simultaneously") and left out; equal ones merge."""

    out: list[int] = []
    seen: set[int] = set()
    for chosen in selections:
        got = _close(chosen, implied, sets)
        if got is not None and got not in seen:
            seen.add(got)
            out.append(got)
    closed_default = _close(default, implied, sets) if default is not None else None
    return out, closed_default


def _close(chosen: int, implied: list[int], sets: list[int]) -> int | None:
    got = chosen
    for i, bits in enumerate(implied):
        if chosen >> i & 1:
            got |= bits
    return got if all((got & s).bit_count() <= 1 for s in sets) else None


def _first_selections(n: int, sets: list[int], allowed: int, limit: int) -> list[int]:
    """The first ``limit`` valid selections, fewest items first (by size, so the search stops
    early)."""
    out: list[int] = []
    for size in range(n + 1):
        for chosen in _of_size(n, sets, allowed, size):
            out.append(chosen)
            if len(out) >= limit:
                return out
    return out


def _of_size(n: int, sets: list[int], allowed: int, size: int) -> Iterator[int]:
    import itertools

    order = [i for i in range(n) if allowed >> i & 1]
    for combo in itertools.combinations(order, size):
        chosen = sum(1 << i for i in combo)
        if not any((chosen & s) & ((chosen & s) - 1) for s in sets):
            yield chosen


def _default(lock: ParsedLock, items: list[Item], sets: list[int]) -> int | None:
    bits = 0
    for i, it in enumerate(items):
        if it.default:
            bits |= 1 << i
    if any((bits & s) & ((bits & s) - 1) for s in sets):
        return None  # the locker's default itself breaks a conflict (uv refuses a plain sync)
    return bits


def _chose(items: list[Item], chosen: int, want: str, kind: str) -> bool:
    want = canonicalize_name(want.strip())
    for i, it in enumerate(items):
        if chosen >> i & 1 and it.name == want and (kind == "any" or it.kind == kind):
            return True
    return False


def _covered(lock: ParsedLock, space: Space) -> int:
    """The environments the lock is made for (its ``environments`` / ``supported-markers``; a lock
    that names none covers every environment; a marker that does not parse counts as covering)."""
    if not lock.environments:
        return space.everything
    out = 0
    for marker in lock.environments:
        try:
            out |= space.marker_mask(marker, lock.markers)
        except InvalidMarker:
            return space.everything
    return out


def enumerate_environments(lock: ParsedLock, narrow: Narrow = Narrow()) -> list[Environment]:
    """Every concrete environment the lock covers (narrowed), one object each: for callers that
    want a list (a provision choosing one environment). The gate itself works on the ``Space``."""
    space = make_space(lock, narrow)
    return [space.env(j) for j in space.bits(space.active)]


def choice_words(lock: ParsedLock) -> str:
    """What one selection of a lock is, in its own words: pixi's are environments."""
    return "pixi environments" if lock.format == "pixi.lock" else "selections of extras/groups"


def choices(lock: ParsedLock) -> list[str]:
    """The conflicting extras/groups of a lock in words (for usage errors)."""
    items, _ = _items(lock)
    return [it.words for it in items]


def covers(lock: ParsedLock, env: Environment) -> bool:
    """Whether ``env`` is one the lock is made for (see ``_covered``)."""
    if not lock.environments:
        return True
    for marker in lock.environments:
        try:
            if env.holds(marker, lock.markers):
                return True
        except InvalidMarker:
            return True
    return False
