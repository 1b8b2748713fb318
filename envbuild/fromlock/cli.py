"""The ``--lock`` options of ``plan``, ``provision`` and ``wheelhouse mirror``, and what each prints.

``commands/plan.py``, ``commands/provision.py`` and ``commands/wheelhouse.py`` add these options
and hand over to ``plan`` / ``provision`` / ``mirror`` here when ``--lock`` names a lock file;
the rest of those commands is unchanged.
"""

from __future__ import annotations

import argparse

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import path_arg
from envbuild.errors import ConfigError, Interrupted
from envbuild.fromlock.run import LockRequest, Prepared, prepare, provision_lock, target_python
from envbuild.fromlock.stages import STAGE_WORDS
from envbuild.gate.model import FORMATS

__all__ = ["add_lock_args", "add_selection_args", "mirror", "plan", "provision"]

# options of the stack commands that have no meaning for a lock (each named in the refusal)
_STACK_ONLY = {"profile": "--profile", "stack": "--stack", "no_lock": "--no-lock", "step": "--step"}
# options of ``wheelhouse mirror`` that choose files of a stack's lock; a lock file's environment chooses them
_MIRROR_ONLY = {"python_tag": "--python-tag", "platform": "--platform", "all_platforms": "--all-platforms",
                "index_url": "--index-url", "requirements": "--requirements"}


def add_lock_args(p: argparse.ArgumentParser, *, provision: bool) -> None:
    g = p.add_argument_group("from a committed lock (uv.lock, pylock.toml) instead of a stack spec")
    g.add_argument("--lock", metavar="FILE", type=path_arg,
                   help="install one environment of this lock: torch and its runtime first, then prebuilt extensions, "
                   "the rest, source builds against the installed torch, the project; the ABI guard after each stage")
    add_selection_args(g)
    if provision:
        g.add_argument("--replace-torch", action="store_true",
                       help="--lock --venv: replace a torch the venv has that is not the lock's (refused otherwise)")


def add_selection_args(g: argparse._ActionsContainer) -> None:
    """The options that choose one environment of a lock file (``--lock FILE``)."""
    g.add_argument("--format", dest="lock_format", choices=FORMATS, help="--lock: the lock's format (default: detected)")
    g.add_argument("--extra", metavar="NAME", action="append", default=[],
                   help="--lock: choose the selection with this extra (as uv sync --extra; repeatable)")
    g.add_argument("--group", metavar="NAME", action="append", default=[],
                   help="--lock: choose the selection with this dependency group (repeatable)")
    g.add_argument("--environment", metavar="MARKER", action="append", default=[],
                   help="--lock: the platform (linux-x86_64, ...) or a PEP 508 marker (default: this host)")
    g.add_argument("--accept", metavar="FILE", type=path_arg,
                   help="--lock: reviewed exceptions to the gate's findings ([[accept]] tables; default: "
                   "envbuild-check-lock.toml beside the lock, else [tool.envbuild.check-lock] in its pyproject.toml)")
    g.add_argument("--no-project", action="store_true", help="--lock: do not install the project itself")


def _request(args: argparse.Namespace) -> LockRequest:
    used = [flag for key, flag in _STACK_ONLY.items() if getattr(args, key, None)]
    if used:
        raise ConfigError(f"--lock installs from the lock alone: {', '.join(used)} cannot be used with it",
                          hint="Drop them, or provision a stack spec without --lock.")
    offline, wheelhouse = getattr(args, "offline", False), getattr(args, "wheelhouse", None)
    if offline and not wheelhouse:
        raise ConfigError("--offline needs --wheelhouse DIR: the only place the lock's files may come from",
                          hint=f"Make it where the lock's file hosts answer: envbuild wheelhouse mirror --lock {args.lock} "
                          "--out DIR.")
    if wheelhouse and not offline:
        raise ConfigError("--wheelhouse is used with --offline (an install only from the wheelhouse)")
    return LockRequest(lock=args.lock, fmt=args.lock_format, extras=tuple(args.extra), groups=tuple(args.group),
                       environment=tuple(args.environment), accept=args.accept, project=not args.no_project,
                       replace_torch=bool(getattr(args, "replace_torch", False)), wheelhouse=wheelhouse)


def plan(args: argparse.Namespace) -> int:
    """``plan --lock FILE``: the chosen environment, the gate's verdict and the stages (no network, no venv)."""
    req = _request(args)
    python = target_python(req, args.python, args.venv)
    prepared = prepare(req, python)
    if req.wheelhouse:  # every file from the wheelhouse, each checked as provision checks it
        from dataclasses import replace

        from envbuild.fromlock.offline import check_files, in_wheelhouse, wheelhouse_folder

        folder = wheelhouse_folder(req.wheelhouse)
        check_files(prepared.plan, folder, prepared.plan.stages)
        prepared = replace(prepared, plan=in_wheelhouse(prepared.plan, folder))
    if args.json:
        ui.print_json({**prepared.plan.to_json(), "gate": prepared.report.to_json()})
        return 0
    _print_plan(prepared)
    return 0


