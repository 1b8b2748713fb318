"""``check-lock FILE...``: read a lockfile, enumerate the environments it installs, run every rule
family on each, apply the reviewed exceptions, and report (``envbuild.gate.output``)."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuild.errors import ConfigError
from envbuild.gate import accept as accepting
from envbuild.gate.context import Context, View
from envbuild.gate.environments import PLATFORMS, Narrow, choices, make_space
from envbuild.gate.findings import Finding, Policy
from envbuild.gate.formats import detect, parse
from envbuild.gate.groups import Group, group, judged_names
from envbuild.gate.metadata import Sources
from envbuild.gate.model import Environment, Format, Lock, LockParseError, Reach
from envbuild.gate.rules import FAMILIES, history

__all__ = ["MAX_BYTES", "MAX_PACKAGES", "FileReport", "check_file", "read_lockfile"]

MAX_BYTES = 64 << 20  # the largest real uv.lock files are a few MB
MAX_PACKAGES = 20_000  # the largest real locks hold a few thousand


@dataclass
class EnvRow:
    """One judged group of environments: its name, its torch, how many selections and environments it stands for."""

    name: str
    torch: str | None
    findings: int = 0
    selections: int = 1
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "torch": self.torch, "findings": self.findings,
                "selections": self.selections, "environments": self.count}


@dataclass
class FileReport:
    file: str
    format: str
    environments: list[EnvRow] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # accepted ones included (``accepted`` set)
    notices: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # --explain: what could not be verified, and why
    unchecked: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted is None]

    @property
    def accepted(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted is not None]

    @property
    def ok(self) -> bool:
        return not self.failing

    @property
    def torches(self) -> list[str]:
        return sorted({r.torch for r in self.environments if r.torch})

    def to_json(self) -> dict[str, Any]:
        torches = self.torches
        return {"file": self.file, "format": self.format, "ok": self.ok,
                "torch": torches[0] if len(torches) == 1 else None, "torches": torches,
                "environments": [r.to_json() for r in self.environments],
                "findings": [f.to_json() for f in self.failing],
                "accepted": [f.to_json() for f in self.accepted],
                "notices": self.notices, "unverified": self.unverified, "unchecked": self.unchecked,
                "seconds": round(self.seconds, 4)}


def read_lockfile(path: Path) -> str:
    """The text of a lockfile: a regular file, at most ``MAX_BYTES``, UTF-8 (else ConfigError, exit 2)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such lockfile") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file; a lockfile is read from a file")
    if st.st_size > MAX_BYTES:
        raise ConfigError(f"{path}: {st.st_size / (1 << 20):.0f} MiB; a lockfile is read up to "
                          f"{MAX_BYTES >> 20} MiB (the largest real locks are a few MB)")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); lockfiles are UTF-8") from None


def _views(lock: Lock, groups: list[Group], reach: Reach, torch_name: str) -> list[View]:
    views = []
    for g in groups:
        members = reach.members(g.j)
        by_name: dict[str, list[Any]] = {}
        for e in members.entries:
            by_name.setdefault(e.name, []).append(e)
        torches = by_name.get(torch_name, [])
        torch = torches[0] if len({t.version for t in torches}) == 1 and torches[0].version else None
        bare = Environment(g.env.platform, g.env.python, g.env.values)
        views.append(View(g.env, members, torch, by_name, bare, g.selections, g.environments))
    return views


