"""What the ``--lock`` branches of ``plan``, ``provision``, ``wheelhouse mirror``, ``docker`` and
``preflight`` share: their argument types, uv sync's selection flags on envbuild's command line,
and the request each branch builds from them. A leaf of ``commands/``: the commands import it, it
imports no command; each branch is a module of its own (``plan_lock``, ``provision_lock``,
``mirror_lock``, ``docker_lock``, ``preflight_lock``), imported by its command only when
``--lock`` names a file.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.commands.common import JsonArgs, RootArgs, StackArgs, path_arg
from envbuild.errors import ConfigError
from envbuild.gate.model import FORMATS, Format
from envbuild.plan import Backend
from envbuild.provision.options import Choice

if TYPE_CHECKING:  # imported where used: `provision` without --lock never loads projectlock
    from envbuild.gate.uvsync import SyncFlags
    from envbuild.projectlock.run import LockRequest

__all__ = [
    "DockerArgs",
    "InstallArgs",
    "LockArgs",
    "PreflightArgs",
    "ProvisionArgs",
    "WheelhouseMirrorArgs",
    "SelectionArgs",
    "add_lock_args",
    "add_selection_args",
    "given_flags",
    "lock_request",
    "lock_selection",
    "refuse_lock_options",
    "sync_flags",
]


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
    build_constraints: list[Path]


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


def given_flags(options: dict[str, object]) -> list[str]:
    """The flags of ``options`` ({--flag: its parsed value}) given on the command line."""
    return [flag for flag, value in options.items() if value]


def add_lock_args(p: argparse.ArgumentParser, *, provision: bool) -> None:
    g = p.add_argument_group("from a committed lock (uv.lock, pylock.toml) instead of a stack spec")
    g.add_argument(
        "--lock",
        metavar="FILE",
        type=path_arg,
        help=(
            "install one environment of this lock: torch and its runtime first, then prebuilt"
            " extensions, the rest, source builds against the installed torch, the project; the ABI"
            " guard after each stage"
        ),
    )
    add_selection_args(g)
    if provision:
        g.add_argument(
            "--inexact",
            action="store_true",
            help=(
                "--lock: keep packages the selection does not install (default: remove "
                "them, as uv sync does; never torch and its protected set, nor what an "
                "adopted --venv held)"
            ),
        )
        g.add_argument(
            "--replace-torch",
            action="store_true",
            help=(
                "--lock --venv: replace a torch the venv has that is not the lock's (refused"
                " otherwise)"
            ),
        )


def _lock_only(
    args: SelectionArgs, *, replace_torch: bool, have: Path | None, inexact: bool = False
) -> dict[str, object]:
    """The options that choose or shape an environment of a lock file: meaningless without --lock
    FILE (``--replace-torch``: provision's; ``--have``: wheelhouse mirror's)."""
    return {
        "--format": args.lock_format,
        "--extra": args.extra,
        "--group": args.group,
        "--environment": args.environment,
        "--accept": args.accept,
        "--no-project": args.no_project,
        "--rebuild-mismatched": args.rebuild_mismatched,
        "--replace-torch": replace_torch,
        "--have": have,
        "--all-extras": args.all_extras,
        "--no-extra": args.no_extra,
        "--only-group": args.only_group,
        "--no-group": args.no_group,
        "--all-groups": args.all_groups,
        "--no-default-groups": args.no_default_groups,
        "--no-dev": args.no_dev,
        "--only-dev": args.only_dev,
        "--package": args.package,
        "--all-packages": args.all_packages,
        "--no-editable": args.no_editable,
        "--no-install-project": args.no_install_project,
        "--no-install-workspace": args.no_install_workspace,
        "--require-hashes": args.require_hashes,
        "--build-constraints": args.build_constraints,
        "--inexact": inexact,
    }


def lock_selection(
    args: SelectionArgs,
    lock: Path,
    *,
    python: str | None = None,
    venv: Path | None = None,
    wheelhouse: str | None = None,
    replace_torch: bool = False,
    inexact: bool = False,
) -> LockRequest:
    """The lock request of the selection options every ``--lock`` front end shares
    (``add_selection_args``), with the command's own: the interpreter, the venv, the wheelhouse,
    provision's ``--replace-torch`` and ``--inexact``."""
    from envbuild.projectlock.run import LockRequest

    sync = sync_flags(args)
    return LockRequest(
        lock=lock,
        fmt=args.lock_format,
        python=python,
        venv=venv,
        environment=tuple(args.environment),
        accept=args.accept,
        project=not (args.no_project or args.no_install_project),
        rebuild_mismatched=args.rebuild_mismatched,
        wheelhouse=wheelhouse,
        replace_torch=replace_torch,
        sync=sync,
        require_hashes=args.require_hashes,
        build_constraints=tuple(args.build_constraints),
        inexact=inexact,
    )


