"""Environments that install the same things the rules read are judged once.

After one walk of the lock over a ``Space`` (every platform x Python x selection, a bit each),
each entry has the mask of the environments that install it. The environments are split by the
masks of the *judged* entries only (torch and the protected packages, triton, prebuilt extensions,
everything that depends on torch or that torch depends on, the CUDA runtime), and by where a file
of each judged entry installs (its wheel tags against each platform and Python): two environments
on one side of every split install the same judged set, from files that install in both, so every
rule answers alike in both. Each part is split once more by platform and into runs of consecutive
Pythons (a row names a range only where each Python in it was judged alike) and becomes one
``Group``, labelled by its first environment and the count of the selections it stands for.

What a rule reads that the lock does not show before the rules run (a ``Requires-Dist`` marker on
``python_version`` read from an index, a requirements pin's files on its index) is asked in every
Python a group stands for (``gate.context``); where the answers differ, ``by_pythons`` splits the
group and it is judged again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from packaging.utils import canonicalize_name

from envbuild.gate.environments import PLATFORMS, Space
from envbuild.gate.findings import Policy
from envbuild.gate.model import Entry, Environment, ParsedLock, Reach

__all__ = ["Group", "by_pythons", "group", "judged_names", "python_mask"]

# names whose presence a rule reads even when nothing in the lock says they touch torch
_ALWAYS = frozenset({"triton", "pytorch-triton"})


def judged_names(lock: ParsedLock, policy: Policy) -> set[str] | None:
    """The names the rules read; None when the format records no dependency graph (every entry
    then)."""
    from envbuild.gate.model import KNOWN_EXTENSIONS

    protected = policy.protected
    names = set(protected) | _ALWAYS | KNOWN_EXTENSIONS
    for e in lock.entries:
        if e.dependencies is None and e.requires is None and e.via is None:
            return None
        if e.url or (e.version and "+" in e.version) or e.name.startswith("nvidia-"):
            names.add(e.name)
        deps = set(e.dependencies or ()) | set(e.via or ())
        if e.name in protected:
            names |= deps
        elif deps & protected or any(_names_torch(r, protected) for r in e.requires or ()):
            names.add(e.name)
    return names


def _names_torch(requirement: str, protected: set[str]) -> bool:
    head = requirement.split(";", 1)[0]
    for sep in "<>=!~[ (@":
        head = head.split(sep, 1)[0]
    return canonicalize_name(head.strip()) in protected


@dataclass
class Group:
    """Environments judged as one: ``env`` (named for all of them) is the first, ``j`` its bit."""

    env: Environment
    j: int
    mask: int
    selections: int  # how many selections of extras/groups it stands for
    environments: int  # how many platform x Python x selection environments


def split(masks: list[int], start: int) -> list[int]:
    """``start`` cut by every mask in ``masks``: the parts no mask tells apart."""
    parts = [start] if start else []
    for m in masks:
        nxt = []
        for c in parts:
            inside = c & m
            if inside and inside != c:
                nxt += [inside, c & ~m]
            else:
                nxt.append(c)
        parts = nxt
    return parts


def group(space: Space, reach: Reach, names: set[str] | None, *extra: Reach) -> list[Group]:
    """The groups of ``space.active`` by the judged entries of ``reach`` (and of ``extra`` walks of
    other locks over the same space: ``--base`` compares two)."""
    masks = []
    files = _FileBlocks(space)
    for r in (reach, *extra):
        for e in r.entries:
            if (names is None or e.name in names) and (m := r.key_masks.get(e.key, 0)):
                masks.append(m)
                if e.files:
                    masks.append(m & files.installs(e))
    out = [g for part in split(masks, space.active) for g in pieces(space, part)]
    out.sort(key=lambda g: g.j)
    return out


def pieces(space: Space, part: int) -> list[Group]:
    """``part`` as groups: one per platform and run of consecutive Pythons."""
    out = []
    for b0 in range(0, len(space.blocks), len(space.pythons)):
        run = 0
        for b in range(b0, b0 + len(space.pythons)):
            inside = part & space.block_mask(b)
            if inside:
                run |= inside
            elif run:
                out.append(_group(space, run))
                run = 0
        if run:
            out.append(_group(space, run))
    return out


def python_mask(space: Space, pythons: set[str]) -> int:
    """The environments of ``space`` whose Python is one of ``pythons``."""
    out = 0
    for b, (_, py) in enumerate(space.blocks):
        if py in pythons:
            out |= space.block_mask(b)
    return out


def by_pythons(space: Space, g: Group, sides: list[set[str]]) -> list[Group]:
    """``g`` split where the Pythons of ``sides`` (each a set that answered a question one way)
    part from the others."""
    parts = split([python_mask(space, s) for s in sides], g.mask)
    return sorted((x for part in parts for x in pieces(space, part)), key=lambda x: x.j)


class _FileBlocks:
    """Where a file of an entry installs, as a mask over the space (a file name's answer per
    platform and Python asked once)."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self.by_file: dict[str, int] = {}

    def installs(self, entry: Entry) -> int:
        out = 0
        for f, _ in entry.files:
            got = self.by_file.get(f)
            if got is None:
                got = self.by_file[f] = self._file(f)
            out |= got
        return out

    def _file(self, f: str) -> int:
        from envbuild.index.wheeltags import installs_where

        space = self.space
        targets = [(py, PLATFORMS[platform][0]) for platform, py in space.blocks]
        out = 0
        for b, ok in enumerate(installs_where(f, targets)):
            if ok:
                out |= space.block_mask(b)
        return out


def _group(space: Space, piece: int) -> Group:
    j = (piece & -piece).bit_length() - 1
    env = space.env(j)
    pythons = tuple(py for b, (_, py) in enumerate(space.blocks) if piece & space.block_mask(b))
    several_pythons = len(space.pythons) > 1
    sels = space.selections_in(piece).bit_count()
    selection = env.selection
    if space.items and sels > 1:
        first = selection[0] if selection else ""
        if sels == space.n_sel:
            selection = (f"any of the {sels} {space.choice_words}",)
        else:
            more = "pixi environment" if space.lock.format == "pixi.lock" else "selection"
            selection = (f"{first} and {sels - 1} more {more}{'s' if sels > 2 else ''}",)
    named = replace(
        env, selection=selection, pythons=pythons if several_pythons else (), _cache=env._cache
    )
    return Group(named, j, piece, sels, piece.bit_count())
