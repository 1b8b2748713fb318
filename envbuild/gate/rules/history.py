"""``--base REF``: per environment, torch must not move down, be re-tagged or disappear.

Both locks are evaluated in the same concrete environments (the base's), so a downgrade in one
fork is a finding naming that fork even when every other environment is unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from envbuild.gate.context import Context
from envbuild.gate.environments import Narrow, covers, enumerate_environments
from envbuild.gate.model import Entry, Lock, Members
from envbuild.gate.rules.pins import local_of, public_of

__all__ = ["check"]


def _one(members: Members, name: str) -> Entry | None:
    got = [e for e in members.entries if e.name == name]
    versions = {e.version for e in got if e.version}
    return got[0] if len(versions) == 1 else None


def check(ctx: Context, old: Lock, ref: str, narrow: Narrow) -> None:
    envs = enumerate_environments(old, narrow)
    before_all = old.members_of(envs)
    after_all = ctx.lock.members_of(envs)
    # name each environment as the report's table does (its Python merged into a range there)
    shown = {(v.env.platform, v.env.selection, py): v.env for v in ctx.views for py in (v.env.pythons or (v.env.python,))}
    several = len({e.python for e in envs}) > 1
    for raw, was, now in zip(envs, before_all, after_all, strict=True):
        env = shown.get((raw.platform, raw.selection, raw.python)) or (
            replace(raw, pythons=(raw.python,)) if several else raw)
        for name in sorted(ctx.policy.protected):
            before = _one(was, name)
            if before is None or before.version is None:
                continue
            if not covers(ctx.lock, env):
                ctx.add(name, "torch-gone", f"{name} {before.version} at {ref}; this lock no longer covers "
                        "the environment", env)
                continue
            after = _one(now, name)
            if after is None or after.version is None:
                if not any(e.name == name for e in now.entries):
                    ctx.add(name, "torch-gone", f"{name} {before.version} at {ref}; not installed here any more",
                            env)
                continue
            b, a = before.version, after.version
            pb, pa = public_of(b), public_of(a)
            if pb is None or pa is None or b == a:
                continue
            if pb > pa:
                ctx.add(name, "torch-downgrade", f"{name} {b} at {ref} -> {a} here: a downgrade", env, after)
            elif pb == pa and local_of(b) != local_of(a):
                ctx.add(name, "torch-swap", f"{name} {b} at {ref} -> {a} here: the same version with another "
                        "local tag, a swapped build", env, after)
