"""``check-lock FILE...``: read a lockfile, enumerate the environments it installs, run every rule
family on each, apply the reviewed exceptions, and report (``envbuild.gate.output``)."""

from __future__ import annotations

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
from envbuild.gate.lockfile import (
    MAX_BYTES,
    MAX_PACKAGES,
    ProjectLock,
    gate_read,
    read_lock_text,
    read_lockfile,
)
from envbuild.gate.metadata import MetadataSources
from envbuild.gate.model import (
    Entry,
    Environment,
    Format,
    LockParseError,
    Members,
    ParsedLock,
    Reach,
    where_words,
)
from envbuild.gate.rules import FAMILIES, history

__all__ = [
    "MAX_BYTES",
    "MAX_PACKAGES",
    "FileReport",
    "check_file",
    "judge_environment",
    "judge_lock",
    "read_lockfile",
]


def view_of(
    env: Environment,
    members: Members,
    torch_name: str,
    *,
    selections: int = 1,
    environments: int = 1,
    mask: int = 1,
) -> View:
    """The rules' view of one environment and what it installs (its torch: the one it installs,
    None where it installs none or several)."""
    by_name: dict[str, list[Entry]] = {}
    for e in members.entries:
        by_name.setdefault(e.name, []).append(e)
    torches = by_name.get(torch_name, [])
    torch = torches[0] if len({t.version for t in torches}) == 1 and torches[0].version else None
    bare = Environment(env.platform, env.python, env.values)
    return View(env, members, torch, by_name, bare, selections, environments, mask)


def _views(groups: list[Group], reach: Reach, torch_name: str) -> list[View]:
    return [
        view_of(
            g.env,
            reach.members(g.j),
            torch_name,
            selections=g.selections,
            environments=g.environments,
            mask=g.mask,
        )
        for g in groups
    ]


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
    """``check-lock FILE``: read the lock (``gate.lockfile``), enumerate its environments and judge
    them (``judge_lock``)."""
    t0 = time.monotonic()
    text = read_lock_text(path, fmt)
    report = FileReport(shown or str(path), text.format)
    exceptions = accepting.load_for(path, accept_file, text.project)
    lock, report.findings = gate_read(text, report.file)
    if lock is not None:
        judge_lock(
            lock,
            report,
            policy,
            exceptions,
            base=base,
            offline=offline,
            index_urls=index_urls,
            narrow=narrow or Narrow(default_python=policy.python),
            use_cache=use_cache,
        )
    report.seconds = time.monotonic() - t0
    return report


def judge_lock(
    read: ProjectLock,
    report: FileReport,
    policy: Policy,
    exceptions: list[accepting.Exception_],
    *,
    base: str | None = None,
    offline: bool = False,
    index_urls: Iterable[str] = (),
    narrow: Narrow,
    use_cache: bool = True,
) -> None:
    """Every environment of a parsed lock (narrowed) judged under ``policy``, into ``report``."""
    lock = read.parsed
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
    views = _views(group(space, reach, names), reach, policy.torch)
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
    ctx = _context(report, lock, policy, views, offline, index_urls, use_cache)
    ctx, installable = _judge(ctx, space, reach)
    for text in ctx.no_file_notes():
        ctx.note(text)
    if base:
        _history(ctx, read, base, narrow, names, space, installable)
    _verdict(
        ctx,
        report,
        exceptions,
        installable,
        asked=bool(narrow.environment),
        python_named=bool(narrow.python),
    )


def judge_environment(
    read: ProjectLock,
    env: Environment,
    members: Members,
    report: FileReport,
    policy: Policy,
    exceptions: list[accepting.Exception_],
) -> None:
    """One environment of a parsed lock, exactly what it installs (``members``: what a provision
    selected), judged under ``policy`` offline, into ``report``: the rules a ``check-lock`` of that
    environment runs, with no other environment enumerated."""
    t0 = time.monotonic()
    view = view_of(env, members, policy.torch)
    ctx = _context(report, read.parsed, policy, [view], True, (), True)
    for family in FAMILIES:
        family.check(ctx)
    installable = {env.name: _installable(ctx, view)}
    for text in ctx.no_file_notes():
        ctx.note(text)
    _verdict(ctx, report, exceptions, installable, asked=True, python_named=True)
    report.seconds = time.monotonic() - t0


def _context(
    report: FileReport,
    lock: ParsedLock,
    policy: Policy,
    views: list[View],
    offline: bool,
    index_urls: Iterable[str],
    use_cache: bool,
) -> Context:
    return Context(
        report.file,
        lock,
        policy,
        views,
        offline=offline,
        index_urls=tuple(index_urls),
        sources=MetadataSources(offline=offline, use_cache=use_cache),
    )


