"""``--base REF``: per environment, torch must not move down, be re-tagged or disappear. REF is a
git revision, or a file (``--base old/uv.lock``: the lock as a release shipped it).

Both locks are evaluated in the same concrete environments (the base's), so a downgrade in one
fork is a finding naming that fork even when every other environment is unchanged.

``moved`` is the one judgement of a protected package's version change, ``file_at_ref`` the one
reader of a lock at the base revision: envbuild's own locks (``rules.ownlock.history``) use both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envbuild.gate.context import Context, View
from envbuild.gate.environments import Narrow, Space, _covered, make_space
from envbuild.gate.groups import group
from envbuild.gate.model import Entry, Environment, Members, ParsedLock, where_words
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


def _pair(env: Environment) -> tuple[str, frozenset[str], frozenset[str]]:
    """What pairs a base environment with the head's across a change of Python: its platform and
    selection."""
    return env.platform, env.extras, env.groups


@dataclass
class _Head:
    """The head's environments as ``--base`` pairs them: by platform, Python and selection, and by
    platform and selection alone (whose Pythons moved)."""

    at: dict[tuple[str, str, frozenset[str], frozenset[str]], int] = field(default_factory=dict)
    pythons: dict[tuple[str, frozenset[str], frozenset[str]], set[str]] = field(
        default_factory=dict
    )

    @classmethod
    def of(cls, head: Space | None) -> _Head:
        out = cls()
        if head is not None:
            for j in head.bits(head.active):
                env = head.env(j)
                out.at[_key(env)] = j
                out.pythons.setdefault(_pair(env), set()).add(env.python)
        return out


def check(
    ctx: Context,
    old: ParsedLock,
    ref: str,
    narrow: Narrow,
    names: set[str] | None = None,
    head: Space | None = None,
    installable: dict[str, bool | None] | None = None,
) -> None:
    """Both locks walked over the base's environments (uv's pseudo-extras name the same items in
    both), grouped by what either installs of the protected packages, each group compared once.
    A finding is filed under the head's environments that are the same platform, Python and
    selection (the rows of the table). Where the base's Python is not the head's but the platform
    and selection are there (a Python bump), the base's torch is compared with the head's at the
    head's new Pythons, a note says the Pythons moved, and it is a finding only where no torch
    file installs at the new Python; an environment whose platform or selection the head has not
    is said to be gone."""
    space = make_space(old, narrow, names)
    before, after = old.walk(space), ctx.lock.walk(space)
    covered = _covered(ctx.lock, space)
    protected = sorted(ctx.policy.protected)
    at_head = _Head.of(head)
    base_pys: dict[tuple[str, frozenset[str], frozenset[str]], set[str]] = {}
    for jb in space.bits(space.active):
        base_pys.setdefault(_pair(space.env(jb)), set()).add(space.env(jb).python)
    moved_notes: dict[tuple[str, str], list[Environment]] = {}

    def where(mask: int) -> tuple[list[View], list[Environment], list[View]]:
        """The head's views of the base environments in ``mask``, those the head has not, and the
        head's views at the new Pythons of those whose Python moved."""
        views: list[View] = []
        gone: list[Environment] = []
        moved: list[View] = []
        for jb in space.bits(mask):
            env = space.env(jb)
            j = at_head.at.get(_key(env))
            if j is not None:
                views += [v for v in ctx.views if v.mask >> j & 1 and v not in views]
                continue
            pair = _pair(env)
            new = at_head.pythons.get(pair, set()) - base_pys.get(pair, set())
            if pair not in at_head.pythons:
                gone.append(env)
                continue
            words = (
                ", ".join(sorted(base_pys[pair], key=_minor)),
                ", ".join(sorted(at_head.pythons[pair], key=_minor)),
            )
            moved_notes.setdefault(words, []).append(env)
            for py in new:
                hj = at_head.at[(env.platform, py, env.extras, env.groups)]
                moved += [v for v in ctx.views if v.mask >> hj & 1 and v not in moved]
        return views, gone, moved

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
        views, gone, _ = where(mask)
        for v in views:
            ctx.add(name, rule, reason, v.env, entry)
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
            if head is not None:
                _across(ctx, name, (b_entry, env), ref, where(g.mask)[2], installable or {})
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
    for (was_py, now_py), envs in moved_notes.items():
        ctx.note(
            f"--base {ref}: the Python moved on {where_words(dict.fromkeys(envs))}: python"
            f" {was_py} at {ref}, {now_py} here; its torch is compared at the new Python"
        )


def _minor(python: str) -> int:
    return int(python.split(".")[1])


def _across(
    ctx: Context,
    name: str,
    base: tuple[Entry, Environment],
    ref: str,
    views: list[View],
    installable: dict[str, bool | None],
) -> None:
    """The base's ``name`` (its entry, in a base environment) against the head's at the new Pythons
    of a Python bump; a torch that had a file at the base's Python and has none at the new one is
    gone."""
    from envbuild.index.wheeltags import installs_on

    b_entry, b_env = base
    assert b_entry.version is not None
    files = [f for f, _ in b_entry.files] or ([b_entry.url] if b_entry.url else [])
    had = not files or any(installs_on(f, b_env.python, b_env.platform) for f in files)
    for v in views:
        got = v.by_name.get(name) or []
        now = got[0] if len({e.version for e in got}) == 1 else None
        if now is None or now.version is None:
            continue
        if name == ctx.policy.torch and installable.get(v.env.name) is False and had:
            ctx.add(
                name,
                "torch-gone",
                f"{name} {b_entry.version} at {ref} (python {b_env.python}); the Python moved to"
                f" {', '.join(v.pythons)} here, where no file of {name} {now.version} installs",
                v.env,
                now,
            )
            continue
        change = moved(name, b_entry.version, now.version, ref)
        if change is not None:
            ctx.add(name, change[0], change[1], v.env, now)