def sync_flags(args: SelectionArgs) -> SyncFlags:
    """uv sync's flags as ``add_selection_args`` parsed them (``--no-project`` is
    ``--no-install-project``)."""
    from envbuild.gate.uvsync import SyncFlags

    return SyncFlags(
        extras=tuple(args.extra),
        all_extras=args.all_extras,
        no_extras=tuple(args.no_extra),
        groups=tuple(args.group),
        only_groups=tuple(args.only_group),
        no_groups=tuple(args.no_group),
        all_groups=args.all_groups,
        no_default_groups=args.no_default_groups,
        no_dev=args.no_dev,
        only_dev=args.only_dev,
        packages=tuple(args.package),
        all_packages=args.all_packages,
        no_editable=args.no_editable,
        no_install_project=args.no_install_project or args.no_project,
        no_install_workspace=args.no_install_workspace,
    )


def refuse_lock_options(
    args: SelectionArgs,
    *,
    replace_torch: bool = False,
    have: Path | None = None,
    inexact: bool = False,
) -> None:
    """Exit 2 when an option of ``--lock FILE`` is given without it (it would be ignored silently);
    ``replace_torch`` and ``have``: the command's own (provision's, wheelhouse mirror's)."""
    used = given_flags(_lock_only(args, replace_torch=replace_torch, have=have, inexact=inexact))
    if used:
        raise ConfigError(
            f"{', '.join(used)} {'goes' if len(used) == 1 else 'go'} with --lock FILE (a uv.lock or"
            " pylock.toml): without it there is no lock environment to choose",
            hint="Add --lock FILE, or drop them to use the stack spec (--profile / --stack).",
        )


def add_selection_args(g: argparse._ActionsContainer) -> None:
    """The options that choose one environment of a lock file (``--lock FILE``)."""
    _add_environment_args(g)
    _add_review_args(g)
    _add_uv_selection_args(g)
    _add_install_args(g)


def _add_environment_args(g: argparse._ActionsContainer) -> None:
    """The lock's format, and the environment of it: extras, groups, the platform."""
    g.add_argument(
        "--format",
        dest="lock_format",
        choices=FORMATS,
        help="--lock: the lock's format (default: detected)",
    )
    g.add_argument(
        "--extra",
        metavar="NAME",
        action="append",
        default=[],
        help="--lock: choose the selection with this extra (as uv sync --extra; repeatable)",
    )
    g.add_argument(
        "--group",
        metavar="NAME",
        action="append",
        default=[],
        help="--lock: choose the selection with this dependency group (repeatable)",
    )
    g.add_argument(
        "--environment",
        metavar="MARKER",
        action="append",
        default=[],
        help="--lock: the platform (linux-x86_64, ...) or a PEP 508 marker (default: this host)",
    )


def _add_review_args(g: argparse._ActionsContainer) -> None:
    """What the gate accepts, what is rebuilt against the lock's torch, whether the project is
    installed."""
    g.add_argument(
        "--accept",
        metavar="FILE",
        type=path_arg,
        help=(
            "--lock: reviewed exceptions to the gate's findings ([[accept]] tables; default:"
            " envbuild-check-lock.toml beside the lock, else [tool.envbuild.check-lock] in its"
            " pyproject.toml)"
        ),
    )
    g.add_argument(
        "--rebuild-mismatched",
        action="store_true",
        help=(
            "--lock: a prebuilt extension wheel built for another torch/CUDA/C++ ABI than the"
            " lock's torch (gate rule extension-abi) is built from its sdist against the lock's"
            " torch instead (the lock's sdist, else the same version's from its index, pinned by"
            " the page's sha256), in the builds stage"
        ),
    )
    g.add_argument(
        "--no-project",
        action="store_true",
        help="--lock: do not install the project itself (as --no-install-project)",
    )


def _add_uv_selection_args(g: argparse._ActionsContainer) -> None:
    """uv sync's own selection flags, flag for flag: uv export says what each selects
    (``gate.uvsync``)."""
    g.add_argument(
        "--all-extras", action="store_true", help="--lock: every extra (as uv sync --all-extras)"
    )
    g.add_argument(
        "--no-extra",
        metavar="NAME",
        action="append",
        default=[],
        help="--lock: with --all-extras, leave this extra out (as uv sync; repeatable)",
    )
    g.add_argument(
        "--only-group",
        metavar="NAME",
        action="append",
        default=[],
        help=(
            "--lock: only this dependency group, not the project's dependencies (as uv sync;"
            " repeatable)"
        ),
    )
    g.add_argument(
        "--no-group",
        metavar="NAME",
        action="append",
        default=[],
        help="--lock: leave this group out, default groups included (as uv sync; repeatable)",
    )
    g.add_argument(
        "--all-groups", action="store_true", help="--lock: every dependency group (as uv sync)"
    )
    g.add_argument(
        "--no-default-groups",
        action="store_true",
        help="--lock: none of the default groups (dev, or [tool.uv] default-groups; as uv sync)",
    )
    g.add_argument(
        "--no-dev", action="store_true", help="--lock: leave the dev group out (as uv sync)"
    )
    g.add_argument(
        "--only-dev", action="store_true", help="--lock: only the dev group (as uv sync)"
    )
    g.add_argument(
        "--package",
        metavar="NAME",
        action="append",
        default=[],
        help="--lock: install this workspace member and what it needs (as uv sync --package)",
    )
    g.add_argument(
        "--all-packages", action="store_true", help="--lock: every workspace member (as uv sync)"
    )


