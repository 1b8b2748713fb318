"""``docker --lock FILE``: the Dockerfile of one layer per stage, its slices, and what it prints."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.selection import (
    given_flags,
    lock_selection,
)
from envbuild.errors import ConfigError
from envbuild.projectlock.run import prepare_lock

if TYPE_CHECKING:
    from envbuild.commands.documents import (
        DockerLockCheckDocument,
        DockerLockDocument,
    )
    from envbuild.commands.selection import DockerArgs


def docker_from_lock(args: DockerArgs, lock: Path) -> int:
    """``docker --lock FILE``: the Dockerfile of one layer per stage, and its stage slices."""
    import os

    from envbuild._io import atomic_write_text
    from envbuild.errors import LockError
    from envbuild.images.docker import DockerOptions, stale_files, write_build_files
    from envbuild.images.tool import tool_source
    from envbuild.projectlock.image import render_lock

    # options of ``docker`` that have no meaning with --lock
    used = given_flags(
        {
            "--profile": args.profile,
            "--stack": args.stack,
            "--venv": args.venv,
            "--offline": args.offline,
            "--no-lock": args.no_lock,
            "--dockerignore": args.dockerignore,
        }
    )
    if used:
        raise ConfigError(
            f"docker --lock renders the lock's stages: {', '.join(used)} cannot be used with it",
            hint="Drop them, or render a stack spec without --lock.",
        )
    req = lock_selection(args, lock)
    prepared = prepare_lock(req)
    name = prepared.chosen.path.parent.name or "project"
    output = args.output or Path("docker") / f"lock-{name}.Dockerfile"
    output = output if output.is_absolute() else Path.cwd() / output
    context = (
        args.context.absolute()
        if args.context
        else (Path.cwd() if output.parent.is_relative_to(Path.cwd()) else output.parent)
    )
    steps_folder = output.parent / f"{output.name.removesuffix('.Dockerfile')}.stages"
    try:
        steps_dir = steps_folder.relative_to(context).as_posix()
    except ValueError as exc:
        raise ConfigError(
            f"-o {output}: the Dockerfile's folder must be inside the build context {context} "
            "(its COPY lines read the stage slices from there)"
        ) from exc
    tool_src = tool_source(context, output.parent)
    command = shlex.join(
        [
            "envbuild",
            "docker",
            "--lock",
            str(lock),
            *req.sync.selection_argv(),
            *req.sync.install_argv(),
            *(a for e in req.environment for a in ("--environment", e)),
            *(["--rebuild-mismatched"] if req.rebuild_mismatched else []),
        ]
        + (["--base", args.base] if args.base else [])
        + (["--build-cache", args.build_cache] if args.build_cache else [])
        + (["-o", str(args.output)] if args.output else [])
    )
    opts = DockerOptions(
        base=args.base,
        root=args.root,
        steps_dir=steps_dir,
        command=command,
        tool_src=tool_src.relative_to(context).as_posix() + "/" if tool_src != context else "",
        build_cache=_image_build_cache(args.build_cache),
    )
    rendered = render_lock(prepared.plan, opts, command)
    for warning in rendered.warnings:
        events.emit("warn", warning)
    if args.check:
        stale = stale_files(rendered, output, context, steps_dir)
        if args.json:
            checked: DockerLockCheckDocument = {
                "schema": "envbuild.docker.lock.check/1",
                "lock": str(lock),
                "dockerfile": str(output),
                "stale": stale,
            }
            ui.print_json(checked)
        if stale:
            raise LockError(
                f"{output} is stale against {lock}: " + ", ".join(stale),
                hint=f"Regenerate it: {command}",
            )
        return 0
    for old in steps_folder.glob("[0-9][0-9]-*.json") if steps_folder.is_dir() else ():
        if f"{steps_dir}/{old.name}" not in rendered.files:
            old.unlink()
    write_build_files(rendered.files, context, steps_folder, tool_src)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, rendered.dockerfile)
    if args.json:
        doc: DockerLockDocument = {
            "schema": "envbuild.docker.lock/1",
            "lock": str(lock),
            "environment": prepared.chosen.env.name,
            "dockerfile": str(output),
            "files": sorted(rendered.files),
        }
        ui.print_json(doc)
        return 0
    events.emit("ok", f"wrote {output} and {len(rendered.files)} stage slices in {steps_folder}")
    ui.print_text(
        f"build: docker build -f {os.path.relpath(output, context)} -t envbuild/lock-{name}"
        f" {context}"
    )
    return 0


def _image_build_cache(value: str | None) -> str | None:
    """What the builds stage's layer reads as its build cache: the URL, or ``context`` for a
    folder (``docker build --build-context envbuild-build-cache=DIR``, mounted read only)."""
    from envbuild.wheelhouse.sharedcache import open_shared

    if not value:
        return None
    shared = open_shared(value)
    assert shared is not None
    return shared.location if shared.url else "context"
