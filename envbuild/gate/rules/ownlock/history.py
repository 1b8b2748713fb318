"""``--base REF``: the protected versions this lock pins against the ones the lock at REF pins,
judged by the gate's one rule (``rules.history.moved``: a downgrade, or a re-tagged build)."""

from __future__ import annotations

from pathlib import Path

from packaging.utils import canonicalize_name

from envbuild.errors import LockError
from envbuild.gate.rules.history import file_at_ref, moved
from envbuild.gate.rules.ownlock.steps import StackContext, protected_of, shown
from envbuild.spec import StackSpec
from envbuild.stacklock.model import MANIFEST, Lock, lock_from_text

__all__ = ["check"]


def check(ctx: StackContext, ref: str) -> None:
    lock = ctx.lock
    if lock is None:
        return
    rel, text = file_at_ref(lock.folder / MANIFEST, ref)
    if text is None:
        ctx.note(f"--base {ref}: no lock at {rel} there; nothing to compare")
        return
    try:
        base = lock_from_text(Path(f"{ref}:{rel}"), text)
    except LockError as exc:
        ctx.add(f"{ref}:{rel}", "-", "broken-lock", exc.message)
        return
    old, new = _protected_versions(base, ctx.spec), _protected_versions(lock, ctx.spec)
    for name, before in sorted(old.items()):
        after = new.get(name)
        change = moved(name, before, after, ref) if after is not None else None
        if change is not None:
            ctx.add(shown(lock.path), name, change[0], change[1])


def _protected_versions(lock: Lock, spec: StackSpec) -> dict[str, str]:
    """{protected name: the version the lock pins} (torch: as the last step that pins it does, else
    lock.json's abi)."""
    protected = protected_of(spec, lock)
    out: dict[str, str] = {}
    if lock.abi is not None and lock.abi.version:
        out[canonicalize_name(lock.abi.package)] = lock.abi.version
    for step in lock.steps:
        for p in step.packages:
            n = canonicalize_name(p.name)
            if (n in protected or spec.abi.is_protected(n)) and p.version:
                if n == spec.abi.package:
                    out[n] = p.version
                else:
                    out.setdefault(n, p.version)
    return out
