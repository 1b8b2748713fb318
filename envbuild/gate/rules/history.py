"""``--base REF``: per environment, torch must not move down, be re-tagged or disappear.

Both locks are evaluated in the same concrete environments (the base's), so a downgrade in one
fork is a finding naming that fork even when every other environment is unchanged.

``moved`` is the one judgement of a protected package's version change, ``file_at_ref`` the one
reader of a lock at the base revision: envbuild's own locks (``rules.ownlock.history``) use both.
"""

from __future__ import annotations

from pathlib import Path

from envbuild.gate.context import Context
from envbuild.gate.environments import Narrow, _covered, make_space
from envbuild.gate.groups import group
from envbuild.gate.model import Entry, Members, ParsedLock
from envbuild.gate.rules.pins import local_of, public_of

__all__ = ["check", "file_at_ref", "moved"]


def file_at_ref(path: Path, ref: str) -> tuple[str, str | None]:
    """The file at ``path`` as it is at git revision ``ref``.

    Returns (its path relative to the repository's top, its text or None when it does not exist
    there). Raises ConfigError when ``path`` is not in a git repository or ``ref`` does not exist.
    """
    from envbuild.errors import ConfigError
    from envbuild.run import run

    def git(*args: str) -> tuple[int, str]:
        res = run(["git", *args], cwd=path.resolve().parent, capture=True, separate_stderr=True, timeout=30)
        return res.returncode, res.output or ""

    rc, top = git("rev-parse", "--show-toplevel")
    if rc != 0:
        raise ConfigError(f"--base {ref}: {path.resolve().parent} is not inside a git repository")
    if git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")[0] != 0:
        raise ConfigError(f"--base {ref}: no such git revision", hint="Fetch it first (CI: fetch-depth: 0), "
                          "or name a branch, tag or commit that exists.")
    rel = path.resolve().relative_to(Path(top.strip()).resolve()).as_posix()
    rc, text = git("show", f"{ref}:{rel}")
    return rel, (text if rc == 0 else None)


def moved(name: str, before: str, after: str, ref: str) -> tuple[str, str] | None:
    """(rule, reason) when ``name`` going from ``before`` (at ``ref``) to ``after`` is a downgrade
    or the same version under another local tag (a swapped build); None for anything else,
    versions that do not parse included."""
    pb, pa = public_of(before), public_of(after)
    if pb is None or pa is None or before == after:
        return None
    if pb > pa:
        return "torch-downgrade", f"{name} {before} at {ref} -> {after} here: a downgrade"
    lb, la = local_of(before), local_of(after)
    if pb == pa and lb != la:
        return "torch-swap", (f"{name} {before} at {ref} -> {after} here: the same version with another local tag "
                              f"({'+' + lb if lb else 'none'} -> {'+' + la if la else 'none'}), a swapped build")
    return None


def _one(members: Members, name: str) -> Entry | None:
    got = [e for e in members.entries if e.name == name]
    versions = {e.version for e in got if e.version}
    return got[0] if len(versions) == 1 else None


def check(ctx: Context, old: ParsedLock, ref: str, narrow: Narrow, names: set[str] | None = None) -> None:
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
            change = moved(name, b_entry.version, a_entry.version, ref)
            if change is not None:
                ctx.add(name, change[0], change[1], env, a_entry)
