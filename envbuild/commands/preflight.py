"""``envbuild preflight``: can this host run the stack? One line per check, a verdict, exit 3 on
fail."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    Subparsers,
    add_json_arg,
    add_stack_args,
    load_stack,
    seconds_arg,
)
from envbuild.commands.selection import PreflightArgs, add_selection_args
from envbuild.errors import ConfigError, ExitCode
from envbuild.host.preflight import CHECK_GROUPS, run_preflight
from envbuild.layout import paths_for

if TYPE_CHECKING:
    from envbuild.commands.documents import PreflightDocument

_MARK = {"pass": "pass", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "preflight",
        help="check driver, GPUs, NVLink topology, NUMA, compilers, disks, env, indexes",
        description="Check that this host can run the stack. Exit 3 when a check fails.",
    )
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--root", type=ui_path, help="data root (default: the spec's layout.root)")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="CHECK",
        help=f"run only these checks (repeatable): {', '.join(CHECK_GROUPS)}",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="CHECK",
        help="leave these checks out (repeatable)",
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        help="the interpreter provision --python would make the venv with",
    )
    p.add_argument(
        "--index-timeout",
        type=seconds_arg(maximum=3600),
        default=3.0,
        metavar="S",
        help=(
            "seconds of an index probe's first attempt (default 3; slow sources are retried,"
            " growing, for up to 30 s or ENVBUILD_NET_DEADLINE)"
        ),
    )
    lock = p.add_argument_group(
        "from a committed lock (uv.lock, pylock.toml) instead of a stack spec"
    )
    lock.add_argument(
        "--lock",
        metavar="FILE",
        type=ui_path,
        help=(
            "check the host against this lock's torch (driver for its CUDA, GPU architecture) and "
            "the stack it provisions, before any download"
        ),
    )
    add_selection_args(lock)
    p.set_defaults(func=Handler(run, PreflightArgs))


def ui_path(text: str) -> Path:
    return Path(text).expanduser()


def run(args: PreflightArgs) -> int:
    for name in (*args.only, *args.skip):
        if name not in CHECK_GROUPS:
            raise ConfigError(f"unknown check {name!r}; checks are: {', '.join(CHECK_GROUPS)}")
    groups = [g for g in args.only or CHECK_GROUPS if g not in args.skip]
    if args.lock is None:
        from envbuild.commands.selection import refuse_lock_options

        refuse_lock_options(args)
    if args.lock is not None:
        from envbuild.commands.preflight_lock import preflight_from_lock

        spec, paths, report = preflight_from_lock(args, args.lock, groups)
    else:
        spec = load_stack(args)
        paths = paths_for(spec, args.root)
        report = run_preflight(
            spec, paths, checks=groups, index_timeout=args.index_timeout, python=args.python
        )
    if args.json:
        doc: PreflightDocument = {
            "schema": "envbuild.preflight/1",
            "profile": spec.name,
            "root": str(paths.root),
            **report.to_dict(),
        }
        ui.print_json(doc)
    else:
        rows = [[c.name, _MARK[c.verdict], c.measured, c.expected, c.detail] for c in report.checks]
        ui.print_table(
            f"preflight: {spec.name} (data root {paths.root})",
            ["check", "verdict", "measured", "expected", "note"],
            rows,
        )
        ui.print_text(
            f"verdict: {report.verdict}"
            + (
                f" ({len(report.failed)} failed: {', '.join(c.name for c in report.failed)})"
                if report.failed
                else ""
            )
        )
    return int(ExitCode.PREFLIGHT) if report.verdict == "fail" else 0
