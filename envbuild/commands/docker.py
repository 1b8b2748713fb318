"""``envbuild docker``: render the Dockerfile (and its per-layer spec slices and lock files) from a
stack."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events
from envbuild._io import atomic_write_text
from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    Subparsers,
    add_json_arg,
    add_stack_args,
    load_stack,
    nonempty_arg,
    path_arg,
)
from envbuild.commands.selection import (
    DockerArgs,
    add_selection_args,
    refuse_lock_options,
)
from envbuild.errors import ConfigError, LockError
from envbuild.images.docker import (
    DEFAULT_ROOT,
    DOCKERIGNORE,
    DockerOptions,
    render,
    stale_files,
    write_build_files,
)
from envbuild.images.tool import tool_source

if TYPE_CHECKING:
    from envbuild.commands.documents import DockerCheckDocument, DockerDocument


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "docker", help="render a Dockerfile: one layer per step, the same guarded code path"
    )
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument(
        "--base",
        metavar="IMAGE",
        help=(
            "base image (default: nvidia/cuda:<the stack's CUDA>-cudnn-devel-ubuntu22.04;"
            " ubuntu:22.04 without CUDA)"
        ),
    )
    p.add_argument(
        "--venv",
        metavar="PATH",
        help="abi.adopt stacks: the environment inside the base image that holds torch",
    )
    p.add_argument(
        "--root",
        default=DEFAULT_ROOT,
        metavar="DIR",
        help=f"the image's data root: venv, caches, state, receipts (default: {DEFAULT_ROOT})",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="install every step from the `wheelhouse` build context (provision --offline)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=path_arg,
        default=None,
        help=(
            "the Dockerfile to write (default: docker/Dockerfile, or docker/<stack>.Dockerfile when"
            " docker/Dockerfile is another stack's); its spec slices go to <dir>/<stack>.steps/"
        ),
    )
    p.add_argument(
        "--context",
        type=path_arg,
        default=None,
        help=(
            "the docker build context the COPY paths are relative to (default: ., or the"
            " Dockerfile's folder when -o is outside .; a context without envbuild's source gets a"
            " copy)"
        ),
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 8 if the files on disk differ from a fresh render (CI)",
    )
    p.add_argument("--dockerignore", action="store_true", help="also write <context>/.dockerignore")
    p.add_argument(
        "--no-lock",
        action="store_true",
        help=(
            "ignore the stack's lock: the layers resolve from the spec (default: install from "
            "the lock when the stack has one; its files are copied beside the slices)"
        ),
    )
    lock = p.add_argument_group(
        "from a committed lock (uv.lock, pylock.toml) instead of a stack spec"
    )
    lock.add_argument(
        "--lock",
        metavar="FILE",
        type=path_arg,
        help=(
            "render one layer per stage of this lock's chosen environment (torch, extensions, the "
            "rest, source builds): a change to a later stage keeps the earlier layers cached"
        ),
    )
    lock.add_argument(
        "--build-cache",
        metavar="DIR|URL",
        type=nonempty_arg,
        help=(
            "the builds stage's layer takes its wheels from the fleet's build cache: an http(s)"
            " URL, or a folder given to `docker build --build-context envbuild-build-cache=DIR`"
            " (mounted read only: image builds install from it and do not publish)"
        ),
    )
    add_selection_args(lock)
    p.set_defaults(func=Handler(run, DockerArgs))


def run(args: DockerArgs) -> int:
    if args.lock is not None:
        from envbuild.commands.docker_lock import docker_from_lock

        return docker_from_lock(args, args.lock)
    refuse_lock_options(args)
    if args.build_cache:
        raise ConfigError(
            "--build-cache is for `docker --lock`, whose builds stage compiles in the image; a"
            " stack's image installs its built wheels from the wheelhouse (--offline)",
        )
    spec = load_stack(args)
    given = args.output
    if given is None:
        given = default_output(Path("docker"), spec.name)
        if given.name != "Dockerfile":
            events.emit("info", f"docker/Dockerfile renders another stack; writing {given} instead")
    output = given if given.is_absolute() else Path.cwd() / given
    if args.context is None:
        inside = output.parent.is_relative_to(Path.cwd())
        context = Path.cwd() if inside else output.parent
    else:
        context = args.context.absolute()
    steps_folder = output.parent / f"{spec.name}.steps"
    try:
        steps_dir = steps_folder.relative_to(context).as_posix()
    except ValueError as exc:
        raise ConfigError(
            f"-o {given}: the Dockerfile's folder must be inside the build context {context} "
            "(its COPY lines read the spec slices from there)"
        ) from exc
    tool_src = tool_source(context, output.parent)
    opts = DockerOptions(
        base=args.base,
        venv=args.venv,
        root=args.root,
        offline=args.offline,
        steps_dir=steps_dir,
        lock=not args.no_lock,
        command=_command_line(args, spec.name, given),
        tool_src=tool_src.relative_to(context).as_posix() + "/" if tool_src != context else "",
    )
    rendered = render(spec, opts)
    for warning in rendered.warnings:
        events.emit("warn", warning)
    if args.check:
        stale = stale_files(rendered, output, context, steps_dir)
        if args.json:
            checked: DockerCheckDocument = {
                "schema": "envbuild.docker.check/1",
                "stack": spec.name,
                "dockerfile": str(output),
                "stale": stale,
            }
            ui.print_json(checked)
        if stale:
            raise LockError(
                f"{output} is stale against {spec.path}: " + ", ".join(stale),
                hint=f"Regenerate it: {opts.command}",
            )
        if not args.json:
            events.emit("ok", f"{output} is current for {spec.name}")
        return 0
    write_build_files(rendered.files, context, steps_folder, tool_src)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, rendered.dockerfile)
    if args.dockerignore:
        atomic_write_text(context / ".dockerignore", DOCKERIGNORE)
    if args.json:
        doc: DockerDocument = {
            "schema": "envbuild.docker/1",
            "stack": spec.name,
            "dockerfile": str(output),
            "files": sorted(rendered.files),
        }
        ui.print_json(doc)
    else:
        slices = sum(rel.endswith(".toml") for rel in rendered.files)
        extra = len(rendered.files) - slices
        events.emit(
            "ok",
            f"wrote {output} and {slices} spec slices"
            + (f" (+ {extra} lock files)" if extra else "")
            + f" in {steps_folder}",
        )
        ui.print_text(
            f"build: docker build -f {os.path.relpath(output, context)} --build-context"
            f" wheelhouse=/mnt/data/wheelhouse -t envbuild/{spec.name} {context}\n  (index settings"
            " and credentials: --secret id=pip.conf,src=... / id=uv.toml,src=...)"
        )
    return 0


def default_output(folder: Path, stack: str) -> Path:
    """``docker/Dockerfile``, unless it holds another stack's rendering (the committed one is the
    h200 stack's): then ``docker/<stack>.Dockerfile``, so no profile overwrites another's file."""
    main = folder / "Dockerfile"
    try:
        header = main.read_text(encoding="utf-8")[:2000]
    except OSError:
        return main
    m = STACK_HEADER.search(header)
    return main if m is None or m.group(1) == stack else folder / f"{stack}.Dockerfile"


STACK_HEADER = re.compile(r"^# Stack (\S+) \(sha256:", re.M)


def _command_line(args: DockerArgs, name: str, output: Path) -> str:
    """The command that renders this file again, as written in its header (``output``: ``-o``, or
    the default the file went to)."""
    words = [
        "envbuild",
        "docker",
        "--stack" if args.stack else "--profile",
        str(args.stack or args.profile or name),
    ]
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
    words += ["-o", str(output)]
    return " ".join(words)
