"""``check-lock FILE...``: read a lockfile, enumerate the environments it installs, run every rule
family on each, apply the reviewed exceptions, and report (``envbuild.gate.output``)."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import envbuild.gate.accept as accepting
from envbuild.errors import ConfigError
from envbuild.gate.context import Context, View
from envbuild.gate.environments import PLATFORMS, Narrow, Space, choices, make_space
from envbuild.gate.findings import NO_FILE, EnvRow, FileReport, Finding, Policy
from envbuild.gate.formats import detect, parse
from envbuild.gate.groups import Group, by_pythons, group, judged_names
from envbuild.gate.metadata import MetadataSources
from envbuild.gate.model import (
    Environment,
    Format,
    LockParseError,
    ParsedLock,
    Reach,
    where_words,
)
from envbuild.gate.rules import FAMILIES, history

__all__ = ["MAX_BYTES", "MAX_PACKAGES", "FileReport", "check_file", "read_lockfile"]

MAX_BYTES = 64 << 20  # the largest real uv.lock files are a few MB
MAX_PACKAGES = 20_000  # the largest real locks hold a few thousand


def read_lockfile(path: Path) -> str:
    """The text of a lockfile: a regular file, at most ``MAX_BYTES``, UTF-8 (else ConfigError, exit
    2)."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such lockfile") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file; a lockfile is read from a file")
    if st.st_size > MAX_BYTES:
        raise ConfigError(
            f"{path}: {st.st_size / (1 << 20):.0f} MiB; a lockfile is read up to "
            f"{MAX_BYTES >> 20} MiB (the largest real locks are a few MB)"
        )
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); lockfiles are UTF-8"
        ) from exc


def _views(lock: ParsedLock, groups: list[Group], reach: Reach, torch_name: str) -> list[View]:
    views = []
    for g in groups:
        members = reach.members(g.j)
        by_name: dict[str, list[Any]] = {}
        for e in members.entries:
            by_name.setdefault(e.name, []).append(e)
        torches = by_name.get(torch_name, [])
        torch = (
            torches[0] if len({t.version for t in torches}) == 1 and torches[0].version else None
        )
        bare = Environment(g.env.platform, g.env.python, g.env.values)
        views.append(
            View(g.env, members, torch, by_name, bare, g.selections, g.environments, g.mask)
        )
    return views


