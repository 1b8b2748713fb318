"""``envbuild plan``: the exact commands ``provision`` would run, step by step. Executes nothing.

The plan comes from ``envbuild.installer.resolve_plan`` and the commands from ``step_commands``, the
functions ``provision`` itself calls: the same default backend (uv when available), the same
lock, the same argv (paths included: the venv's python under ``--root`` or ``--venv``, the
step's requirements or lock file, the constraints file of the guarded steps).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envbuild import layout
from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    Subparsers,
    add_json_arg,
    add_stack_args,
    load_stack,
    path_arg,
    wheelhouse_arg,
)
from envbuild.commands.selection import InstallArgs, add_lock_args, refuse_lock_options
from envbuild.errors import ConfigError, PreflightError
from envbuild.index.net import redact
from envbuild.installer import find_uv, resolve_plan
from envbuild.installer.pip import pylock_pip
from envbuild.installer.python import UnfitInterpreter, find_interpreter
from envbuild.plan import BACKENDS, Plan, plan_to_json, step_commands

if TYPE_CHECKING:
    from envbuild.commands.documents import PlanDocument
    from envbuild.spec import StackSpec


@dataclass(frozen=True)
class PlanArgs(InstallArgs):
    """``plan``'s options: the ones it shares with ``provision`` (``InstallArgs``), no others."""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "plan", help="show the ordered install steps and the exact commands provision runs"
    )
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        help="installer (default: as provision: uv when available, else pip)",
    )
    p.add_argument(
        "--root",
        type=path_arg,
        help="data root the commands are shown for (default: the spec's layout.root)",
    )
    p.add_argument(
        "--venv", type=path_arg, help="an existing environment provision --venv would install into"
    )
    p.add_argument(
        "--no-lock", action="store_true", help="ignore the profile's lock (as provision --no-lock)"
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="install only from --wheelhouse (as provision --offline)",
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        help="the interpreter provision --python would make the venv with",
    )
    p.add_argument(
        "--wheelhouse",
        metavar="DIR|URL",
        type=wheelhouse_arg,
        help="plan an offline install from this wheelhouse",
    )
    add_lock_args(p, provision=False)
    p.set_defaults(func=Handler(run, PlanArgs))


def commands_of(plan: Plan, paths: layout.Paths) -> dict[str, list[list[str]]]:
    """{step name: [argv, ...]} exactly as provision runs them into ``paths``."""
    backend = plan.options.backend
    uv = find_uv() if backend == "uv" else None
    reads_pylock = pylock_pip(paths.python, plan.spec.python) if backend == "pip" else None
    return {
        s.name: [
            list(c.argv)
            for c in step_commands(
                s,
                backend=backend,
                python=paths.python,
                uv=uv,
                steps_dir=paths.state / "steps",
                constraints=paths.constraints if s.constrained else None,
                pylock_pip=reads_pylock,
            )
        ]
        for s in plan.steps
    }


def run(args: PlanArgs) -> int:
    if args.lock is not None:
        from envbuild.commands.plan_lock import plan_from_lock

        return plan_from_lock(args, args.lock)
    refuse_lock_options(args)
    spec = load_stack(args)
    if args.wheelhouse and not args.offline:
        raise ConfigError(
            "--wheelhouse is used with --offline (an install only from the wheelhouse)"
        )
    if args.offline and not args.wheelhouse:
        raise ConfigError(
            "--offline needs --wheelhouse DIR|URL: the only place packages may come from"
        )
    from envbuild.stacklock.serve import built_wheels, locked_requirements

    locked = {} if args.no_lock else locked_requirements(spec)
    plan = resolve_plan(
        spec,
        backend=args.backend,
        wheelhouse=args.wheelhouse,
        locked=locked,
        built_wheels=built_wheels(locked) if args.wheelhouse and locked else {},
    )
    paths = layout.paths_for(spec, args.root)
    if args.venv is not None:
        paths = layout.Paths(root=paths.root, venv_name=str(args.venv.expanduser().absolute()))
    commands = commands_of(plan, paths)
    refused = _refused_python(spec, args, paths)
    if args.json:
        base = plan_to_json(plan)
        data: PlanDocument = {
            "schema": "envbuild.plan/1",
            **base,
            "steps": [{**step, "argv": commands[step["name"]]} for step in base["steps"]],
            "root": str(paths.root),
            "venv": str(paths.venv),
            "python_refused": refused,
        }
        ui.print_json(data)
        return 0
    _print_plan(spec, plan, paths, commands, refused)
    return 0


def _refused_python(spec: StackSpec, args: PlanArgs, paths: layout.Paths) -> str | None:
    """Why provision would refuse the interpreter (exit 3) before making anything; None when it
    would not, or when the venv is there already."""
    if paths.python.exists():
        return None
    try:
        find_interpreter(spec.python, args.python, spec.abi.package)
    except UnfitInterpreter as exc:
        return f"{exc.message} {exc.hint or ''}".strip()
    except PreflightError:
        pass  # none found: said by preflight and provision; the plan stays host-independent
    return None


def _print_plan(
    spec: StackSpec,
    plan: Plan,
    paths: layout.Paths,
    commands: dict[str, list[list[str]]],
    refused: str | None,
) -> None:
    """The plan as text: the stack, its ABI baseline, the lock, one row per step with its
    commands, and the interpreter provision would refuse."""
    abi = spec.abi
    ui.print_text(
        f"stack {spec.name} ({spec.path}), Python {spec.python}, backend {plan.options.backend}, "
        f"venv {paths.venv}"
    )
    ui.print_text(
        f"ABI baseline: {abi.package} {abi.version}"
        + (f", cuda {abi.cuda}" if abi.cuda else "")
        + (f", protected: {', '.join(abi.protect)}" if abi.protect else "")
        + (" (adopted from the base environment)" if abi.adopt else "")
    )
    pinned = sum(1 for s in plan.steps if s.locked_file)
    if pinned:
        ui.print_text(f"lock: {pinned} of {len(plan.steps)} steps install from hash-pinned files")
    rows = []
    for s in plan.steps:
        rows.append(
            [
                str(s.number),
                s.name,
                s.role
                + (", locked" if s.locked_file else "")
                + (f"\nreplaces {', '.join(s.step.replaces)}" if s.step.replaces else ""),
                "\n".join(s.requirements),
                "\n".join(redact(shlex.join(argv)) for argv in commands[s.name]),
            ]
        )
    ui.print_table(
        None, ["#", "step", "role", "packages", "command"], rows, max_width=ui.WIDTH, keep=2
    )
    if refused:
        ui.print_text(f"python: provision refuses it (exit 3): {refused}")
