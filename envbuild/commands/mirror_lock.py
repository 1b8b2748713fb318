"""``wheelhouse mirror --lock FILE``: every file a lock installs, mirrored, and what it prints."""

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
        WheelhouseMirrorLockDocument,
    )
    from envbuild.commands.selection import WheelhouseMirrorArgs
    from envbuild.gate.selection import Chosen
    from envbuild.projectlock.offlinefiles import LockMirror
    from envbuild.projectlock.request import LockRequest


def mirror_from_lock(args: WheelhouseMirrorArgs, lock: Path) -> int:
    """``wheelhouse mirror --lock FILE``: every file the chosen environment installs, into
    ``--out``."""
    from envbuild.projectlock.buildreqs import build_sources
    from envbuild.projectlock.offlinebuilds import mirror_builds
    from envbuild.projectlock.offlinefiles import mirror_lock, read_installed, without_installed
    from envbuild.wheelhouse.pages import write_index

    _refuse_stack_options(args, lock)
    req = lock_selection(args, lock, python=str(args.python) if args.python else None)
    prepared = prepare_lock(req)
    chosen = prepared.chosen
    plan = prepared.plan
    if args.have is not None:
        plan = without_installed(plan, read_installed(args.have))
        events.emit(
            "info",
            f"--have {args.have}: {len(prepared.plan.placed) - len(plan.placed)} of"
            f" {len(prepared.plan.placed)} locked packages are there at the locked version; not"
            " mirrored",
        )
    events.emit(
        "step", f"mirroring what {chosen.path} installs in {chosen.env.name} into {args.out}"
    )
    done = mirror_lock(plan, args.out, jobs=args.jobs, deadline=args.deadline)
    sources = build_sources(chosen.source.project, req.build_constraints)
    built = mirror_builds(plan, args.out, sources, jobs=args.jobs, deadline=args.deadline)
    if built:
        write_index(args.out)  # the build requirements in the pages too
        for line in built:
            events.emit("info", f"build requirements of {line}")
    for line in done.not_mirrored:
        events.emit("warn", f"not mirrored: {line}")
    if args.json:
        doc: WheelhouseMirrorLockDocument = {
            "schema": "envbuild.wheelhouse.mirror.lock/1",
            **chosen.to_json(),
            "out": str(done.out),
            "downloaded": list(done.downloaded),
            "present": list(done.present),
            "not_mirrored": list(done.not_mirrored),
            "index": str(done.index),
            "bytes_mirrored": done.bytes,
        }
        ui.print_json(doc)
        return 0
    _print_mirrored(req, chosen, done)
    return 0


def _refuse_stack_options(args: WheelhouseMirrorArgs, lock: Path) -> None:
    """ConfigError for the options of ``wheelhouse mirror`` that choose files of a stack's lock:
    a lock file's environment chooses them."""
    used = given_flags(
        {
            "--python-tag": args.python_tag,
            "--platform": args.platform,
            "--all-platforms": args.all_platforms,
            "--index-url": args.index_url,
            "--requirements": args.requirements,
        }
    )
    if used:
        raise ConfigError(
            f"--lock {lock}: {', '.join(used)} cannot be used with a lock file: the environment"
            " chosen of it (this host, or --environment, --extra, --group) decides which files are"
            " mirrored",
            hint="Drop them; `envbuild plan --lock FILE` lists the files.",
        )


def _print_mirrored(req: LockRequest, chosen: Chosen, done: LockMirror) -> None:
    """What was mirrored, and the command that provisions from it offline."""
    ui.print_text(
        f"{len(done.downloaded)} downloaded, {len(done.present)} already present"
        f" ({done.bytes / 1e6:.1f} MB) for {chosen.env.name}; index: {done.index}"
    )
    ui.print_text(
        "offline: "
        + shlex.join(
            [
                "envbuild",
                "provision",
                "--lock",
                str(chosen.path),
                "--offline",
                "--wheelhouse",
                str(done.out),
                *req.sync.selection_argv(),
                *req.sync.install_argv(),
                *(["--rebuild-mismatched"] if req.rebuild_mismatched else []),
            ]
        )
    )
