"""``envbuild lock``: write the per-step hash-pinned lock (and pylock.toml) beside the spec, and say
what moved; ``--check`` says whether there is anything to do, without resolving."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    JsonArgs,
    StackArgs,
    Subparsers,
    add_json_arg,
    add_stack_args,
    load_stack,
    path_arg,
    wheelhouse_arg,
)
from envbuild.errors import ConfigError, ExitCode
from envbuild.spec import StackSpec
from envbuild.stacklock.changes import Change
from envbuild.stacklock.make import LockOptions, LockResult, lock_stack, lock_status
from envbuild.stacklock.relock import parse_upgrades
from envbuild.stacklock.resolver import RESOLVERS, ResolverChoice

if TYPE_CHECKING:
    from envbuild.commands.documents import LockCheckDocument, LockDocument

# `lock --check`: the lock is not current for the spec (8, as a stale lock is everywhere)
STALE = int(ExitCode.LOCK)


@dataclass(frozen=True)
class LockCommandArgs(StackArgs, JsonArgs):
    """``lock``'s options."""

    python: str | None
    resolver: ResolverChoice
    wheelhouse: str | None
    skip_step: list[str]
    output: Path | None
    no_pylock: bool
    upgrade_package: list[str]
    upgrade: bool
    resolve_all: bool
    check: bool
    markdown: bool
    built_wheels: list[Path]


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "lock", help="compile each step into a hash-pinned requirements file (pip-tools)"
    )
    add_stack_args(p)
    add_json_arg(p)
    _add_resolve_args(p)
    _add_output_args(p)
    _add_upgrade_args(p)
    _add_report_args(p)
    p.set_defaults(func=Handler(run, LockCommandArgs))


def _add_resolve_args(p: argparse.ArgumentParser) -> None:
    """How each step resolves: the interpreter, the resolver, the only source, the steps left
    out."""
    p.add_argument(
        "--python",
        metavar="PATH",
        help=(
            "pip-compile under this interpreter (default: this one when it "
            "is the stack's Python, else uv resolves for the stack's Python and [target] platform)"
        ),
    )
    p.add_argument(
        "--resolver",
        choices=RESOLVERS,
        default="auto",
        help="auto (default): pip-compile when this interpreter is the target, else uv pip compile",
    )
    p.add_argument(
        "--wheelhouse",
        metavar="DIR|URL",
        type=wheelhouse_arg,
        help="resolve every step only from this find-links folder or page (offline)",
    )
    p.add_argument(
        "--skip-step",
        metavar="NAME",
        action="append",
        default=[],
        help="leave this step out of the lock (it resolves from the spec); repeatable",
    )


def _add_output_args(p: argparse.ArgumentParser) -> None:
    """Where the lock is written, and whether the PEP 751 export is."""
    p.add_argument(
        "--output",
        type=path_arg,
        metavar="DIR",
        help="write the lock here (default: beside the spec)",
    )
    p.add_argument(
        "--no-pylock", action="store_true", help="do not write the PEP 751 pylock.toml export"
    )


def _add_upgrade_args(p: argparse.ArgumentParser) -> None:
    """What may move: one package, every package, or every step resolved again."""
    p.add_argument(
        "--upgrade-package",
        "-P",
        metavar="NAME[==VERSION]",
        action="append",
        default=[],
        help=(
            "move this package (to its newest match, or to VERSION) in every step that pins it; "
            "nothing else moves; repeatable"
        ),
    )
    p.add_argument(
        "--upgrade",
        "-U",
        action="store_true",
        help=(
            "move every package to its newest match (default: keep every pin that still satisfies"
            " the spec)"
        ),
    )
    p.add_argument(
        "--resolve-all",
        action="store_true",
        help="resolve every step again, even the current ones (pins still kept unless --upgrade)",
    )


def _add_report_args(p: argparse.ArgumentParser) -> None:
    """What is said about the lock: current or not, what moved, the wheels to rebuild."""
    p.add_argument(
        "--check",
        action="store_true",
        help=(
            "exit 0 when the lock is current for the spec, 8 (a stale lock) listing the stale"
            " steps; resolves nothing"
        ),
    )
    p.add_argument(
        "--markdown", action="store_true", help="print what moved as markdown (a PR description)"
    )
    p.add_argument(
        "--built-wheels",
        type=path_arg,
        metavar="DIR",
        action="append",
        default=[],
        help=(
            "a wheelhouse whose `wheelhouse build` wheels are listed for a rebuild when torch moves"
            " (default: ./wheelhouse); repeatable"
        ),
    )


