"""``envbuild check-lock``: the CI gate: fail (exit 8) on any way a lock could replace torch.

One line per finding, ``FILE[:LINE]: PACKAGE: REASON [rule]``, on stdout; ``--json`` prints a
document with every finding and notice, ``--markdown`` a pull-request comment, ``--annotations
github`` the workflow commands; one set of writers for both kinds of lock
(``envbuild.gate.output``).

- ``check-lock [--profile P ...]``: envbuild's own locks (``lockfiles/<profile>/``), judged by the
  gate's own-lock rules (``envbuild.gate.rules.ownlock``); several ``--profile`` (or ``--stack``)
  may be given; with none, every profile that has a lock.
- ``check-lock FILE...``: any lockfile (uv.lock, pylock.toml, pip-compile requirements,
  poetry.lock; ``envbuild.gate``) against the torch policy of one ``--profile``/``--stack``
  or of the flags ``--torch-min``, ``--torch-local``, ``--protect``, judged per environment the
  lock installs (``--environment``, ``--python``, ``--group`` narrow them). Output: a table per
  file and one line per finding; ``--explain`` lists what could not be verified.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import Handler, JsonArgs, Subparsers, wheelhouse_arg
from envbuild.errors import ConfigError, ExitCode
from envbuild.gate import FORMATS, Format, Narrow, Policy, check_file
from envbuild.gate.findings import FileReport

if TYPE_CHECKING:
    from envbuild.spec import StackSpec

# The stack spec and the own-lock rules are imported where they are used: `check-lock FILE...` on
# a team's lockfile needs neither, and their imports are a third of its start-up.


def path_arg(text: str) -> Path:
    from envbuild.commands.common import path_arg as common_path_arg

    return common_path_arg(text)


@dataclass(frozen=True)
class CheckLockArgs(JsonArgs):
    """``check-lock``'s options (its ``--profile`` and ``--stack`` repeat: not ``StackArgs``)."""

    files: list[Path]
    format: Format | None
    torch_min: str | None
    torch_local: str | None
    protect: list[str]
    index_url: list[str]
    environment: list[str]
    python: list[str]
    group: list[str]
    extra: list[str]
    accept: Path | None
    explain: bool
    annotations: Literal["github"] | None
    markdown: bool
    markdown_file: Path | None
    profile: list[str]
    stack: list[Path]
    base: str | None
    offline: bool
    no_cache: bool
    online: bool
    wheelhouse: str | None


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "check-lock",
        help=(
            "CI gate: prove a lock (envbuild's or any lockfile) cannot replace, "
            "downgrade or shadow torch"
        ),
    )
    p.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help=(
            "lockfiles to check (uv.lock, pylock.toml, requirements*.txt, poetry.lock); "
            "without: envbuild's own locks"
        ),
    )
    p.add_argument(
        "--format", choices=FORMATS, help="the lockfiles' format (default: detected per file)"
    )
    p.add_argument(
        "--torch-min", metavar="VERSION", help="FILE mode: the lowest torch allowed (e.g. 2.12.0)"
    )
    p.add_argument(
        "--torch-local",
        metavar="TAG",
        help="FILE mode: the local tag torch must carry (e.g. cu132)",
    )
    p.add_argument(
        "--protect",
        metavar="NAME",
        action="append",
        default=[],
        help="FILE mode: a package treated like torch (pinned once, never downgraded); repeatable",
    )
    p.add_argument(
        "--index-url",
        metavar="URL",
        action="append",
        default=[],
        help=(
            "FILE mode: where to read package metadata the lock does not carry (repeatable; "
            "default: the indexes the lock names, else PyPI)"
        ),
    )
    p.add_argument(
        "--environment",
        metavar="MARKER",
        action="append",
        default=[],
        help=(
            "FILE mode: judge only the environments where this PEP 508 marker holds, or a platform"
            " (linux-x86_64, linux-aarch64, macos-arm64, macos-x86_64, windows-amd64, linux, macos,"
            " windows); repeatable"
        ),
    )
    p.add_argument(
        "--python",
        metavar="X.Y",
        action="append",
        default=[],
        help="FILE mode: judge the lock for this Python only (repeatable)",
    )
    p.add_argument(
        "--group",
        metavar="NAME",
        action="append",
        default=[],
        help=(
            "FILE mode: only the environments that choose this conflicting extra or group"
            " (repeatable)"
        ),
    )
    p.add_argument(
        "--extra",
        metavar="NAME",
        action="append",
        default=[],
        help="FILE mode: only the environments that choose this conflicting extra (repeatable)",
    )
    p.add_argument(
        "--accept",
        metavar="FILE",
        type=path_arg,
        help=(
            "FILE mode: reviewed exceptions ([[accept]] tables; default: envbuild-check-lock.toml "
            "beside the lock, else [tool.envbuild.check-lock] in its pyproject.toml)"
        ),
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help=(
            "FILE mode: also list every extension or requirement that could not be verified,"
            " and why"
        ),
    )
    p.add_argument(
        "--annotations",
        choices=["github"],
        help="also print GitHub Actions annotations (::error file=…,line=…::) per finding",
    )
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the findings as a markdown report (a PR comment)",
    )
    p.add_argument(
        "--markdown-file",
        metavar="PATH",
        type=path_arg,
        help="also write the markdown report to PATH (the console output stays as it is)",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        action="append",
        default=[],
        help="a profile to check (repeatable; default: every profile that has a lock)",
    )
    p.add_argument(
        "--stack",
        metavar="FILE",
        type=path_arg,
        action="append",
        default=[],
        help="a stack spec whose lock (beside it) to check (repeatable)",
    )
    p.add_argument(
        "--base",
        metavar="REF_OR_FILE",
        help=(
            "fail on a torch downgrade or re-tag against the lock at this git ref, "
            "or in this file (a release's lock)"
        ),
    )
    p.add_argument(
        "--offline", action="store_true", help="static rules only (no dry-run resolution, no index)"
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help=(
            "FILE mode: do not read the metadata cache (with --offline: judge from the lock alone)"
        ),
    )
    p.add_argument(
        "--online",
        action="store_true",
        help=(
            "envbuild's locks: also prove every locked artifact is still on its index with the same"
            " hash (nightlies are pruned); lists what is gone"
        ),
    )
    p.add_argument(
        "--wheelhouse",
        metavar="DIR|URL",
        type=wheelhouse_arg,
        help="with --online: the wheelhouse where what left its index may still be",
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON on stdout")
    p.set_defaults(func=Handler(run, CheckLockArgs))


def _specs(args: CheckLockArgs) -> list[StackSpec]:
    from envbuild.spec import available_profiles, load_spec, profile_path, resolve_spec
    from envbuild.stacklock.model import MANIFEST

    specs = [resolve_spec(name, None) for name in args.profile]
    specs += [load_spec(path) for path in args.stack]
    if specs:
        return specs
    found = [load_spec(profile_path(n)) for n in available_profiles()]
    found = [s for s in found if (s.path.parent / MANIFEST).is_file()]
    if not found:
        raise ConfigError("no profile with a lock found; name one with --profile or --stack")
    return found


def policy_from_spec(spec: StackSpec) -> Policy:
    """The torch policy of a stack spec: its torch as the floor, its local tag, its protected
    set."""
    abi = spec.abi
    return Policy(
        package=abi.package,
        minimum=abi.version,
        local=abi.local,
        protect=tuple(abi.protect),
        python=spec.python,
    )


def _policy(args: CheckLockArgs) -> Policy:
    if len(args.profile) + len(args.stack) > 1:
        raise ConfigError("check-lock FILE...: give at most one --profile or --stack as the policy")
    spec = None
    if args.profile:
        from envbuild.spec import resolve_spec

        spec = resolve_spec(args.profile[0], None)
    elif args.stack:
        from envbuild.spec import load_spec

        spec = load_spec(args.stack[0])
    base = policy_from_spec(spec) if spec is not None else Policy()
    return Policy(
        package=base.package,
        minimum=args.torch_min or base.minimum,
        local=args.torch_local.lstrip("+") if args.torch_local else base.local,
        protect=tuple(dict.fromkeys([*base.protect, *args.protect])),
        python=base.python,
    )


def _plain_table(report: FileReport) -> str:
    from envbuild.gate.output import table_rows

    columns, body, note = table_rows(report)
    rows = [columns, *body]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{report.file} ({report.format})"]
    lines += [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    if note:
        lines.append(f"  ({note})")
    return "\n".join(lines)


def run_files(args: CheckLockArgs) -> int:
    narrow = Narrow(
        environment=tuple(args.environment),
        python=tuple(args.python),
        group=tuple(args.group),
        extra=tuple(args.extra),
    )
    narrow.validate()
    policy = _policy(args)
    narrow = Narrow(
        environment=narrow.environment,
        python=narrow.python,
        group=narrow.group,
        default_python=policy.python,
        extra=narrow.extra,
    )
    reports = []
    for path in args.files:
        events.emit("step", f"checking {path}")
        report = check_file(
            path,
            policy,
            fmt=args.format,
            base=args.base,
            offline=args.offline,
            index_urls=args.index_url,
            shown=str(path),
            narrow=narrow,
            accept_file=args.accept,
            use_cache=not args.no_cache,
        )
        reports.append(report)
        if not (args.json or args.markdown):
            _console(report, args)
    return _written(reports, policy, args)


def _console(report: FileReport, args: CheckLockArgs) -> None:
    """One report on the console: a lockfile's table of environments, its notes, its findings, a
    last line."""
    from envbuild.gate.output import finding_line, notice_line, summary, table

    if report.environments and report.stack is None:
        if ui.rich_wanted(sys.stdout):
            ui.print_text()
            ui._out.print(table(report))
        else:
            ui.print_text(_plain_table(report))
    for n in report.notices:
        events.emit("info", notice_line(report, n))
    if args.explain:
        for u in report.unverified:
            ui.print_text(f"not verified: {report.file}: {u}")
    # a person reading: 100 columns; a pipe (CI log, grep, editor): one line
    wrap = ui.rich_wanted(sys.stdout)
    for f in report.findings:
        ui.print_text(_wrapped(finding_line(f)) if wrap else finding_line(f))
    events.emit("ok" if report.ok else "fail", summary(report))


def _wrapped(text: str, width: int = 100) -> str:
    """A finding on a terminal: its ``FILE:LINE: PACKAGE:`` head first, the rest wrapped under
    it."""
    import textwrap

    return textwrap.fill(
        text, width=width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    )


def _written(reports: list[FileReport], policy: Policy | None, args: CheckLockArgs) -> int:
    """The writers every report goes through (annotations, JSON or markdown, a markdown file); the
    exit code."""
    from envbuild.gate.output import document, github_annotations, markdown

    if args.annotations == "github":
        ui.print_raw(github_annotations(reports))
    if args.json:
        ui.print_json(document(reports, policy))
    elif args.markdown:
        ui.print_raw(markdown(reports, explain=args.explain))
    if args.markdown_file is not None:
        try:
            args.markdown_file.write_text(markdown(reports, explain=args.explain), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--markdown-file {args.markdown_file}: cannot write it ({exc.strerror})"
            ) from exc
    return int(ExitCode.LOCK) if any(not r.ok for r in reports) else 0


def _writable(path: Path | None) -> None:
    """``--markdown-file``: refused before the check runs when it cannot be written (a folder, a
    missing or read-only parent), not after minutes of checking."""
    import os

    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigError(f"--markdown-file {path}: a folder; give a file path")
    if not parent.is_dir():
        raise ConfigError(f"--markdown-file {path}: its folder {parent} does not exist")
    if not os.access(path if path.exists() else parent, os.W_OK):
        raise ConfigError(f"--markdown-file {path}: not writable")


def run(args: CheckLockArgs) -> int:
    _writable(args.markdown_file)
    if args.files and (args.online or args.wheelhouse):
        raise ConfigError(
            "--online and --wheelhouse check envbuild's own locks (check-lock without FILE); "
            "`check-lock FILE...` reads the lockfiles' metadata with --index-url"
        )
    if args.online and args.offline:
        raise ConfigError("give --online or --offline, not both")
    if args.wheelhouse and not args.online:
        raise ConfigError(
            "--wheelhouse is used with --online (where what left its index may still be)"
        )
    if args.files:
        return run_files(args)
    if (
        args.format
        or args.torch_min
        or args.torch_local
        or args.protect
        or args.index_url
        or args.environment
        or args.python
        or args.group
        or args.extra
        or args.no_cache
        or args.accept
        or args.explain
    ):
        raise ConfigError(
            "--format, --torch-min, --torch-local, --protect, --index-url, --environment, --python,"
            " --group, --extra, --no-cache, --accept and --explain apply to `check-lock FILE...`;"
            " name the lockfiles to check"
        )
    from envbuild.gate.rules.ownlock import Options, check_stack

    opts = Options(
        base=args.base, offline=args.offline, online=args.online, wheelhouse=args.wheelhouse
    )
    reports = []
    for spec in _specs(args):
        events.emit("step", f"checking the lock of {spec.name} ({spec.path.parent})")
        report = check_stack(spec, opts)
        reports.append(report)
        if not (args.json or args.markdown):
            _console(report, args)
    return _written(reports, None, args)