def _add_install_args(g: argparse._ActionsContainer) -> None:
    """How the selection installs: editable or not, the project and workspace, hashes, build
    constraints."""
    g.add_argument(
        "--no-editable",
        action="store_true",
        help=(
            "--lock: install the project and workspace members as wheels, not editable (as uv sync)"
        ),
    )
    g.add_argument(
        "--no-install-project",
        action="store_true",
        help="--lock: install the project's dependencies, not the project (as uv sync)",
    )
    g.add_argument(
        "--require-hashes",
        action="store_true",
        help=(
            "--lock: refuse a lock that records no sha256 for a file it installs (default: install"
            " it as uv does, pin the sha256 of the bytes installed, and require it from then on)"
        ),
    )
    g.add_argument(
        "--no-install-workspace",
        action="store_true",
        help="--lock: install no workspace member, the project included (as uv sync)",
    )
    g.add_argument(
        "--build-constraints",
        metavar="FILE",
        type=path_arg,
        action="append",
        default=[],
        help=(
            "--lock: constrain the build requirements of the project, its "
            "workspace members and the sdists built in isolation (as uv sync "
            "--build-constraints; with [tool.uv] build-constraint-dependencies)"
        ),
    )


def lock_request(
    args: InstallArgs,
    lock: Path,
    *,
    step: str | None = None,
    replace_torch: bool = False,
    inexact: bool = False,
) -> LockRequest:
    """``plan``'s and ``provision``'s ``--lock FILE`` request (``step``, ``replace_torch``,
    ``inexact``: provision's options)."""
    # options of the stack commands that have no meaning for a lock (each named in the refusal)
    used = given_flags(
        {
            "--profile": args.profile,
            "--stack": args.stack,
            "--no-lock": args.no_lock,
            "--step": step,
        }
    )
    if used:
        raise ConfigError(
            f"--lock installs from the lock alone: {', '.join(used)} cannot be used with it",
            hint="Drop them, or provision a stack spec without --lock.",
        )
    offline, wheelhouse = args.offline, args.wheelhouse
    if offline and not wheelhouse:
        raise ConfigError(
            "--offline needs --wheelhouse DIR: the only place the lock's files may come from",
            hint=(
                "Make it where the lock's file hosts answer: envbuild wheelhouse mirror --lock"
                f" {lock} --out DIR."
            ),
        )
    if wheelhouse and not offline:
        raise ConfigError(
            "--wheelhouse is used with --offline (an install only from the wheelhouse)"
        )
    return lock_selection(
        args,
        lock,
        python=args.python,
        venv=args.venv,
        wheelhouse=wheelhouse,
        replace_torch=replace_torch,
        inexact=inexact,
    )


# The arguments of the commands with a --lock branch (the branch modules read them too).


@dataclass(frozen=True)
class DockerArgs(LockArgs, StackArgs, JsonArgs):
    """``docker``'s options."""

    base: str | None
    venv: str | None  # a path inside the base image, kept as written
    root: str  # the image's data root, kept as written
    offline: bool
    output: Path | None
    context: Path | None
    check: bool
    dockerignore: bool
    no_lock: bool
    build_cache: str | None


@dataclass(frozen=True)
class ProvisionArgs(InstallArgs):
    """``provision``'s options: those ``plan`` shares (``InstallArgs``) and its own."""

    home: Path | None
    step: str | None
    force_links: bool
    strict: bool
    compile_bytecode: Choice
    prefetch: Choice
    step_timeout: float | None
    import_timeout: float
    replace_torch: bool
    inexact: bool
    build_cache: str | None
    warm_kernels: bool  # after it: the kernel caches compiled (commands.smoke.warm_after_provision)


@dataclass(frozen=True)
class WheelhouseMirrorArgs(LockArgs, JsonArgs):
    """``wheelhouse mirror``'s options (``--lock`` takes a lock folder too)."""

    profile: str | None
    requirements: list[Path] | None
    out: Path
    index_url: list[str]
    python_tag: str | None
    platform: str | None
    all_platforms: bool
    python: Path | None
    jobs: int
    deadline: float | None
    have: Path | None


@dataclass(frozen=True)
class PreflightArgs(LockArgs, StackArgs, JsonArgs, RootArgs):
    """``preflight``'s options."""

    only: list[str]
    skip: list[str]
    python: str | None
    index_timeout: float