def run(args: LockCommandArgs) -> int:
    spec = load_stack(args)
    if args.check:
        if args.upgrade_package or args.upgrade or args.resolve_all:
            raise ConfigError(
                "--check resolves nothing: it cannot be given with --upgrade, --upgrade-package or "
                "--resolve-all"
            )
        return _check(spec, args)
    upgrade = parse_upgrades(args.upgrade_package, args.upgrade)
    dirs = [*args.built_wheels] or [Path("wheelhouse")]
    if args.wheelhouse and Path(args.wheelhouse).is_dir():
        dirs.append(Path(args.wheelhouse))
    result = lock_stack(
        spec,
        LockOptions(
            python=args.python,
            resolver=args.resolver,
            wheelhouse=args.wheelhouse,
            skip=tuple(args.skip_step),
            output=args.output,
            export_pylock=not args.no_pylock,
            upgrade=upgrade,
            resolve_all=args.resolve_all,
            wheel_dirs=tuple(dirs),
        ),
    )
    if args.json:
        ui.print_json(_json(result))
        return 0
    if args.markdown:
        ui.print_raw(markdown(spec, result))
        return 0
    if not result.written:
        events.emit(
            "ok",
            f"{spec.name}: the lock in {result.folder} is current for {spec.path.name}; nothing to"
            f" do ({result.seconds:.2f} s)",
        )
        return 0
    events.emit(
        "ok",
        f"{spec.name}: locked {len(spec.steps) - len(result.skipped)} of {len(spec.steps)} steps "
        f"into {result.folder} in {result.seconds:.1f} s (resolved {len(result.resolved)}, "
        f"kept {len(result.kept)} as they were)",
    )
    _print_changes(result.changes)
    _print_rebuild(result)
    for f in result.files:
        ui.print_text(f"  {f}")
    if result.skipped:
        ui.print_text(f"not locked (resolve from the spec): {', '.join(result.skipped)}")
    ui.print_text("commit these files; CI checks them with `envbuild check-lock`")
    return 0


def _check(spec: StackSpec, args: LockCommandArgs) -> int:
    status = lock_status(spec, args.output)
    stale = [s for s in status.steps if not s.current]
    if args.json:
        doc: LockCheckDocument = {
            "schema": "envbuild.lock.check/1",
            "current": status.current,
            "reason": status.reason or None,
            "stale": [{"step": s.name, "reason": s.reason} for s in stale],
        }
        ui.print_json(doc)
        return 0 if status.current else STALE
    if status.current:
        events.emit("ok", f"{spec.name}: the lock is current for {spec.path.name}; nothing to do")
        return 0
    for s in stale:
        ui.print_text(f"stale: step {s.name}: {s.reason}")
    if status.reason:
        ui.print_text(f"stale: {status.reason}")
    events.emit(
        "fail",
        f"{spec.name}: the lock is not current ({len(stale)} of {len(status.steps)} steps stale); "
        f"run `envbuild lock --stack {spec.path}`",
    )
    return STALE


def _json(result: LockResult) -> LockDocument:
    return {
        "schema": "envbuild.lock/1",
        "folder": str(result.folder),
        "files": [str(f) for f in result.files],
        "skipped": result.skipped,
        "seconds": round(result.seconds, 3),
        "up_to_date": not result.written,
        "resolved": list(result.resolved),
        "kept": list(result.kept),
        "changes": [c.to_json() for c in result.changes],
        "torch": (
            {"old": result.torch_moved[0], "new": result.torch_moved[1]}
            if result.torch_moved
            else None
        ),
        "rebuild": [
            {
                "wheel": str(w.path),
                "name": w.name,
                "version": w.version,
                "built_against": w.built_against,
            }
            for w in result.rebuild
        ],
    }


def _version(v: str | None) -> str:
    return v if v is not None else "-"


def _why(c: Change) -> str:
    return c.reason + (f" ({', '.join(c.by[:3])})" if c.by else "")


def _print_changes(changes: tuple[Change, ...]) -> None:
    if not changes:
        ui.print_text("no pin moved")
        return
    ui.print_table(
        f"what moved ({len(changes)})",
        ["step", "package", "old", "new", "why"],
        [[c.step, c.package, _version(c.old), _version(c.new), _why(c)] for c in changes],
    )


def _print_rebuild(result: LockResult) -> None:
    if result.torch_moved is None:
        return
    old, new = result.torch_moved
    ui.print_text(f"torch moved: {old} -> {new}")
    for w in result.rebuild:
        ui.print_text(
            f"  rebuild: {w.path} (built against torch {w.built_against}): "
            f"envbuild wheelhouse build {w.name} --venv VENV (with torch {new})"
        )
    if not result.rebuild:
        ui.print_text("  no wheelhouse wheel built against the old torch was found")


def markdown(spec: StackSpec, result: LockResult) -> str:
    """What moved, as a PR description."""
    lines = [f"### envbuild lock: `{spec.name}`", ""]
    if not result.written:
        return "\n".join(lines + ["The lock is current for the spec: nothing moved.", ""])
    steps = sorted({c.step for c in result.changes})
    lines.append(
        f"{len(result.changes)} pin(s) moved in {len(steps)} step(s); resolved again: "
        f"{', '.join(f'`{s}`' for s in result.resolved) or 'none'}."
    )
    if result.changes:
        lines += ["", "| step | package | old | new | why |", "| --- | --- | --- | --- | --- |"]
        lines += [
            f"| `{c.step}` | `{c.package}` | {_version(c.old)} | {_version(c.new)} | {_why(c)} |"
            for c in result.changes
        ]
    if result.torch_moved is not None:
        lines += ["", f"**torch moved**: {result.torch_moved[0]} -> {result.torch_moved[1]}."]
        lines += [
            f"- rebuild `{w.path.name}` (built against torch {w.built_against})"
            for w in result.rebuild
        ]
    return "\n".join(lines) + "\n"
