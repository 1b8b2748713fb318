"""What the own-lock rules read: the stack, its ``lock.json`` and a view of each locked step; and
the rules on the files themselves (missing, unreadable, changed since ``envbuild lock`` wrote them,
lines without a hash or an exact pin), which decide what the other rules can read at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuild._io import sha256_file
from envbuild.errors import LockError
from envbuild.gate.findings import OWN_RULES, Finding
from envbuild.spec import StackSpec
from envbuild.spec.stepfile import line_problems
from envbuild.stacklock.model import (
    MANIFEST,
    Lock,
    LockedPackage,
    LockedReq,
    lock_dir,
    read_stack_lock,
    read_step_file,
)
from envbuild.stacklock.serve import stale_reason

__all__ = ["StackContext", "StepView", "protected_of", "read", "shown"]


def shown(path: Path) -> str:
    """A path as findings name it: relative to the working directory where it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass
class StepView:
    """One locked step as the rules see it: its spec position, its file's pins, its lock.json
    entries."""

    index: int  # position in the spec (len(spec.steps) for a step the spec no longer has)
    name: str
    file: str  # shown path
    no_deps: bool
    reqs: list[LockedReq]
    packages: dict[str, LockedPackage]  # lock.json entries by name


def protected_of(spec: StackSpec, lock: Lock) -> set[str]:
    """The protected set a lock recorded (the guard's frozen set when it was made), plus the spec's
    ABI package."""
    recorded = lock.abi.protected if lock.abi else ()
    return {canonicalize_name(n) for n in recorded} | {spec.abi.package}


@dataclass
class StackContext:
    """One stack's lock under judgement, and what the rules found in it."""

    spec: StackSpec
    lock: Lock | None = None  # None: lock.json is missing or unreadable, nothing else is judged
    views: list[StepView] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def protected(self) -> set[str]:
        return (
            protected_of(self.spec, self.lock) if self.lock is not None else {self.spec.abi.package}
        )

    def is_protected(self, name: str) -> bool:
        return name in self.protected or self.spec.abi.is_protected(name)

    def add(self, file: str, package: str, rule: str, reason: str, line: int | None = None) -> None:
        assert rule in OWN_RULES, f"{rule}: describe it in envbuild.gate.findings.OWN_RULES"
        self.findings.append(Finding(file, package, rule, reason, line=line))

    def note(self, text: str) -> None:
        self.notices.append(text)


def read(ctx: StackContext) -> None:
    """lock.json into ``ctx.lock`` and each locked step file into ``ctx.views``, with the file
    rules."""
    spec = ctx.spec
    folder = lock_dir(spec)
    lock_json = shown(folder / MANIFEST)
    try:
        lock = read_stack_lock(folder)
    except LockError as exc:
        ctx.add(lock_json, "-", "broken-lock", exc.message)
        return
    if lock is None:
        ctx.add(
            lock_json,
            "-",
            "missing-file",
            f"no lock beside {shown(spec.path)}; run `envbuild lock --stack {shown(spec.path)}`",
        )
        return
    ctx.lock = lock
    if reason := stale_reason(spec, lock):
        ctx.add(
            lock_json,
            "-",
            "stale-lock",
            f"{reason}; run `envbuild lock --stack {shown(spec.path)}`",
        )
    spec_index = {s.name: i for i, s in enumerate(spec.steps)}
    for step in lock.steps:
        if not step.locked:
            ctx.note(f"step {step.name!r} is not locked ({step.reason}); it resolves from the spec")
            continue
        path = lock.folder / (step.file or "")
        file = shown(path)
        if not step.file or not path.is_file():
            ctx.add(
                file,
                "-",
                "missing-file",
                f"the lock file of step {step.name!r} is missing; run `envbuild lock`",
            )
            continue
        try:
            reqs = read_step_file(path, file)
        except LockError as exc:
            ctx.add(file, "-", "broken-lock", exc.message)
            continue
        if sha256_file(path) != step.file_sha256:
            ctx.add(
                file,
                "-",
                "stale-lock",
                f"changed after `envbuild lock` wrote it (sha256 differs from {MANIFEST})",
            )
        for problem in line_problems(reqs):
            ctx.add(file, problem.req.name, problem.rule, problem.reason, line=problem.req.line)
        idx = spec_index.get(step.name, len(spec.steps))
        no_deps = spec.steps[idx].no_deps if idx < len(spec.steps) else step.flags.no_deps
        ctx.views.append(
            StepView(idx, step.name, file, no_deps, reqs, {p.name: p for p in step.packages})
        )
