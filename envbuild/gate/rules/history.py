"""``--base REF``: per environment, torch must not move down, be re-tagged or disappear. REF is a
git revision, or a file (``--base old/uv.lock``: the lock as a release shipped it).

Both locks are evaluated in the same concrete environments (the base's), so a downgrade in one
fork is a finding naming that fork even when every other environment is unchanged.

``moved`` is the one judgement of a protected package's version change, ``file_at_ref`` the one
reader of a lock at the base revision: envbuild's own locks (``rules.ownlock.history``) use both.
"""

from __future__ import annotations

from pathlib import Path

from envbuild.gate.context import Context
from envbuild.gate.environments import Narrow, Space, _covered, make_space
from envbuild.gate.groups import group
from envbuild.gate.model import Entry, Environment, Members, ParsedLock
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
        res = run(
            ["git", *args],
            cwd=path.resolve().parent,
            capture=True,
            separate_stderr=True,
            timeout=30,
        )
        return res.returncode, res.output or ""

    rc, top = git("rev-parse", "--show-toplevel")
    if rc != 0:
        raise ConfigError(
            f"--base {ref}: no such file, and {path.resolve().parent} is not inside a git "
            "repository, so it cannot be a git revision either",
            hint="Name the earlier lock file (--base old/uv.lock) or a git ref of the lock's "
            "repository.",
        )
    if git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")[0] != 0:
        raise ConfigError(
            f"--base {ref}: no such git revision, nor a file",
            hint=(
                "Fetch it first (CI: fetch-depth: 0), or name a branch, tag or "
                "commit that exists, or a lockfile."
            ),
        )
    rel = path.resolve().relative_to(Path(top.strip()).resolve()).as_posix()
    rc, text = git("show", f"{ref}:{rel}")
    return rel, (text if rc == 0 else None)


def moved(name: str, before: str, after: str, ref: str) -> tuple[str, str] | None:
    """(rule, reason) when ``name`` going from ``before`` (at ``ref``) to ``after`` is a downgrade
    or the same version under another local tag (a swapped build); a downgrade that changes the
    local tag too says both; None for anything else, versions that do not parse included."""
    pb, pa = public_of(before), public_of(after)
    if pb is None or pa is None or before == after:
        return None
    lb, la = local_of(before), local_of(after)
    if pb > pa:
        retag = ""
        if lb and la and lb != la:  # a downgrade that also changes the named build: both are said
            cuda = lb.startswith("cu") and la.startswith("cu")
            build = "another CUDA build" if cuda else "another build"
            retag = f", and re-tagged (+{lb} -> +{la}: {build})"
        return "torch-downgrade", f"{name} {before} at {ref} -> {after} here: a downgrade{retag}"
    if pb == pa and lb != la:
        return (
            "torch-swap",
            (
                f"{name} {before} at {ref} -> {after} here: the same version with another local tag"
                f" ({'+' + lb if lb else 'none'} -> {'+' + la if la else 'none'}), a swapped build"
            ),
        )
    return None


def _one(members: Members, name: str) -> Entry | None:
    got = [e for e in members.entries if e.name == name]
    versions = {e.version for e in got if e.version}
    return got[0] if len(versions) == 1 else None


def _key(env: Environment) -> tuple[str, str, frozenset[str], frozenset[str]]:
    return env.platform, env.python, env.extras, env.groups


def check(
    ctx: Context,
    old: ParsedLock,
    ref: str,
    narrow: Narrow,
    names: set[str] | None = None,
    head: Space | None = None,
) -> None:
    """Both locks walked over the base's environments (uv's pseudo-extras name the same items in
    both), grouped by what either installs of the protected packages, each group compared once.
    A finding is filed under the head's environments that are the same platform, Python and
    selection (the rows of the table); an environment only the base has is said to be gone."""
    space = make_space(old, narrow, names)
    before, after = old.walk(space), ctx.lock.walk(space)
    covered = _covered(ctx.lock, space)
    protected = sorted(ctx.policy.protected)
    at_head: dict[tuple[str, str, frozenset[str], frozenset[str]], int] = {}
    if head is not None:
        at_head = {_key(head.env(j)): j for j in head.bits(head.active)}

    def where(mask: int) -> tuple[list[Environment], list[Environment]]:
        """The head's views of the base environments in ``mask``, and those the head has not."""
        views, gone = [], []
        for jb in space.bits(mask):
            j = at_head.get(_key(space.env(jb)))
            hit = [v for v in ctx.views if j is not None and v.mask >> j & 1]
            if not hit:
                gone.append(space.env(jb))
            views += [v.env for v in hit if v.env not in views]
        return views, gone

    def add(
        name: str,
        rule: str,
        reason: str,
        mask: int,
        base_env: Environment,
        entry: Entry | None = None,
    ) -> None:
        if head is None:
            ctx.add(name, rule, reason, base_env, entry)
            return
        views, gone = where(mask)
        for env in views:
            ctx.add(name, rule, reason, env, entry)
        if gone:
            ctx.add(name, rule, reason, base_env, entry)
            ctx.note(
                f"--base {ref}: {len(gone)} environment(s) of the base are gone from this lock "
                f"(e.g. {gone[0].name})"
            )

    for g in group(space, before, set(protected), after):
        was, now = before.members(g.j), after.members(g.j)
        env = g.env
        for name in protected:
            b_entry = _one(was, name)
            if b_entry is None or b_entry.version is None:
                continue
            if not covered >> g.j & 1:
                add(
                    name,
                    "torch-gone",
                    f"{name} {b_entry.version} at {ref}; this lock no longer covers "
                    "the environment",
                    g.mask,
                    env,
                )
                continue
            a_entry = _one(now, name)
            if a_entry is None or a_entry.version is None:
                if not any(e.name == name for e in now.entries):
                    add(
                        name,
                        "torch-gone",
                        f"{name} {b_entry.version} at {ref}; not installed here any more",
                        g.mask,
                        env,
                    )
                continue
            change = moved(name, b_entry.version, a_entry.version, ref)
            if change is not None:
                add(name, change[0], change[1], g.mask, env, a_entry)
