"""``envbuild modal``: write a Python file defining the stack's ``modal.Image`` (from the same
plan).

Exit codes: 2 for a bad profile/stack, a bad ``-o`` (not a ``.py`` file whose name Python can
import, a folder that does not exist, an existing file without ``--force``) or a stack the chosen
mode cannot express; 8 for a stale lock; 3 when the folder cannot be written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events
from envbuild._io import atomic_write_text
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
)
from envbuild.errors import ConfigError
from envbuild.images.docker import DEFAULT_ROOT, DockerOptions, write_build_files
from envbuild.images.modal import MODES, ModalOptions, Mode, module_name_ok, render_modal
from envbuild.images.tool import tool_source

if TYPE_CHECKING:
    from envbuild.commands.documents import ModalDocument

DEFAULT_FOLDER = Path("modal_images")


@dataclass(frozen=True)
class ModalArgs(StackArgs, JsonArgs):
    """``modal``'s options."""

    output: Path | None
    mode: Mode
    base: str | None
    root: str  # the image's data root, kept as written
    no_lock: bool
    force: bool


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "modal",
        help="write a Python file defining the stack's modal.Image, from the same plan",
        description=(
            "Write a Python file with image() -> modal.Image: layer for layer "
            "(--mode steps: one `envbuild provision --step` per step) or from envbuild's rendered "
            "Dockerfile (--mode dockerfile). Exit 2: bad profile, -o or mode; 8: stale lock."
        ),
    )
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument(
        "-o",
        "--output",
        type=path_arg,
        default=None,
        metavar="FILE.py",
        help=(
            f"the Python file to write (default: {DEFAULT_FOLDER}/<stack>.py); its spec slices and"
            " lock files go to <dir>/<name>.steps/ in the build context"
        ),
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="steps",
        help=(
            "steps: Modal's own layers, one run_commands per step (default); dockerfile: "
            "Image.from_dockerfile of envbuild's Dockerfile, written beside the file"
        ),
    )
    p.add_argument(
        "--base",
        metavar="IMAGE",
        help=(
            "registry base image (default: Modal's debian_slim without CUDA, else the stack's"
            " nvidia/cuda devel image)"
        ),
    )
    p.add_argument(
        "--root",
        default=DEFAULT_ROOT,
        metavar="DIR",
        help=f"the image's data root: venv, caches, state, receipts (default: {DEFAULT_ROOT})",
    )
    p.add_argument(
        "--no-lock",
        action="store_true",
        help="ignore the stack's lock: the layers resolve from the spec",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite an existing FILE.py (and its Dockerfile)"
    )
    p.set_defaults(func=Handler(run, ModalArgs))


def run(args: ModalArgs) -> int:
    spec = load_stack(args)
    default = args.output is None
    output = (
        DEFAULT_FOLDER / f"{spec.name.replace('-', '_').replace('.', '_')}.py"
        if args.output is None
        else args.output
    )
    output = output if output.is_absolute() else Path.cwd() / output
    _check_output(output, args, create_folder=default)
    dockerfile = output.with_suffix(".Dockerfile")
    if args.mode == "dockerfile" and dockerfile.exists() and not args.force:
        raise ConfigError(
            f"{dockerfile} exists (the Dockerfile the {output.name} of --mode dockerfile reads); "
            "envbuild does not overwrite it unasked",
            hint="Pass --force to replace it, or choose another -o.",
        )
    inside = output.parent.is_relative_to(Path.cwd())
    context = Path.cwd() if inside else output.parent
    steps_folder = output.parent / f"{output.stem}.steps"
    tool_src = tool_source(context, output.parent)
    docker = DockerOptions(
        base=args.base,
        root=args.root,
        lock=not args.no_lock,
        steps_dir=steps_folder.relative_to(context).as_posix(),
        command=_command_line(args, spec.name, default),
        tool_src=tool_src.relative_to(context).as_posix() + "/" if tool_src != context else "",
    )
    opts = ModalOptions(
        mode=args.mode,
        docker=docker,
        context=os.path.relpath(context, output.parent),
        dockerfile=dockerfile.name,
    )
    rendered = render_modal(spec, opts)

    output.parent.mkdir(exist_ok=True)  # only the default folder can be missing here
    write_build_files(rendered.files, context, steps_folder, tool_src)
    if rendered.dockerfile is not None:
        atomic_write_text(dockerfile, rendered.dockerfile)
    atomic_write_text(output, rendered.source)
    module = (
        ".".join(output.relative_to(Path.cwd()).with_suffix("").parts) if inside else output.stem
    )
    if args.json:
        doc: ModalDocument = {
            "schema": "envbuild.modal/1",
            "stack": spec.name,
            "mode": args.mode,
            "file": str(output),
            "module": module,
            "dockerfile": str(dockerfile) if rendered.dockerfile is not None else None,
            "context": str(context),
            "steps": [s.name for s in rendered.layers],
            "files": sorted(rendered.files),
        }
        ui.print_json(doc)
    else:
        events.emit(
            "ok",
            f"wrote {output} ({args.mode}: {len(rendered.layers)} steps)"
            + (f", {dockerfile.name}" if rendered.dockerfile is not None else "")
            + f" and {len(rendered.files)} spec/lock files in {steps_folder}",
        )
        ui.print_text(f"use: from {module} import image; app = modal.App(image=image())")
    return 0


def _check_output(output: Path, args: ModalArgs, *, create_folder: bool) -> None:
    shown = args.output if args.output is not None else output
    if output.is_dir():
        raise ConfigError(
            f"-o {shown} is a folder; give the Python file to write (e.g. {shown}/image.py)"
        )
    if not module_name_ok(output):
        raise ConfigError(
            f"-o {shown}: the file must be a .py file whose name Python can import (letters,"
            " digits, underscores; not modal.py, which would hide the modal package)",
            hint="For example -o modal_images/train_image.py.",
        )
    if not create_folder and not output.parent.is_dir():
        raise ConfigError(
            f"-o {shown}: the folder {output.parent} does not exist; envbuild does not make it",
            hint="Create it first, or choose a file in an existing folder.",
        )
    if output.exists() and not args.force:
        raise ConfigError(
            f"{output} exists; envbuild does not overwrite it unasked",
            hint="Pass --force to replace it (it is generated), or choose another -o.",
        )


def _command_line(args: ModalArgs, name: str, default: bool) -> str:
    words = [
        "envbuild",
        "modal",
        "--stack" if args.stack else "--profile",
        str(args.stack or args.profile or name),
    ]
    if args.mode != "steps":
        words += ["--mode", args.mode]
    if args.base:
        words += ["--base", args.base]
    if args.root != DEFAULT_ROOT:
        words += ["--root", args.root]
    if args.no_lock:
        words.append("--no-lock")
    if not default:
        words += ["-o", str(args.output)]
    return " ".join(words)