def check_file(path: Path, policy: Policy, *, fmt: Format | None = None, base: str | None = None,
               offline: bool = False, index_urls: Iterable[str] = (), shown: str | None = None,
               narrow: Narrow | None = None, accept_file: Path | None = None, use_cache: bool = True) -> FileReport:
    t0 = time.monotonic()
    narrow = narrow or Narrow(default_python=policy.python)
    text = read_lockfile(path)
    kind = fmt or detect(path, text)
    report = FileReport(shown or str(path), kind)
    exceptions = accepting.load_for(path, accept_file)
    tables = text.count("\n[[package") + text.startswith("[[package")  # [[package]] / [[packages]], counted unread
    if tables > MAX_PACKAGES:
        report.findings.append(Finding(report.file, "-", "broken-lock", f"{tables} packages: more than any real "
                                       f"lock holds (the gate reads up to {MAX_PACKAGES})"))
        report.seconds = time.monotonic() - t0
        return report
    try:
        lock = parse(path, text, kind)
    except LockParseError as exc:
        report.findings.append(Finding(report.file, "-", "broken-lock", f"not a readable {kind} file: {exc}"))
        report.seconds = time.monotonic() - t0
        return report
    if len(lock.entries) > MAX_PACKAGES:
        report.findings.append(Finding(report.file, "-", "broken-lock", f"{len(lock.entries)} packages: more than "
                                       f"any real lock holds (the gate reads up to {MAX_PACKAGES})"))
        report.seconds = time.monotonic() - t0
        return report
    names = judged_names(lock, policy)
    space = make_space(lock, narrow, names)
    if not space.active:  # a typo in --group must not turn the gate green by judging nothing
        everything = make_space(lock, Narrow(default_python=narrow.default_python), names)
        words = choices(lock)
        platforms = sorted({PLATFORMS[p][0] for p, _ in everything.blocks})
        raise ConfigError(
            f"{report.file}: no environment of this lock matches --environment/--python/--extra/--group, so "
            "nothing would be judged", hint=(f"Its conflicting extras/groups: {', '.join(words)}. " if words else
                                             "It has no conflicting extras or groups. ")
            + f"Platforms: {', '.join(platforms)}.")
    lock.notes += space.notes
    reach = lock.walk(space)
    views = _views(lock, group(space, reach, names), reach, policy.torch)
    with_torch = {v.env.platform for v in views if v.by_name.get(policy.torch)}
    bare = [v for v in views if not v.by_name.get(policy.torch) and v.env.platform in with_torch]
    if bare:  # a selection that installs no torch where others do: no verdict to give there
        views = [v for v in views if v not in bare]
        shown = "; ".join(v.env.name for v in bare[:3]) + (f" and {len(bare) - 3} more" if len(bare) > 3 else "")
        lock.notes.append(f"{sum(v.environments for v in bare)} environment(s) install no {policy.torch}: {shown}")
    ctx = Context(report.file, lock, policy, views, offline=offline, index_urls=tuple(index_urls),
                  sources=Sources(offline=offline, use_cache=use_cache))
    for family in FAMILIES:
        family.check(ctx)
    for text in ctx.sources.notes():
        ctx.note(text)
    if base:
        _history(ctx, path, kind, base, narrow, names)
    for view in views:
        report.environments.append(EnvRow(view.env.name, view.torch.version if view.torch else None,
                                          selections=view.selections, count=view.environments))
    findings = accepting.apply(list(ctx.findings.values()), exceptions)
    for row in report.environments:
        row.findings = sum(1 for f in findings if f.accepted is None and row.name in f.environments)
    report.findings = findings
    report.notices = [*lock.notes, *ctx.notices]
    report.unverified = ctx.explanations()
    report.unchecked = ctx.unchecked
    report.seconds = time.monotonic() - t0
    return report


def _history(ctx: Context, path: Path, kind: Format, ref: str, narrow: Narrow, names: set[str] | None) -> None:
    from envbuild.lock.report import file_at_ref

    rel, text = file_at_ref(path, ref)
    if text is None:
        ctx.note(f"--base {ref}: {rel} does not exist there; nothing to compare")
        return
    try:
        old = parse(Path(f"{ref}:{rel}"), text, kind)
    except LockParseError as exc:
        ctx.note(f"--base {ref}: {rel} there is not readable ({exc}); nothing to compare")
        return
    history.check(ctx, old, ref, narrow, names)