def check_file(
    path: Path,
    policy: Policy,
    *,
    fmt: Format | None = None,
    base: str | None = None,
    offline: bool = False,
    index_urls: Iterable[str] = (),
    shown: str | None = None,
    narrow: Narrow | None = None,
    accept_file: Path | None = None,
    use_cache: bool = True,
) -> FileReport:
    t0 = time.monotonic()
    narrow = narrow or Narrow(default_python=policy.python)
    text = read_lockfile(path)
    kind = fmt or detect(path, text)
    report = FileReport(shown or str(path), kind)
    exceptions = accepting.load_for(path, accept_file)
    # [[package]] / [[packages]], counted unread
    tables = text.count("\n[[package") + text.startswith("[[package")
    if tables > MAX_PACKAGES:
        report.findings.append(
            Finding(
                report.file,
                "-",
                "broken-lock",
                f"{tables} packages: more than any real "
                f"lock holds (the gate reads up to {MAX_PACKAGES})",
            )
        )
        report.seconds = time.monotonic() - t0
        return report
    try:
        lock = parse(path, text, kind)
    except LockParseError as exc:
        report.findings.append(
            Finding(report.file, "-", "broken-lock", f"not a readable {kind} file: {exc}")
        )
        report.seconds = time.monotonic() - t0
        return report
    if len(lock.entries) > MAX_PACKAGES:
        report.findings.append(
            Finding(
                report.file,
                "-",
                "broken-lock",
                f"{len(lock.entries)} packages: more than "
                f"any real lock holds (the gate reads up to {MAX_PACKAGES})",
            )
        )
        report.seconds = time.monotonic() - t0
        return report
    for bad in lock.unread:
        report.findings.append(
            Finding(
                report.file,
                "-",
                "broken-line",
                f"`{bad.text}` is not a line pip reads ({bad.why}); the rest of the file is judged",
                line=bad.line,
            )
        )
    names = judged_names(lock, policy)
    space = make_space(lock, narrow, names)
    if not space.active:  # a typo in --group must not turn the gate green by judging nothing
        everything = make_space(lock, Narrow(default_python=narrow.default_python), names)
        words = choices(lock)
        platforms = sorted({PLATFORMS[p][0] for p, _ in everything.blocks})
        raise ConfigError(
            f"{report.file}: no environment of this lock matches"
            " --environment/--python/--extra/--group, so nothing would be judged",
            hint=(
                f"Its {_choices_named(lock)}: {', '.join(words)}. "
                if words
                else f"It has no {_choices_named(lock)}. "
            )
            + f"Platforms: {', '.join(platforms)}. Pythons: {', '.join(everything.pythons)}.",
        )
    lock.notes += space.notes
    reach = lock.walk(space)
    views = _views(lock, group(space, reach, names), reach, policy.torch)
    with_torch = {v.env.platform for v in views if v.by_name.get(policy.torch)}
    bare = [v for v in views if not v.by_name.get(policy.torch) and v.env.platform in with_torch]
    if bare:  # a selection that installs no torch where others do: no verdict to give there
        views = [v for v in views if v not in bare]
        shown = "; ".join(v.env.name for v in bare[:3]) + (
            f" and {len(bare) - 3} more" if len(bare) > 3 else ""
        )
        lock.notes.append(
            f"{sum(v.environments for v in bare)} environment(s) install no {policy.torch}: {shown}"
        )
    sources = MetadataSources(offline=offline, use_cache=use_cache)
    ctx, installable = _judge(
        Context(
            report.file,
            lock,
            policy,
            views,
            offline=offline,
            index_urls=tuple(index_urls),
            sources=sources,
        ),
        space,
        reach,
    )
    views = ctx.views
    for text in ctx.no_file_notes():
        ctx.note(text)
    if base:
        _history(ctx, path, kind, base, narrow, names, space, installable)
    nofile = [v for v in views if installable[v.env.name] is False]
    for v in nofile:
        if narrow.environment:  # asked for by name: a finding, not a note
            ctx.add(
                policy.torch,
                "no-file",
                f"the lock has no file of {policy.torch} that installs on {where_words([v.env])}",
                v.env,
                next(iter(v.by_name.get(policy.torch) or ()), None),
            )
    unknown = {v.env.name: _unknown_words(ctx, v) for v in views if installable[v.env.name] is None}
    findings = accepting.apply([*report.findings, *ctx.findings.values()], exceptions)
    report.environments = _rows(views, findings, installable, unknown)
    in_rows = {r.result for r in report.environments}  # a note quotes only what a row says
    if nofile and not narrow.environment:
        quote = f'rows "{NO_FILE}"; ' if NO_FILE in in_rows else ""
        ctx.note(
            f"no {policy.torch} file installs on {where_words(v.env for v in nofile)}"
            f" ({quote}--environment makes it a finding)"
        )
    for said in dict.fromkeys(unknown.values()):
        at = where_words(v.env for v in views if unknown.get(v.env.name) == said)
        quote = f' (rows "{said}")' if said in in_rows else ""
        ctx.note(f"{policy.torch} on {at}: {_UNKNOWN_HOW[said]}{quote}")
    for text in ctx.sources.notes():  # after every lookup, the torch files' included
        ctx.note(text)
    report.findings = findings
    report.notices = [*lock.notes, *ctx.notices]
    report.unverified = ctx.explanations()
    report.unchecked = ctx.unchecked
    report.seconds = time.monotonic() - t0
    return report


def _choices_named(lock: ParsedLock) -> str:
    return "pixi environments" if lock.format == "pixi.lock" else "conflicting extras/groups"


def _judge(ctx: Context, space: Space, reach: Reach) -> tuple[Context, dict[str, bool | None]]:
    """Every rule family on ``ctx.views``, and whether each view's torch has a file there; a view
    whose Pythons answered a question apart is split by them and everything judged again (what was
    read from indexes is kept), until every view's Pythons answer alike."""
    views = ctx.views
    for _ in range(len(space.pythons)):
        for family in FAMILIES:
            family.check(ctx)
        installable = {v.env.name: _installable(ctx, v) for v in views}
        if not ctx.splits:
            break
        views = _split(space, reach, views, ctx.splits, ctx.policy.torch)
        ctx = replace(
            ctx,
            views=views,
            findings={},
            notices=[],
            explain={},
            unchecked=[],
            splits={},
            _no_file={},
            _some_file={},
        )
    return ctx, installable


def _split(
    space: Space, reach: Reach, views: list[View], splits: dict[int, list[set[str]]], torch: str
) -> list[View]:
    out: list[View] = []
    for v in views:
        sides = splits.get(v.mask)
        if not sides:
            out.append(v)
            continue
        j = (v.mask & -v.mask).bit_length() - 1
        whole = Group(v.env, j, v.mask, v.selections, v.environments)
        out += _views(space.lock, by_pythons(space, whole, sides), reach, torch)
    return out


_UNKNOWN_HOW = {
    "not known offline": (
        "--offline: its pins name no file, so where they install is not known (online, their"
        " hashes are looked up on the index)"
    ),
    "not known: the index did not answer": (
        "its pins name no file, and the index that serves them did not answer"
    ),
    "not known: no file found": (
        "its pins name no file, and its index lists none of theirs (by hash, else by version)"
    ),
}


