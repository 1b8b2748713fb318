"""``envbuild provision``: build (or resume, or verify) the environment a stack describes."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    Subparsers,
    add_build_cache_arg,
    add_json_arg,
    add_stack_args,
    load_stack,
    nonempty_arg,
    path_arg,
    record_environment,
    seconds_arg,
    wheelhouse_arg,
)
from envbuild.commands.selection import (
    ProvisionArgs,
    add_lock_args,
    refuse_lock_options,
)
from envbuild.errors import ConfigError, EnvbuildError, Interrupted
from envbuild.layout import paths_for
from envbuild.plan import BACKENDS
from envbuild.provision.core import began, pending_steps, provision
from envbuild.provision.options import ProvisionOptions
from envbuild.provision.verify import IMPORT_TIMEOUT
from envbuild.spec import StackSpec
from envbuild.stacklock.serve import locked_requirements

if TYPE_CHECKING:
    from envbuild.commands.documents import ProvisionDocument


def check_env_from(spec: StackSpec, steps: tuple[str, ...] | None) -> None:
    """The steps' required ``from_env`` values are set here (exit 2 before anything is made). Their
    values pass to the installers through this process's environment and are never written."""
    missing = spec.missing_env(os.environ, steps)
    if missing:
        names = sorted({key.rsplit(".", 1)[1] for key in missing})
        raise ConfigError(
            f"{spec.path}: {', '.join(missing)} take their value from the environment (from_env),"
            f" and {', '.join(names)} {'is' if len(names) == 1 else 'are'} not set (or empty) here",
            hint=f"Set {' and '.join(names)} where envbuild runs (in an image build: docker build "
            + " ".join(f"--secret id={n},env={n}" for n in names)
            + '), or mark a value the step can do without as { from_env = "NAME", required ='
            " false }.",
        )


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "provision", help="create the venv on the data root and install every step, guarded"
    )
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--root", type=path_arg, help="data root (default: the spec's layout.root)")
    p.add_argument("--home", type=path_arg, help="where the links go (default: $HOME)")
    p.add_argument(
        "--python",
        metavar="PATH",
        type=nonempty_arg,
        help="interpreter for the venv (default: python<spec.python>)",
    )
    p.add_argument(
        "--venv",
        type=path_arg,
        help="install into this existing environment instead of <root>/venv",
    )
    p.add_argument(
        "--backend", choices=BACKENDS, help="installer (default: uv when available, else pip)"
    )
    p.add_argument("--step", metavar="NAME", help="run only this step (earlier steps must be done)")
    p.add_argument(
        "--force-links",
        action="store_true",
        help="rename files or folders in the way of the $HOME links aside instead of stopping",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="requirements left unmet by --no-deps steps are errors",
    )
    p.add_argument(
        "--offline", action="store_true", help="install only from --wheelhouse; touch no index"
    )
    p.add_argument(
        "--wheelhouse",
        metavar="DIR|URL",
        type=wheelhouse_arg,
        help="mirrored wheelhouse (with --offline): its folder or address (or its simple/ index)",
    )
    add_build_cache_arg(p)
    p.add_argument(
        "--no-lock", action="store_true", help="ignore the profile's lock and resolve from the spec"
    )
    p.add_argument(
        "--compile-bytecode",
        choices=("auto", "yes", "no"),
        default="auto",
        help=(
            "uv backend: write every package's .pyc files at install (auto: no; torch's are written"
            " by the import warm-up and check)"
        ),
    )
    p.add_argument(
        "--prefetch",
        choices=("auto", "yes", "no"),
        default="auto",
        help=(
            "download the next step's exact pins while a step installs "
            "(auto: when a later step reads a remote index or a lock's remote wheel URLs)"
        ),
    )
    p.add_argument(
        "--step-timeout",
        type=seconds_arg(),
        metavar="S",
        help="stop an installer run that takes more than S seconds (default: no limit; exit 5)",
    )
    p.add_argument(
        "--import-timeout",
        type=seconds_arg(),
        default=IMPORT_TIMEOUT,
        metavar="S",
        help=f"stop the final `import torch` after S seconds (default {IMPORT_TIMEOUT:g}; exit 5)",
    )
    _add_warm_arg(p)
    add_lock_args(p, provision=True)
    p.set_defaults(func=Handler(run, ProvisionArgs))


def run(args: ProvisionArgs) -> int:
    if args.lock is not None:
        from envbuild.commands.provision_lock import provision_from_lock

        return provision_from_lock(args, args.lock)
    refuse_lock_options(args, replace_torch=args.replace_torch, inexact=args.inexact)
    spec = load_stack(args)
    if args.offline and not args.wheelhouse:
        raise ConfigError(
            "--offline needs --wheelhouse DIR|URL: the only place packages may come from"
        )
    if args.wheelhouse and not args.offline:
        raise ConfigError(
            "--wheelhouse is used with --offline (an install only from the wheelhouse)"
        )
    if args.step:
        spec.step(args.step)  # an unknown step is a usage error, before the host is looked at
    locked = {} if args.no_lock else locked_requirements(spec)
    if args.no_lock and (spec.path.parent / "lock.json").is_file():
        events.emit(
            "warn",
            f"--no-lock: the lock at {spec.path.parent / 'lock.json'} is bypassed; every step "
            "resolves from the spec, without its pins and hashes (the receipt records this)",
        )
    opts = ProvisionOptions(
        root=args.root,
        home=args.home,
        python=args.python,
        venv=args.venv,
        backend=args.backend,
        force_links=args.force_links,
        strict=args.strict,
        only_step=args.step,
        wheelhouse=args.wheelhouse,
        build_cache=args.build_cache,
        locked=locked,
        compile_bytecode=args.compile_bytecode,
        prefetch=args.prefetch,
        no_lock=args.no_lock,
        step_timeout=args.step_timeout,
        import_timeout=args.import_timeout,
    )
    # the from_env values of the steps that will run (a finished environment re-verifies without
    # them)
    check_env_from(spec, tuple(pending_steps(spec, opts)))
    try:
        result = provision(spec, opts)
    except (KeyboardInterrupt, EnvbuildError) as exc:
        if began(spec, args.root):  # finished or not, the venv names its stack (verify finds it)
            record_environment(spec, paths_for(spec, args.root))
        if isinstance(exc, EnvbuildError) and not isinstance(exc, Interrupted):
            raise
        message = exc.message if isinstance(exc, Interrupted) else "interrupted"
        raise Interrupted(
            message, hint="The state is saved: run the same command again to resume."
        ) from exc
    # the venv records its root: activated, it is found
    found_by = record_environment(spec, result.paths)
    warmed = None
    if args.warm_kernels:
        from envbuild.commands.smoke import warm_after_provision

        warmed = warm_after_provision(spec, result.paths, result.paths.venv)
    if args.json:
        doc: ProvisionDocument = {
            "schema": "envbuild.provision/1",
            "root": str(result.paths.root),
            "venv": str(result.paths.venv),
            "ran": result.ran,
            "skipped": result.skipped,
            "warnings": result.warnings,
            "seconds": round(result.seconds, 3),
            "guard_seconds": [round(s, 4) for s in result.guard_seconds],
            "full_check": result.full_check,
            "import_cached": result.import_cached,
            "import_warmup": result.warmup,
            "receipt": str(result.receipt) if result.receipt else None,
            "timings": result.timings,
        }
        if warmed is not None:
            doc["warm_kernels"] = warmed
        ui.print_json(doc)
        return 0
    if not result.ran:
        events.emit(
            "ok",
            f"{spec.name}: already provisioned and verified at {result.paths.venv}; nothing to do",
        )
    else:
        events.emit(
            "ok",
            f"{spec.name}: provisioned {result.paths.venv} in {result.seconds:.1f} s "
            f"({len(result.ran)} steps run, {len(result.skipped)} already done)",
        )
    for line in found_by:
        ui.print_text(line)
    if result.receipt:
        ui.print_text(f"receipt: {result.receipt}")
    return 0


def _add_warm_arg(p: argparse.ArgumentParser) -> None:
    """``provision --warm-kernels`` (``provision`` and ``provision --lock``)."""
    p.add_argument(
        "--warm-kernels",
        action="store_true",
        help=(
            "after the provision, on a host with a GPU: compile the stack's kernels (Triton, "
            "torch.compile, fla, flash-attn 4) into the data root's caches on one GPU, so the "
            "first smoke on every GPU finds them (the compile moves here; without a GPU: nothing)"
        ),
    )
