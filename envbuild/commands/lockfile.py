"""The ``--lock`` options of ``plan``, ``provision`` and ``wheelhouse mirror``, and what each prints.

``commands/plan.py``, ``commands/provision.py`` and ``commands/wheelhouse.py`` add these options
and hand over to ``plan`` / ``provision`` / ``mirror`` here when ``--lock`` names a lock file;
the rest of those commands is unchanged.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import JsonArgs, RootArgs, StackArgs, path_arg
from envbuild.errors import ConfigError, Interrupted
from envbuild.fromlock.record import write_record
from envbuild.fromlock.run import (
    DEFAULT_ROOT,
    LockRequest,
    Prepared,
    adopt,
    base_torch_of,
    prepare,
    provision_lock,
    provision_slice,
    target_python,
)
from envbuild.fromlock.select import refuse
from envbuild.fromlock.stages import STAGE_WORDS
from envbuild.fromlock.uvsync import SyncFlags
from envbuild.gate.model import FORMATS, Format
from envbuild.plan import Backend
from envbuild.quoting import sh_word

if TYPE_CHECKING:
    from envbuild.commands.docker import DockerArgs
    from envbuild.commands.documents import (
        DockerLockCheckDocument,
        DockerLockDocument,
        PlanLockDocument,
        ProvisionLockDocument,
        ProvisionSliceDocument,
        WheelhouseMirrorLockDocument,
    )
    from envbuild.commands.preflight import PreflightArgs
    from envbuild.commands.provision import ProvisionArgs
    from envbuild.commands.wheelhouse import WheelhouseMirrorArgs
    from envbuild.host.preflight import PreflightReport
    from envbuild.layout import Paths
    from envbuild.spec import StackSpec

__all__ = ["InstallArgs", "LockArgs", "SelectionArgs", "add_lock_args", "add_selection_args", "docker", "mirror",
           "plan", "preflight_spec", "provision"]


@dataclass(frozen=True)
class SelectionArgs:
    """``add_selection_args``: the options that choose one environment of a lock file."""

    lock_format: Format | None
    extra: list[str]
    group: list[str]
    environment: list[str]
    accept: Path | None
    rebuild_mismatched: bool
    no_project: bool
    all_extras: bool
    no_extra: list[str]
    only_group: list[str]
    no_group: list[str]
    all_groups: bool
    no_default_groups: bool
    no_dev: bool
    only_dev: bool
    package: list[str]
    all_packages: bool
    no_editable: bool
    no_install_project: bool
    require_hashes: bool
    no_install_workspace: bool


@dataclass(frozen=True)
class LockArgs(SelectionArgs):
    """``--lock FILE`` (``add_lock_args``, or the command's own help) and the selection options."""

    lock: Path | None


@dataclass(frozen=True)
class InstallArgs(LockArgs, StackArgs, JsonArgs, RootArgs):
    """What ``plan`` and ``provision`` share (plan shows what provision would run): a stack or a
    lock, the venv, the interpreter, the installer and where the packages come from."""

    venv: Path | None
    python: str | None
    backend: Backend | None
    offline: bool
    wheelhouse: str | None
    no_lock: bool


def _given(options: dict[str, object]) -> list[str]:
    """The flags of ``options`` ({--flag: its parsed value}) given on the command line."""
    return [flag for flag, value in options.items() if value]


def add_lock_args(p: argparse.ArgumentParser, *, provision: bool) -> None:
    g = p.add_argument_group("from a committed lock (uv.lock, pylock.toml) instead of a stack spec")
    g.add_argument("--lock", metavar="FILE", type=path_arg,
                   help="install one environment of this lock: torch and its runtime first, then prebuilt extensions, "
                   "the rest, source builds against the installed torch, the project; the ABI guard after each stage")
    add_selection_args(g)
    if provision:
        g.add_argument("--replace-torch", action="store_true",
                       help="--lock --venv: replace a torch the venv has that is not the lock's (refused otherwise)")


def _lock_only(args: SelectionArgs, *, replace_torch: bool, have: Path | None) -> dict[str, object]:
    """The options that choose or shape an environment of a lock file: meaningless without --lock FILE
    (``--replace-torch``: provision's; ``--have``: wheelhouse mirror's)."""
    return {"--format": args.lock_format, "--extra": args.extra, "--group": args.group,
            "--environment": args.environment, "--accept": args.accept, "--no-project": args.no_project,
            "--rebuild-mismatched": args.rebuild_mismatched, "--replace-torch": replace_torch, "--have": have,
            "--all-extras": args.all_extras, "--no-extra": args.no_extra, "--only-group": args.only_group,
            "--no-group": args.no_group, "--all-groups": args.all_groups,
            "--no-default-groups": args.no_default_groups, "--no-dev": args.no_dev, "--only-dev": args.only_dev,
            "--package": args.package, "--all-packages": args.all_packages, "--no-editable": args.no_editable,
            "--no-install-project": args.no_install_project, "--no-install-workspace": args.no_install_workspace,
            "--require-hashes": args.require_hashes}


def _selection(args: SelectionArgs, lock: Path, *, wheelhouse: str | None = None,
               replace_torch: bool = False) -> LockRequest:
    """The lock request of the selection options every ``--lock`` front end shares (``add_selection_args``)."""
    sync = sync_flags(args)
    return LockRequest(lock=lock, fmt=args.lock_format, extras=tuple(args.extra), groups=tuple(args.group),
                       environment=tuple(args.environment), accept=args.accept,
                       project=not (args.no_project or args.no_install_project),
                       rebuild_mismatched=args.rebuild_mismatched, wheelhouse=wheelhouse, replace_torch=replace_torch,
                       sync=sync, require_hashes=args.require_hashes)


def sync_flags(args: SelectionArgs) -> SyncFlags:
    """uv sync's flags as ``add_selection_args`` parsed them (``--no-project`` is ``--no-install-project``)."""
    return SyncFlags(
        extras=tuple(args.extra), all_extras=args.all_extras, no_extras=tuple(args.no_extra), groups=tuple(args.group),
        only_groups=tuple(args.only_group), no_groups=tuple(args.no_group), all_groups=args.all_groups,
        no_default_groups=args.no_default_groups, no_dev=args.no_dev, only_dev=args.only_dev,
        packages=tuple(args.package), all_packages=args.all_packages, no_editable=args.no_editable,
        no_install_project=args.no_install_project or args.no_project, no_install_workspace=args.no_install_workspace)


def refuse_lock_options(args: SelectionArgs, *, replace_torch: bool = False, have: Path | None = None) -> None:
    """Exit 2 when an option of ``--lock FILE`` is given without it (it would be ignored silently);
    ``replace_torch`` and ``have``: the command's own (provision's, wheelhouse mirror's)."""
    used = _given(_lock_only(args, replace_torch=replace_torch, have=have))
    if used:
        raise ConfigError(f"{', '.join(used)} {'goes' if len(used) == 1 else 'go'} with --lock FILE (a uv.lock or "
                          "pylock.toml): without it there is no lock environment to choose",
                          hint="Add --lock FILE, or drop them to use the stack spec (--profile / --stack).")


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
    g.add_argument("--rebuild-mismatched", action="store_true",
                   help="--lock: a prebuilt extension wheel built for another torch/CUDA/C++ ABI than the lock's torch "
                   "(gate rule extension-abi) is built from its sdist against the lock's torch instead (the lock's "
                   "sdist, else the same version's from its index, pinned by the page's sha256), in the builds stage")
    g.add_argument("--no-project", action="store_true", help="--lock: do not install the project itself "
                   "(as --no-install-project)")
    # uv sync's own selection flags, flag for flag: uv export says what each selects (``fromlock.uvsync``)
    g.add_argument("--all-extras", action="store_true", help="--lock: every extra (as uv sync --all-extras)")
    g.add_argument("--no-extra", metavar="NAME", action="append", default=[],
                   help="--lock: with --all-extras, leave this extra out (as uv sync; repeatable)")
    g.add_argument("--only-group", metavar="NAME", action="append", default=[],
                   help="--lock: only this dependency group, not the project's dependencies (as uv sync; repeatable)")
    g.add_argument("--no-group", metavar="NAME", action="append", default=[],
                   help="--lock: leave this group out, default groups included (as uv sync; repeatable)")
    g.add_argument("--all-groups", action="store_true", help="--lock: every dependency group (as uv sync)")
    g.add_argument("--no-default-groups", action="store_true",
                   help="--lock: none of the default groups (dev, or [tool.uv] default-groups; as uv sync)")
    g.add_argument("--no-dev", action="store_true", help="--lock: leave the dev group out (as uv sync)")
    g.add_argument("--only-dev", action="store_true", help="--lock: only the dev group (as uv sync)")
    g.add_argument("--package", metavar="NAME", action="append", default=[],
                   help="--lock: install this workspace member and what it needs (as uv sync --package)")
    g.add_argument("--all-packages", action="store_true", help="--lock: every workspace member (as uv sync)")
    g.add_argument("--no-editable", action="store_true",
                   help="--lock: install the project and workspace members as wheels, not editable (as uv sync)")
    g.add_argument("--no-install-project", action="store_true",
                   help="--lock: install the project's dependencies, not the project (as uv sync)")
    g.add_argument("--require-hashes", action="store_true",
                   help="--lock: refuse a lock that records no sha256 for a file it installs (default: install it as uv "
                   "does, pin the sha256 of the bytes installed, and require it from then on)")
    g.add_argument("--no-install-workspace", action="store_true",
                   help="--lock: install no workspace member, the project included (as uv sync)")


def _request(args: InstallArgs, lock: Path, *, step: str | None = None, replace_torch: bool = False) -> LockRequest:
    """``plan``'s and ``provision``'s ``--lock FILE`` request (``step``, ``replace_torch``: provision's options)."""
    # options of the stack commands that have no meaning for a lock (each named in the refusal)
    used = _given({"--profile": args.profile, "--stack": args.stack, "--no-lock": args.no_lock, "--step": step})
    if used:
        raise ConfigError(f"--lock installs from the lock alone: {', '.join(used)} cannot be used with it",
                          hint="Drop them, or provision a stack spec without --lock.")
    offline, wheelhouse = args.offline, args.wheelhouse
    if offline and not wheelhouse:
        raise ConfigError("--offline needs --wheelhouse DIR: the only place the lock's files may come from",
                          hint=f"Make it where the lock's file hosts answer: envbuild wheelhouse mirror --lock {lock} "
                          "--out DIR.")
    if wheelhouse and not offline:
        raise ConfigError("--wheelhouse is used with --offline (an install only from the wheelhouse)")
    return _selection(args, lock, wheelhouse=wheelhouse, replace_torch=replace_torch)


def plan(args: InstallArgs, lock: Path) -> int:
    """``plan --lock FILE``: the chosen environment, the gate's verdict and the stages (no network, no venv)."""
    req = _request(args, lock)
    python = target_python(req, args.python, args.venv)
    if args.venv is not None:
        from dataclasses import replace as _replace

        req = _replace(req, base_torch=base_torch_of(Path(args.venv)))
    prepared = prepare(req, python, refusing=False)  # the stages first, then the refusal (exit 8)
    if args.venv is not None:  # what provision --venv would keep there is not installed (nor checked offline)
        prepared = adopt(prepared, Path(args.venv), req.replace_torch)
    if req.wheelhouse:  # every file from the wheelhouse, each checked as provision checks it
        from dataclasses import replace

        from envbuild.fromlock.offline import check_files, in_wheelhouse, wheelhouse_folder

        folder = wheelhouse_folder(req.wheelhouse)
        check_files(prepared.plan, folder, prepared.plan.stages)
        prepared = replace(prepared, plan=in_wheelhouse(prepared.plan, folder))
    builds = _build_notes(args, prepared, req)
    if args.json:
        doc: PlanLockDocument = {"schema": "envbuild.plan.lock/1", **prepared.plan.to_json(), "builds": builds,
                                 "gate": prepared.report.to_json()}
        ui.print_json(doc)
    else:
        _print_plan(prepared)
        for name, note in builds.items():
            ui.print_text(f"build {name}: {note}")
    # exit 8 after the stages, as provision would
    refuse(prepared.chosen, list(prepared.failing), req.accept, rebuild=req.rebuild_mismatched)
    return 0


def _build_notes(args: InstallArgs, prepared: Prepared, req: LockRequest) -> dict[str, str]:
    """{name: a cached built wheel, or that it compiles} of the builds stage (``fromlock.builds``)."""
    from envbuild.fromlock.builds import caches, plan_notes
    from envbuild.fromlock.offline import wheelhouse_folder

    if not prepared.plan.stage("builds"):
        return {}
    root = Path(args.root or DEFAULT_ROOT).expanduser()
    venv = Path(args.venv).expanduser() if args.venv else root / "venv"
    folder = wheelhouse_folder(req.wheelhouse) if req.wheelhouse else None
    return plan_notes(prepared.plan, caches(root, folder), venv / "bin" / "python")


def _print_plan(prepared: Prepared) -> None:
    from rich.markup import escape  # a cell is text, never markup: "[tool.uv]" stays as written

    chosen, plan, report = prepared.chosen, prepared.plan, prepared.report
    ui.print_text(f"lock {chosen.path} ({chosen.lock.format}, sha256 {chosen.sha256[:16]}...)")
    ui.print_text(f"environment: {chosen.env.name} (python {chosen.env.python}); torch {plan.torch.version}")
    if chosen.sync:
        ui.print_text(f"selection: what `{chosen.sync}` installs (uv export says which packages)")
    accepted = "; ".join([*(f"{f.package} [{f.rule}] accepted: {f.accepted}" for f in report.accepted),
                          *(f"{p.entry.name} [extension-abi] rebuilt from its sdist: --rebuild-mismatched"
                            for p in plan.placed if p.rebuilt)])
    if prepared.failing:
        ui.print_text(f"gate: FAIL ({len(prepared.failing)} finding(s) below): provision --lock refuses this environment")
    else:
        ui.print_text("gate: ok" + (f" ({accepted})" if accepted else ""))
    stages = plan.stages
    for n, stage in enumerate(stages, 1):
        rows = [[escape(c) for c in (p.entry.name, p.entry.version or "",
                                     p.artifact.filename if p.artifact else p.line, p.why)]
                for p in plan.stage(stage)]
        ui.print_table(f"stage {n}/{len(stages)} {stage}: {STAGE_WORDS[stage]}", ["package", "version", "file", "why"],
                       rows, max_width=100, keep=1)
    for name, why in plan.left_out:
        ui.print_text(f"not installed: {name}: {why}")


def provision(args: ProvisionArgs, lock: Path) -> int:
    """``provision --lock FILE``, with provision's own options for the data root, venv and installer."""
    from envbuild.provision.options import ProvisionOptions

    options = ProvisionOptions(
        root=args.root, home=args.home, python=args.python, venv=args.venv, backend=args.backend,
        force_links=args.force_links, strict=args.strict, compile_bytecode=args.compile_bytecode,
        prefetch=args.prefetch, step_timeout=args.step_timeout, import_timeout=args.import_timeout)
    from envbuild.fromlock.image import is_slice

    try:
        if is_slice(lock):  # one layer of `envbuild docker --lock`
            spec, source, result = provision_slice(lock, options)
            write_record(result.paths.venv, result.paths.root, spec, source)
            if args.json:
                layer: ProvisionSliceDocument = {
                    "schema": "envbuild.provision.slice/1", **source, "root": str(result.paths.root),
                    "venv": str(result.paths.venv), "ran": result.ran, "skipped": result.skipped,
                    "seconds": round(result.seconds, 3), "receipt": str(result.receipt) if result.receipt else None}
                ui.print_json(layer)
            else:
                events.emit("ok", f"{lock}: {len(result.ran)} stages run, {len(result.skipped)} already done "
                            f"({result.seconds:.1f} s)")
            return 0
        prepared, result = provision_lock(_request(args, lock, step=args.step, replace_torch=args.replace_torch),
                                          options)
    except (KeyboardInterrupt, Interrupted) as exc:
        message = exc.message if isinstance(exc, Interrupted) else "interrupted"
        raise Interrupted(message, hint="The state is saved: run the same command again to resume.") from exc
    chosen = prepared.chosen
    recorded = write_record(result.paths.venv, result.paths.root, result.plan.spec,
                            {**chosen.to_json(), "adopted_torch": prepared.adopted})
    if args.json:
        doc: ProvisionLockDocument = {
            "schema": "envbuild.provision.lock/1", **prepared.plan.to_json(), "root": str(result.paths.root),
            "venv": str(result.paths.venv), "ran": result.ran, "skipped": result.skipped,
            "adopted_torch": prepared.adopted, "warnings": result.warnings, "seconds": round(result.seconds, 3),
            "receipt": str(result.receipt) if result.receipt else None}
        ui.print_json(doc)
        return 0
    where = f"{chosen.path} ({chosen.env.name})"
    if not result.ran:
        events.emit("ok", f"{where}: already provisioned and verified at {result.paths.venv}; nothing to do")
    else:
        events.emit("ok", f"{where}: provisioned {result.paths.venv} in {result.seconds:.1f} s "
                    f"({len(result.ran)} stages run, {len(result.skipped)} already done)")
    ui.print_text(f"activate: . {sh_word(str(result.paths.venv / 'bin' / 'activate'), '--venv')}"
                  + ("  (smoke, verify and receipt then find this environment)" if recorded else ""))
    if result.receipt:
        ui.print_text(f"receipt: {result.receipt}")
    return 0



def mirror(args: WheelhouseMirrorArgs, lock: Path) -> int:
    """``wheelhouse mirror --lock FILE``: every file the chosen environment installs, into ``--out``."""
    from envbuild.fromlock.offline import mirror_lock, read_installed, without_installed

    # options of ``wheelhouse mirror`` that choose files of a stack's lock; a lock file's environment chooses them
    used = _given({"--python-tag": args.python_tag, "--platform": args.platform, "--all-platforms": args.all_platforms,
                   "--index-url": args.index_url, "--requirements": args.requirements})
    if used:
        raise ConfigError(f"--lock {lock}: {', '.join(used)} cannot be used with a lock file: the environment "
                          "chosen of it (this host, or --environment, --extra, --group) decides which files are mirrored",
                          hint="Drop them; `envbuild plan --lock FILE` lists the files.")
    req = _selection(args, lock)
    prepared = prepare(req, target_python(req, str(args.python) if args.python else None, None))
    chosen = prepared.chosen
    plan = prepared.plan
    if args.have is not None:
        plan = without_installed(plan, read_installed(args.have))
        events.emit("info", f"--have {args.have}: {len(prepared.plan.placed) - len(plan.placed)} of "
                    f"{len(prepared.plan.placed)} locked packages are there at the locked version; not mirrored")
    events.emit("step", f"mirroring what {chosen.path} installs in {chosen.env.name} into {args.out}")
    done = mirror_lock(plan, args.out, jobs=args.jobs, deadline=args.deadline)
    for line in done.not_mirrored:
        events.emit("warn", f"not mirrored: {line}")
    if args.json:
        doc: WheelhouseMirrorLockDocument = {
            "schema": "envbuild.wheelhouse.mirror.lock/1", **chosen.to_json(), "out": str(done.out),
            "downloaded": list(done.downloaded), "present": list(done.present),
            "not_mirrored": list(done.not_mirrored), "index": str(done.index), "bytes_mirrored": done.bytes}
        ui.print_json(doc)
        return 0
    ui.print_text(f"{len(done.downloaded)} downloaded, {len(done.present)} already present ({done.bytes / 1e6:.1f} MB) "
                  f"for {chosen.env.name}; index: {done.index}")
    ui.print_text("offline: " + shlex.join(["envbuild", "provision", "--lock", str(chosen.path), "--offline", "--wheelhouse",
                              str(done.out), *req.sync.selection_argv(), *req.sync.install_argv(),
                              *(["--rebuild-mismatched"] if req.rebuild_mismatched else [])]))
    return 0


def docker(args: DockerArgs, lock: Path) -> int:
    """``docker --lock FILE``: the Dockerfile of one layer per stage, and its stage slices."""
    import os

    from envbuild._io import atomic_write_text
    from envbuild.commands.docker import tool_source, write_build_files
    from envbuild.errors import LockError
    from envbuild.fromlock.image import render_lock
    from envbuild.images.docker import DockerOptions, stale_files

    # options of ``docker`` that have no meaning with --lock
    used = _given({"--profile": args.profile, "--stack": args.stack, "--venv": args.venv, "--offline": args.offline,
                   "--no-lock": args.no_lock, "--dockerignore": args.dockerignore})
    if used:
        raise ConfigError(f"docker --lock renders the lock's stages: {', '.join(used)} cannot be used with it",
                          hint="Drop them, or render a stack spec without --lock.")
    req = _selection(args, lock)
    prepared = prepare(req, target_python(req, None, None))
    name = prepared.chosen.path.parent.name or "project"
    output = args.output or Path("docker") / f"lock-{name}.Dockerfile"
    output = output if output.is_absolute() else Path.cwd() / output
    context = args.context.absolute() if args.context else (
        Path.cwd() if output.parent.is_relative_to(Path.cwd()) else output.parent)
    steps_folder = output.parent / f"{output.name.removesuffix('.Dockerfile')}.stages"
    try:
        steps_dir = steps_folder.relative_to(context).as_posix()
    except ValueError as exc:
        raise ConfigError(f"-o {output}: the Dockerfile's folder must be inside the build context {context} "
                          "(its COPY lines read the stage slices from there)") from exc
    tool_src = tool_source(context, output.parent)
    command = shlex.join(["envbuild", "docker", "--lock", str(lock), *req.sync.selection_argv(),
                          *req.sync.install_argv(), *(a for e in req.environment for a in ("--environment", e)),
                          *(["--rebuild-mismatched"] if req.rebuild_mismatched else [])]
                         + (["--base", args.base] if args.base else []) + (["-o", str(args.output)] if args.output else []))
    opts = DockerOptions(base=args.base, root=args.root, steps_dir=steps_dir, command=command,
                         tool_src=tool_src.relative_to(context).as_posix() + "/" if tool_src != context else "")
    rendered = render_lock(prepared.plan, opts, command)
    for warning in rendered.warnings:
        events.emit("warn", warning)
    if args.check:
        stale = stale_files(rendered, output, context, steps_dir)
        if args.json:
            checked: DockerLockCheckDocument = {"schema": "envbuild.docker.lock.check/1", "lock": str(lock),
                                                "dockerfile": str(output), "stale": stale}
            ui.print_json(checked)
        if stale:
            raise LockError(f"{output} is stale against {lock}: " + ", ".join(stale), hint=f"Regenerate it: {command}")
        return 0
    for old in steps_folder.glob("[0-9][0-9]-*.json") if steps_folder.is_dir() else ():
        if f"{steps_dir}/{old.name}" not in rendered.files:
            old.unlink()
    write_build_files(rendered.files, context, steps_folder, tool_src)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, rendered.dockerfile)
    if args.json:
        doc: DockerLockDocument = {"schema": "envbuild.docker.lock/1", "lock": str(lock),
                                   "environment": prepared.chosen.env.name, "dockerfile": str(output),
                                   "files": sorted(rendered.files)}
        ui.print_json(doc)
        return 0
    events.emit("ok", f"wrote {output} and {len(rendered.files)} stage slices in {steps_folder}")
    ui.print_text(f"build: docker build -f {os.path.relpath(output, context)} -t envbuild/lock-{name} {context}")
    return 0