def _unknown_words(ctx: Context, view: View) -> str:
    """What a row whose torch files are not known says, and why for this one."""
    if ctx.offline:
        return "not known offline"
    torches = view.by_name.get(ctx.policy.torch) or []
    if any(ctx.sources.not_answered(e.label()) for e in torches):
        return "not known: the index did not answer"
    return "not known: no file found"


def _installable(ctx: Context, view: View) -> bool | None:
    """Whether the view's torch has a file that installs there: a wheel whose tags fit its platform
    and each of its Pythons, or an sdist (True where the lock names no files of a git pin or a
    folder). A requirements pin names no file: online its files are looked up on its index by hash
    (by version when unhashed); offline, or when nothing is found there, None: not known."""
    from envbuild.gate.metadata import files_on_index
    from envbuild.index.wheeltags import installs_on

    entries = view.by_name.get(ctx.policy.torch) or []
    if not entries:
        return True
    files = [f for e in entries for f, _ in e.files]
    if not files and ctx.lock.format == "requirements" and not any(e.url for e in entries):
        if ctx.offline:
            return None
        cache = ctx.index_files
        for e in entries:
            if e.key not in cache:
                cache[e.key] = files_on_index(e, ctx.lock, ctx.index_urls, ctx.sources)
            got = cache[e.key]
            if got is None:
                return None
            files += got
    if not files:
        return True
    return ctx.ask(
        view,
        {py: any(installs_on(f, py, view.env.platform) for f in files) for py in view.pythons},
    )


def _rows(
    views: list[View],
    findings: list[Finding],
    installable: dict[str, bool | None],
    unknown: dict[str, str],
) -> list[EnvRow]:
    """A table row per view, except that views of one platform and selection, with the same torch
    and the same findings, on consecutive Pythons, read as one row ("python 3.10–3.12"): they were
    judged apart (a torch dependency differs by Python) and answered alike. Findings name the rows.
    """
    order = sorted(
        {p for v in views for p in v.env.pythons or (v.env.python,)},
        key=lambda p: int(p.split(".")[1]),
    )
    several = len(order) > 1
    keyed: dict[tuple[Any, ...], list[View]] = {}
    for view in views:
        said = frozenset(i for i, f in enumerate(findings) if view.env.name in f.environments)
        keyed.setdefault(
            (
                view.env.platform,
                view.env.selection,
                view.torch.version if view.torch else None,
                said,
                installable.get(view.env.name, True),
                unknown.get(view.env.name),
            ),
            [],
        ).append(view)
    rename: dict[str, str] = {}
    rows: list[tuple[int, EnvRow]] = []
    for (_, _, torch, _, can, why), views_alike in keyed.items():
        views_alike.sort(key=lambda v: order.index((v.env.pythons or (v.env.python,))[0]))
        runs: list[list[View]] = []
        for v in views_alike:
            first = order.index((v.env.pythons or (v.env.python,))[0])
            if (
                runs
                and order.index((runs[-1][-1].env.pythons or (runs[-1][-1].env.python,))[-1]) + 1
                == first
            ):
                runs[-1].append(v)
            else:
                runs.append([v])
        for run in runs:
            pythons = tuple(p for v in run for p in v.env.pythons or (v.env.python,))
            env = (
                replace(run[0].env, pythons=pythons, _cache=run[0].env._cache)
                if several
                else run[0].env
            )
            for v in run:
                rename[v.env.name] = env.name
            position = views.index(run[0])
            rows.append(
                (
                    position,
                    EnvRow(
                        env.name,
                        torch,
                        selections=max(v.selections for v in run),
                        count=sum(v.environments for v in run),
                        installable=can,
                        unknown=why or "",
                    ),
                )
            )
    for f in findings:
        f.environments = list(dict.fromkeys(rename.get(n, n) for n in f.environments))
    out = [row for _, row in sorted(rows, key=lambda x: x[0])]
    for row in out:
        row.findings = sum(1 for f in findings if f.accepted is None and row.name in f.environments)
    return out


def _history(
    ctx: Context,
    path: Path,
    kind: Format,
    ref: str,
    narrow: Narrow,
    names: set[str] | None,
    space: Space,
    installable: dict[str, bool | None],
) -> None:
    given = Path(ref).expanduser()
    text: str | None
    if given.is_file():  # a file (a release's lock): read as it is, no git needed
        rel, text = str(given), read_lockfile(given)
        where, base_kind = given, detect(given, text)
    else:
        rel, text = history.file_at_ref(path, ref)
        where, base_kind = Path(f"{ref}:{rel}"), kind
    if text is None:
        ctx.note(f"--base {ref}: {rel} does not exist there; nothing to compare")
        return
    try:
        old = parse(where, text, base_kind)
    except LockParseError as exc:
        ctx.note(f"--base {ref}: {rel} there is not readable ({exc}); nothing to compare")
        return
    history.check(ctx, old, ref, narrow, names, head=space, installable=installable)
