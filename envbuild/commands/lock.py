"""``envbuild lock``: write the per-step hash-pinned lock (and pylock.toml) beside the spec."""

from __future__ import annotations

import argparse
from typing import Any

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import add_json_arg, add_stack_args, load_stack, path_arg
from envbuild.lock.compile import LockOptions, lock_stack
from envbuild.lock.resolver import RESOLVERS


def register(sub: Any) -> None:
    p = sub.add_parser("lock", help="compile each step into a hash-pinned requirements file (pip-tools)")
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--python", metavar="PATH", help="pip-compile under this interpreter (default: this one when it "
                   "is the stack's Python, else uv resolves for the stack's Python and [target] platform)")
    p.add_argument("--resolver", choices=RESOLVERS, default="auto",
                   help="auto (default): pip-compile when this interpreter is the target, else uv pip compile")
    p.add_argument("--wheelhouse", metavar="DIR|URL",
                   help="resolve every step only from this find-links folder or page (offline)")
    p.add_argument("--skip-step", metavar="NAME", action="append", default=[],
                   help="leave this step out of the lock (it resolves from the spec); repeatable")
    p.add_argument("--output", type=path_arg, metavar="DIR", help="write the lock here (default: beside the spec)")
    p.add_argument("--no-pylock", action="store_true", help="do not write the PEP 751 pylock.toml export")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_stack(args)
    result = lock_stack(spec, LockOptions(python=args.python, resolver=args.resolver, wheelhouse=args.wheelhouse,
                                          skip=tuple(args.skip_step), output=args.output,
                                          export_pylock=not args.no_pylock))
    if args.json:
        ui.print_json({"folder": str(result.folder), "files": [str(f) for f in result.files],
                       "skipped": result.skipped, "seconds": round(result.seconds, 3)})
        return 0
    events.emit("ok", f"{spec.name}: locked {len(spec.steps) - len(result.skipped)} of {len(spec.steps)} steps "
                f"into {result.folder} in {result.seconds:.1f} s")
    for f in result.files:
        ui.print_text(f"  {f}")
    if result.skipped:
        ui.print_text(f"not locked (resolve from the spec): {', '.join(result.skipped)}")
    ui.print_text("commit these files; CI checks them with `envbuild check-lock`")
    return 0