def preflight_spec(args: PreflightArgs, lock: Path, groups: list[str]) -> tuple[StackSpec, Paths, PreflightReport]:
    """``preflight --lock FILE``: the lock's stack and the host's report on it (``fromlock.preflight``)."""
    from envbuild.fromlock.preflight import lock_preflight
    from envbuild.fromlock.stack import stack_for
    from envbuild.layout import paths_for

    if args.profile or args.stack:
        raise ConfigError("preflight --lock checks the host against the lock: --profile and --stack cannot be used "
                          "with it")
    req = _selection(args, lock)
    prepared = prepare(req, target_python(req, args.python, None))
    spec = stack_for(prepared.plan, root=str(args.root) if args.root else "/mnt/data")
    paths = paths_for(spec, args.root)
    builds = bool(prepared.plan.stage("builds"))
    # nvcc matters where a stage compiles; the lock's files come from its own URLs, not from an index
    checked = [g for g in groups if (g != "cuda-toolkit" or builds) and g != "index"]
    runtime = [(p.entry.name, p.entry.version) for p in prepared.plan.stage("torch")]
    spec, report = lock_preflight(spec, paths, checks=checked, index_timeout=args.index_timeout, python=args.python,
                                  builds=builds, runtime=runtime)
    if "index" in groups:
        from dataclasses import replace

        from envbuild.fromlock.run import unreachable_hosts
        from envbuild.host.preflight import Check

        bad = unreachable_hosts(prepared, set(prepared.plan.stages))
        hosts = "the lock's file hosts"
        check = (Check("lock-hosts", "fail", "; ".join(bad), "reachable", "provision --lock stops here (exit 3); "
                       "mirror the files where they answer: envbuild wheelhouse mirror --lock FILE")
                 if bad else Check("lock-hosts", "pass", "answer", "reachable", hosts))
        report = replace(report, checks=(*report.checks, check))
    return spec, paths, report