def _print_plan(prepared: Prepared) -> None:
    from rich.markup import escape  # a cell is text, never markup: "[tool.uv]" stays as written

    chosen, plan, report = prepared.chosen, prepared.plan, prepared.report
    ui.print_text(f"lock {chosen.path} ({chosen.lock.format}, sha256 {chosen.sha256[:16]}...)")
    ui.print_text(f"environment: {chosen.env.name} (python {chosen.env.python}); torch {plan.torch.version}")
    accepted = "; ".join(f"{f.package} [{f.rule}] accepted: {f.accepted}" for f in report.accepted)
    ui.print_text("gate: ok" + (f" ({accepted})" if accepted else ""))
    stages = plan.stages
    for n, stage in enumerate(stages, 1):
        rows = [[escape(c) for c in (p.entry.name, p.entry.version or "",
                                     p.artifact.filename if p.artifact else p.line, p.why)]
                for p in plan.stage(stage)]
        ui.print_table(f"stage {n}/{len(stages)} {stage}: {STAGE_WORDS[stage]}", ["package", "version", "file", "why"],
                       rows)
    for name, why in plan.left_out:
        ui.print_text(f"not installed: {name}: {why}")


def provision(args: argparse.Namespace) -> int:
    """``provision --lock FILE``, with provision's own options for the data root, venv and installer."""
    from envbuild.provision.options import ProvisionOptions

    req = _request(args)
    options = ProvisionOptions(
        root=args.root, home=args.home, python=args.python, venv=args.venv, backend=args.backend,
        force_links=args.force_links, strict=args.strict, compile_bytecode=args.compile_bytecode,
        prefetch=args.prefetch, step_timeout=args.step_timeout, import_timeout=args.import_timeout)
    try:
        prepared, result = provision_lock(req, options)
    except (KeyboardInterrupt, Interrupted) as exc:
        message = exc.message if isinstance(exc, Interrupted) else "interrupted"
        raise Interrupted(message, hint="The state is saved: run the same command again to resume.") from None
    chosen = prepared.chosen
    if args.json:
        ui.print_json({**prepared.plan.to_json(), "root": str(result.paths.root), "venv": str(result.paths.venv),
                       "ran": result.ran, "skipped": result.skipped, "adopted_torch": prepared.adopted,
                       "warnings": result.warnings, "seconds": round(result.seconds, 3),
                       "receipt": str(result.receipt) if result.receipt else None})
        return 0
    where = f"{chosen.path} ({chosen.env.name})"
    if not result.ran:
        events.emit("ok", f"{where}: already provisioned and verified at {result.paths.venv}; nothing to do")
    else:
        events.emit("ok", f"{where}: provisioned {result.paths.venv} in {result.seconds:.1f} s "
                    f"({len(result.ran)} stages run, {len(result.skipped)} already done)")
    ui.print_text(f"activate: . {result.paths.venv}/bin/activate")
    if result.receipt:
        ui.print_text(f"receipt: {result.receipt}")
    return 0



def mirror(args: argparse.Namespace) -> int:
    """``wheelhouse mirror --lock FILE``: every file the chosen environment installs, into ``--out``."""
    from envbuild.fromlock.offline import mirror_lock

    used = [flag for key, flag in _MIRROR_ONLY.items() if getattr(args, key, None)]
    if used:
        raise ConfigError(f"--lock {args.lock}: {', '.join(used)} cannot be used with a lock file: the environment "
                          "chosen of it (this host, or --environment, --extra, --group) decides which files are mirrored",
                          hint="Drop them; `envbuild plan --lock FILE` lists the files.")
    req = LockRequest(lock=args.lock, fmt=args.lock_format, extras=tuple(args.extra), groups=tuple(args.group),
                      environment=tuple(args.environment), accept=args.accept, project=not args.no_project)
    prepared = prepare(req, target_python(req, str(args.python) if args.python else None, None))
    chosen = prepared.chosen
    events.emit("step", f"mirroring what {chosen.path} installs in {chosen.env.name} into {args.out}")
    done = mirror_lock(prepared.plan, args.out, jobs=args.jobs, retries=args.retries)
    for line in done.not_mirrored:
        events.emit("warn", f"not mirrored: {line}")
    if args.json:
        ui.print_json({**chosen.to_json(), "out": str(done.out), "downloaded": list(done.downloaded),
                       "present": list(done.present), "not_mirrored": list(done.not_mirrored),
                       "index": str(done.index), "bytes_mirrored": done.bytes})
        return 0
    ui.print_text(f"{len(done.downloaded)} downloaded, {len(done.present)} already present ({done.bytes / 1e6:.1f} MB) "
                  f"for {chosen.env.name}; index: {done.index}")
    ui.print_text(f"offline: envbuild provision --lock {chosen.path} --offline --wheelhouse {done.out}"
                  + "".join(f" --extra {x}" for x in req.extras) + "".join(f" --group {g}" for g in req.groups))
    return 0
