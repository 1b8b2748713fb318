"""``envbuild ansible-vars``: the variables ``ansible/provision.yml`` takes for a stack, as YAML.

Exit 2 for a bad profile or stack, or an ``-o`` that exists (without ``--force``) or is a folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuild import events
from envbuild._io import atomic_write_text
from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    StackArgs,
    Subparsers,
    add_stack_args,
    load_stack,
    path_arg,
)
from envbuild.errors import ConfigError
from envbuild.images.ansible import render_vars


@dataclass(frozen=True)
class AnsibleVarsArgs(StackArgs):
    """``ansible-vars``' options."""

    root: str | None  # the hosts' data root, kept as written
    output: Path | None
    force: bool


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "ansible-vars",
        help="write the variables ansible/provision.yml takes for a stack (YAML)",
        description=(
            "The playbook's variables for a stack: its profile, data root and the names of "
            "the values it takes from the environment (from_env), which the play reads on the "
            "controller and never writes. Use: ansible-playbook ... -e @FILE."
        ),
    )
    add_stack_args(p)
    p.add_argument(
        "--root", metavar="DIR", help="the hosts' data root (default: the spec's layout.root)"
    )
    p.add_argument(
        "-o", "--output", type=path_arg, metavar="FILE", help="write here (default: stdout)"
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing FILE")
    p.set_defaults(func=Handler(run, AnsibleVarsArgs))


def run(args: AnsibleVarsArgs) -> int:
    spec = load_stack(args)
    output = args.output
    if output is not None:
        if output.is_dir():
            raise ConfigError(
                f"-o {output} is a folder; give the file to write (e.g. {output}/envbuild.yml)"
            )
        if output.exists() and not args.force:
            raise ConfigError(
                f"{output} exists; envbuild does not overwrite it unasked",
                hint="Pass --force to replace it (it is generated), or choose another -o.",
            )
    words = [
        "envbuild",
        "ansible-vars",
        "--stack" if args.stack else "--profile",
        str(args.stack or args.profile or spec.name),
    ]
    if args.root is not None:
        words += ["--root", args.root]
    if args.stack:
        events.emit(
            "info",
            f"the playbook provisions with --profile {spec.name}: the envbuild wheel it installs "
            "must hold that profile",
        )
    text = render_vars(
        spec, profile=args.profile or spec.name, root=args.root, command=" ".join(words)
    )
    if output is None:
        ui.print_raw(text)
    else:
        atomic_write_text(output, text)
        events.emit("ok", f"wrote {output}: ansible-playbook ... -e @{output}")
    return 0
