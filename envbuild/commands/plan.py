"""``envbuild plan``: the ordered steps with their exact installer arguments. Executes nothing."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from envbuild.commands import ui
from envbuild.commands.common import add_json_arg, add_stack_args, load_stack
from envbuild.net import redact
from envbuild.plan import BACKENDS, Backend, PlanOptions, make_plan, plan_to_json


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="show the ordered install steps and installer arguments")
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--backend", choices=BACKENDS, default="pip", help="installer to show arguments for (default: pip)")
    p.add_argument("--wheelhouse", metavar="DIR|URL", help="plan an offline install from this wheelhouse")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_stack(args)
    backend: Backend = args.backend
    plan = make_plan(spec, PlanOptions(backend=backend, wheelhouse=args.wheelhouse))
    if args.json:
        ui.print_json(plan_to_json(plan))
        return 0
    abi = spec.abi
    ui.print_text(f"stack {spec.name} ({spec.path}), Python {spec.python}, backend {backend}")
    ui.print_text(f"ABI baseline: {abi.package} {abi.version}"
                  + (f", cuda {abi.cuda}" if abi.cuda else "")
                  + (f", protected: {', '.join(abi.protect)}" if abi.protect else "")
                  + (" (adopted from the base environment)" if abi.adopt else ""))
    rows = []
    for s in plan.steps:
        rows.append([
            str(s.number),
            s.name,
            s.role,
            "\n".join(s.requirements),
            redact(shlex.join(s.args)) + (" -c constraints.txt" if s.constrained else ""),
        ])
    ui.print_table(None, ["#", "step", "role", "packages", "installer arguments"], rows)
    return 0
