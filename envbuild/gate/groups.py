"""Environments that install the same things the rules read are judged once.

After one walk of the lock over a ``Space`` (every platform x Python x selection, a bit each),
each entry has the mask of the environments that install it. The environments are split by the
masks of the *judged* entries only (torch and the protected packages, triton, prebuilt extensions,
everything that depends on torch or that torch depends on, the CUDA runtime): two environments
on one side of every split install the same judged set, so every rule answers alike in both.
Each part is split once more by platform (findings name platforms) and becomes one ``Group``,
labelled by its first environment and the count of the selections it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from packaging.utils import canonicalize_name

from envbuild.gate.environments import Space
from envbuild.gate.findings import Policy
from envbuild.gate.model import Environment, ParsedLock, Reach

__all__ = ["Group", "group", "judged_names"]

# names whose presence a rule reads even when nothing in the lock says they touch torch
_ALWAYS = frozenset({"triton", "pytorch-triton"})


def judged_names(lock: ParsedLock, policy: Policy) -> set[str] | None:
    """The names the rules read; None when the format records no dependency graph (every entry
    then)."""
    from envbuild.gate.rules.extensions import KNOWN_EXTENSIONS

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
    for r in (reach, *extra):
        masks += [
            m
            for e in r.entries
            if (names is None or e.name in names) and (m := r.key_masks.get(e.key, 0))
        ]
    parts = split(masks, space.active)
    platforms: dict[str, int] = {}
    for b, (platform, _) in enumerate(space.blocks):
        platforms[platform] = platforms.get(platform, 0) | space.block_mask(b)
    out = []
    for part in parts:
        for pmask in platforms.values():
            piece = part & pmask
            if piece:
                out.append(_group(space, piece))
    out.sort(key=lambda g: g.j)
    return out


def _group(space: Space, piece: int) -> Group:
    j = (piece & -piece).bit_length() - 1
    env = space.env(j)
    pythons = tuple(py for b, (_, py) in enumerate(space.blocks) if piece & space.block_mask(b))
    several_pythons = len({py for _, py in space.blocks}) > 1
    sels = space.selections_in(piece).bit_count()
    selection = env.selection
    if space.items and sels > 1:
        first = selection[0] if selection else ""
        if sels == space.n_sel:
            selection = (f"any of the {sels} selections of extras/groups",)
        else:
            selection = (f"{first} and {sels - 1} more selection{'s' if sels > 2 else ''}",)
    named = replace(
        env, selection=selection, pythons=pythons if several_pythons else (), _cache=env._cache
    )
    return Group(named, j, piece, sels, piece.bit_count())
