"""Which specs a lock serves, and the step files it gives them.

- the spec it was made from (``spec_digest`` equal, same steps): every step file. This is the
  rule ``check-lock`` applies, and the only one for locks written before ``step_digest``;
- a *prefix* of that spec, such as a Docker layer's slice (the spec cut after a step): its
  steps must be the lock's first steps, in order, each with an equal ``step_digest``; it gets
  the files of those steps. A step whose digest differs is named in a ``LockError``.

A *prefix manifest* (``prefix_manifest``; ``envbuild docker`` puts one beside each layer's
slice) is ``lock.json`` cut to the first N steps, marked ``"prefix": true``, without
``spec_digest`` and ``created``, so its bytes change only when a step up to N is locked anew;
it is checked by the prefix rule alone.

``locked_requirements`` is what ``provision`` installs from. Once a lock exists for a spec,
every step it locks is installed from its file or not at all: a step entry that is missing,
unreadable or disagrees with its file is a ``LockError`` (exit 8) before anything is
installed; ``provision --no-lock`` is the one way past a lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild._io import TOMLDecodeError, parse_toml, sha256_file
from envbuild.errors import LockError
from envbuild.spec import StackSpec, spec_digest
from envbuild.spec.stepfile import line_problems
from envbuild.stacklock.model import (
    MANIFEST,
    Lock,
    LockedStep,
    format_requirement,
    lock_dir,
    read_stack_lock,
    read_step_file,
)

__all__ = ["built_wheels", "locked_requirements", "prefix_manifest", "stale_reason", "step_digests"]


def step_digests(spec: StackSpec) -> list[str] | None:
    """One digest per step of ``spec``: what decides that step's resolution.

    Step *i*'s digest covers ``python``, the ``[abi]`` table and the ``[[step]]`` tables 1..i,
    unexpanded (``${VAR}`` as written, like ``StackSpec.digest``): a step is resolved against
    the baseline and the earlier steps' pins, so it changes when any of those change, and
    never when a later step, ``[layout]``, ``[host]`` or a comment does. Read from the spec's
    file; None when that file no longer holds the spec ``spec`` was loaded from.
    """
    try:
        data = parse_toml(spec.path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, TOMLDecodeError):
        return None
    steps = data.get("step")
    if (
        spec_digest(data) != spec.digest
        or not isinstance(steps, list)
        or len(steps) != len(spec.steps)
    ):
        return None
    base = {"python": data.get("python"), "abi": data.get("abi", {})}
    return [spec_digest({**base, "step": steps[: i + 1]}) for i in range(len(steps))]


def _changed_step(spec: StackSpec, lock: Lock) -> str | None:
    """Why ``spec``'s steps are not the lock's first steps with equal step digests, or None."""
    names = [s.name for s in spec.steps]
    locked = [s.name for s in lock.steps]
    if locked[: len(names)] != names:
        return f"the spec's steps {names} are not the first steps of the lock ({locked})"
    digests = step_digests(spec)
    if digests is None:
        return f"{spec.path} changed while envbuild was reading it"
    for step, got in zip(lock.steps[: len(digests)], digests, strict=True):
        if step.step_digest != got:
            return (
                f"step {step.name!r} changed since the lock was made (step digest "
                f"{(step.step_digest or 'none')[:19]}... in the lock, {got[:19]}... now)"
            )
    return None


def _serves_prefix(spec: StackSpec, lock: Lock) -> bool:
    """Whether ``spec`` is checked by the prefix rule: a prefix manifest, or fewer steps than the
    lock."""
    return lock.prefix or (
        lock.has_step_digests
        and len(spec.steps) < len(lock.steps)
        and lock.spec_digest != spec.digest
    )


def stale_reason(spec: StackSpec, lock: Lock) -> str | None:
    """Why the lock no longer matches the spec, or None.

    A lock made from ``spec`` matches by its whole-spec digest and step names. A prefix
    manifest (``prefix_manifest``) matches by step digests; see the module docstring.
    """
    if lock.prefix:
        if not lock.has_step_digests:
            return "the prefix manifest records no step digests"
        return _changed_step(spec, lock)
    if lock.spec_digest != spec.digest:
        reason = (
            f"the lock was made from a different spec (lock {(lock.spec_digest or 'none')[:19]}...,"
            f" spec now {spec.digest[:19]}...)"
        )
        if lock.has_step_digests and (changed := _changed_step(spec, lock)):
            reason += f"; {changed}"
        return reason
    names = [s.name for s in spec.steps]
    locked = [s.name for s in lock.steps]
    if names != locked:
        return f"the lock's steps {locked} are not the spec's steps {names}"
    return None


def prefix_manifest(lock: Lock, count: int) -> dict[str, Any]:
    """``lock`` cut to its first ``count`` steps, for a spec cut after step ``count``.

    Without ``spec_digest`` (it changes with every later step) and ``created``: the result
    changes only when one of those steps is locked anew, which keeps a Docker layer that
    copies it cached. Raises ``LockError`` for a lock written before step digests.
    """
    if not lock.has_step_digests:
        raise LockError(
            f"{lock.path}: the lock records no per-step digests (it was written by an older "
            "envbuild), so a spec cut after a step cannot be checked against it",
            hint="Run `envbuild lock` again for this stack and commit the result.",
        )
    if not 0 < count <= len(lock.steps):
        raise ValueError(f"count {count} out of range 1..{len(lock.steps)}")
    cut = dataclasses.replace(
        lock, prefix=True, spec_digest=None, created=None, steps=lock.steps[:count]
    )
    return cut.to_dict()


def locked_requirements(spec: StackSpec) -> dict[str, Path]:
    """{step name: hash-pinned requirement file} from the lock beside the spec; {} without a lock.

    ``spec`` is the spec the lock was made from, or a prefix of it (a Docker layer's slice: the
    same first steps, each with the step digest the lock recorded); a prefix gets the files of
    its own steps. Raises ``LockError`` when the lock was made from another spec or a step
    changed since (run ``envbuild lock``), or a step's entry or file is missing, broken, or
    differs from what ``lock.json`` recorded. A step left out of the lock on purpose
    (``envbuild lock --skip-step``) resolves from the spec, with a warning.
    """
    lock = read_stack_lock(lock_dir(spec))
    if lock is None:
        return {}
    hint = (
        f"Run `envbuild lock --stack {spec.path}` and commit the result "
        "(or provision with --no-lock to resolve from the spec)."
    )
    if _serves_prefix(spec, lock):
        if not lock.has_step_digests:
            raise LockError(f"{lock.path}: the prefix manifest records no step digests", hint=hint)
        if changed := _changed_step(spec, lock):
            raise LockError(
                f"{lock.path}: the lock is stale for {spec.path}: {changed}",
                hint=(
                    "Run `envbuild lock` for the full stack and commit the result; for an image,"
                    " render it again with `envbuild docker` (or use --no-lock to resolve from the"
                    " spec)."
                ),
            )
        steps = lock.steps[: len(spec.steps)]
    else:
        if reason := stale_reason(spec, lock):
            raise LockError(f"{lock.path}: the lock is stale: {reason}", hint=hint)
        steps = lock.steps
    out: dict[str, Path] = {}
    for step in steps:
        if not step.locked:
            events.emit(
                "warn",
                f"step {step.name!r} is not in the lock ({step.reason}); it resolves from the spec",
            )
            continue
        out[step.name] = checked_step_file(spec, lock, step)
    return out


def checked_step_file(spec: StackSpec, lock: Lock, step: LockedStep) -> Path:
    """The step's file, after proving it is the one ``lock.json`` recorded, hash-pinned line by
    line."""
    assert step.file is not None
    regen = (
        f"Run `envbuild lock --stack {spec.path}` to regenerate the lock "
        "(or provision with --no-lock to resolve from the spec)."
    )
    path = lock.folder / step.file
    if not path.is_file():
        raise LockError(f"{path}: the lock file of step {step.name!r} is missing", hint=regen)
    reqs = read_step_file(path)
    if problems := line_problems(reqs):
        first = problems[0]
        raise LockError(f"{path}:{first.req.line}: {first.req.name}: {first.reason}", hint=regen)
    if sha256_file(path) != step.file_sha256:
        raise LockError(
            f"{path}: the file was changed after `envbuild lock` wrote it (its sha256 is not "
            f"the one in {MANIFEST})",
            hint=f"Run `envbuild lock --stack {spec.path}` instead of editing lock files by hand.",
        )
    in_file = {(r.name, r.version) for r in reqs}
    in_json = {(p.name, p.version) for p in step.packages}
    if in_file != in_json:
        differ = sorted(f"{n}=={v}" if v else n for n, v in in_file ^ in_json)
        raise LockError(
            f"{lock.path}: step {step.name!r}: the packages recorded in {MANIFEST} are not the pins"
            f" of {step.file} (they differ in {', '.join(differ[:5])})",
            hint=regen,
        )
    return path


def built_wheels(locked: Mapping[str, Path]) -> dict[str, dict[str, str]]:
    """{step: {name: "name==version --hash=sha256:..."}}: the lock's git/URL pins that ``wheelhouse
    mirror`` built into wheels (``lock.json``'s ``vcs.wheel``), as an offline install takes them."""
    try:
        lock = read_stack_lock(next(iter(locked.values())).parent)
    except LockError:
        return {}
    out: dict[str, dict[str, str]] = {}
    for s in lock.steps if lock is not None else ():
        for p in s.packages:
            if p.vcs is not None and p.vcs.wheel is not None:
                line = format_requirement(p.name, p.vcs.wheel.version, [p.vcs.wheel.sha256]).strip()
                out.setdefault(s.name, {})[p.name] = line
    return out
