"""``envbuild docker``: render the Dockerfile (and its per-layer spec slices and lock files) from a stack."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild._io import atomic_write_text
from envbuild.commands import ui
from envbuild.commands.common import add_json_arg, add_stack_args, load_stack, path_arg
from envbuild.errors import ConfigError, LockError
from envbuild.images.docker import (
    DEFAULT_ROOT,
    DOCKERIGNORE,
    STEP_FILE_GLOBS,
    DockerOptions,
    render,
    stale_files,
)


def register(sub: Any) -> None:
    p = sub.add_parser("docker", help="render a Dockerfile: one layer per step, the same guarded code path")
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--base", metavar="IMAGE",
                   help="base image (default: nvidia/cuda:<the stack's CUDA>-cudnn-devel-ubuntu22.04; ubuntu:22.04 without CUDA)")
    p.add_argument("--venv", metavar="PATH",
                   help="abi.adopt stacks: the environment inside the base image that holds torch")
    p.add_argument("--root", default=DEFAULT_ROOT, metavar="DIR",
                   help=f"the image's data root: venv, caches, state, receipts (default: {DEFAULT_ROOT})")
    p.add_argument("--offline", action="store_true",
                   help="install every step from the `wheelhouse` build context (provision --offline)")
    p.add_argument("-o", "--output", type=path_arg, default=Path("docker/Dockerfile"),
                   help="the Dockerfile to write (default: docker/Dockerfile); its spec slices go to <dir>/<stack>.steps/")
    p.add_argument("--context", type=path_arg, default=Path("."),
                   help="the docker build context the COPY paths are relative to (default: .)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 8 if the files on disk differ from a fresh render (CI)")
    p.add_argument("--dockerignore", action="store_true", help="also write <context>/.dockerignore")
    p.add_argument("--no-lock", action="store_true",
                   help="ignore the stack's lock: the layers resolve from the spec (default: install from "
                   "the lock when the stack has one; its files are copied beside the slices)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_stack(args)
    context = args.context.absolute()
    output = args.output if args.output.is_absolute() else Path.cwd() / args.output
    steps_folder = output.parent / f"{spec.name}.steps"
    try:
        steps_dir = steps_folder.relative_to(context).as_posix()
    except ValueError:
        raise ConfigError(f"-o {args.output}: the Dockerfile's folder must be inside the build context {context} "
                          "(its COPY lines read the spec slices from there)") from None
    opts = DockerOptions(base=args.base, venv=args.venv, root=args.root, offline=args.offline,
                         steps_dir=steps_dir, lock=not args.no_lock, command=_command_line(args, spec.name))
    rendered = render(spec, opts)
    if args.check:
        stale = stale_files(rendered, output, context, steps_dir)
        if args.json:
            ui.print_json({"stack": spec.name, "dockerfile": str(output), "stale": stale})
        if stale:
            raise LockError(f"{output} is stale against {spec.path}: " + ", ".join(stale),
                            hint=f"Regenerate it: {opts.command}")
        if not args.json:
            events.emit("ok", f"{output} is current for {spec.name}")
        return 0
    steps_folder.mkdir(parents=True, exist_ok=True)
    wanted = {context / rel for rel in rendered.files}
    for old in {p for g in STEP_FILE_GLOBS for p in steps_folder.glob(g)}:
        if old not in wanted:
            old.unlink()
    for rel, text in rendered.files.items():
        atomic_write_text(context / rel, text)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, rendered.dockerfile)
    if args.dockerignore:
        atomic_write_text(context / ".dockerignore", DOCKERIGNORE)
    if args.json:
        ui.print_json({"stack": spec.name, "dockerfile": str(output), "files": sorted(rendered.files)})
    else:
        slices = sum(rel.endswith(".toml") for rel in rendered.files)
        extra = len(rendered.files) - slices
        events.emit("ok", f"wrote {output} and {slices} spec slices" + (f" (+ {extra} lock files)" if extra else "")
                    + f" in {steps_folder}")
        ui.print_text(f"build: docker build -f {os.path.relpath(output, context)} "
                      f"--build-context wheelhouse=/mnt/data/wheelhouse -t envbuild/{spec.name} {context}")
    return 0


def _command_line(args: argparse.Namespace, name: str) -> str:
    """The command that renders this file again, as written in its header."""
    words = ["envbuild", "docker", "--stack" if args.stack else "--profile", str(args.stack or args.profile or name)]
    if args.base:
        words += ["--base", args.base]
    if args.venv:
        words += ["--venv", args.venv]
    if args.root != DEFAULT_ROOT:
        words += ["--root", args.root]
    if args.offline:
        words.append("--offline")
    if args.no_lock:
        words.append("--no-lock")
    words += ["-o", str(args.output)]
    return " ".join(words)
