"""``--base REF``: per environment, torch must not move down, be re-tagged or disappear.

Both locks are evaluated in the same concrete environments (the base's), so a downgrade in one
fork is a finding naming that fork even when every other environment is unchanged.
"""

from __future__ import annotations

from envbuild.gate.context import Context
from envbuild.gate.environments import Narrow, _covered, make_space
from envbuild.gate.groups import group
from envbuild.gate.model import Entry, Lock, Members
from envbuild.gate.rules.pins import local_of, public_of

__all__ = ["check"]


def _one(members: Members, name: str) -> Entry | None:
    got = [e for e in members.entries if e.name == name]
    versions = {e.version for e in got if e.version}
    return got[0] if len(versions) == 1 else None


def check(ctx: Context, old: Lock, ref: str, narrow: Narrow, names: set[str] | None = None) -> None:
    """Both locks walked over the base's environments (uv's pseudo-extras name the same items in
    both), grouped by what either installs of the protected packages, each group compared once."""
    space = make_space(old, narrow, names)
    before, after = old.walk(space), ctx.lock.walk(space)
    covered = _covered(ctx.lock, space)
    protected = sorted(ctx.policy.protected)
    for g in group(space, before, set(protected), after):
        was, now = before.members(g.j), after.members(g.j)
        env = g.env
        for name in protected:
            b_entry = _one(was, name)
            if b_entry is None or b_entry.version is None:
                continue
            if not covered >> g.j & 1:
                ctx.add(name, "torch-gone", f"{name} {b_entry.version} at {ref}; this lock no longer covers "
                        "the environment", env)
                continue
            a_entry = _one(now, name)
            if a_entry is None or a_entry.version is None:
                if not any(e.name == name for e in now.entries):
                    ctx.add(name, "torch-gone", f"{name} {b_entry.version} at {ref}; not installed here any more",
                            env)
                continue
            b, a = b_entry.version, a_entry.version
            pb, pa = public_of(b), public_of(a)
            if pb is None or pa is None or b == a:
                continue
            if pb > pa:
                ctx.add(name, "torch-downgrade", f"{name} {b} at {ref} -> {a} here: a downgrade", env, a_entry)
            elif pb == pa and local_of(b) != local_of(a):
                ctx.add(name, "torch-swap", f"{name} {b} at {ref} -> {a} here: the same version with another "
                        "local tag, a swapped build", env, a_entry)