def _verdict(
    ctx: Context,
    report: FileReport,
    exceptions: list[accepting.Exception_],
    installable: dict[str, bool | None],
    *,
    asked: bool,
    python_named: bool,
) -> None:
    """The judged views into ``report``: a torch with no file that installs (a finding where the
    environment was ``asked`` for by name, else a note), the reviewed exceptions applied, the rows
    and the notes."""
    policy, views = ctx.policy, ctx.views
    nofile = [v for v in views if installable[v.env.name] is False]
    # asked for by name: a platform (--environment) that has no torch file for any Python, or a
    # Python named too (--python); a Python the lock allows beside others that have one is a note
    with_file = {v.env.platform for v in views if installable[v.env.name] is not False}
    named = [v for v in nofile if asked and (python_named or v.env.platform not in with_file)]
    for v in named:
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
    noted = [v for v in nofile if v not in named]
    if noted:
        quote = f'rows "{NO_FILE}"; ' if NO_FILE in in_rows else ""
        whole = {v.env.platform for v in noted} - with_file  # platforms no Python installs on
        how = (
            "--environment makes it a finding"
            if whole == {v.env.platform for v in noted}
            else "--environment with --python makes it a finding"
            if not whole
            else "--environment makes it a finding where no Python has one, with --python elsewhere"
        )
        ctx.note(
            f"no {policy.torch} file installs on {where_words(v.env for v in noted)} ({quote}{how})"
        )
    for said in dict.fromkeys(unknown.values()):
        at = where_words(v.env for v in views if unknown.get(v.env.name) == said)
        quote = f' (rows "{said}")' if said in in_rows else ""
        ctx.note(f"{policy.torch} on {at}: {_UNKNOWN_HOW[said]}{quote}")
    for text in ctx.sources.notes():  # after every lookup, the torch files' included
        ctx.note(text)
    report.findings = findings
    report.notices = [*ctx.lock.notes, *ctx.notices]
    report.unverified = ctx.explanations()
    report.unchecked = ctx.unchecked


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
        _look_up_files(ctx)
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
        out += _views(by_pythons(space, whole, sides), reach, torch)
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


def _unnamed(ctx: Context, view: View) -> list[Entry]:
    """The view's torch pins where none names a file (requirements lines: their files are looked
    up on their index), else none."""
    entries = view.by_name.get(ctx.policy.torch) or []
    if ctx.lock.format != "requirements" or any(e.files or e.url for e in entries):
        return []
    return entries


def _look_up_files(ctx: Context) -> None:
    """Online, the files of each view's torch pins that name none, as their index lists them (by
    hash, else by version: ``metadata.files_on_index``), into ``ctx.index_files`` (kept across
    splits); a view's look-ups stop at the first pin nothing is found for."""
    from envbuild.gate.metadata import files_on_index

    if ctx.offline:
        return
    cache = ctx.index_files
    for view in ctx.views:
        for e in _unnamed(ctx, view):
            if e.key not in cache:
                cache[e.key] = files_on_index(e, ctx.lock, ctx.index_urls, ctx.sources)
            if cache[e.key] is None:
                break


def _installable(ctx: Context, view: View) -> bool | None:
    """Whether the view's torch has a file that installs there: a wheel whose tags fit its platform
    and each of its Pythons, or an sdist (True where the lock names no files of a git pin or a
    folder). A requirements pin names no file: its files are those its index lists
    (``_look_up_files``, online); offline, or when nothing is found there, None: not known."""
    from envbuild.index.wheeltags import installs_on

    entries = view.by_name.get(ctx.policy.torch) or []
    if not entries:
        return True
    files = [f for e in entries for f, _ in e.files]
    for e in _unnamed(ctx, view):
        got = None if ctx.offline else ctx.index_files.get(e.key)
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
    read: ProjectLock,
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
        rel, text = history.file_at_ref(read.path, ref)
        where, base_kind = Path(f"{ref}:{rel}"), read.format
    if text is None:
        ctx.note(f"--base {ref}: {rel} does not exist there; nothing to compare")
        return
    try:
        old = parse(where, text, base_kind)
    except LockParseError as exc:
        ctx.note(f"--base {ref}: {rel} there is not readable ({exc}); nothing to compare")
        return
    history.check(ctx, old, ref, narrow, names, head=space, installable=installable)
