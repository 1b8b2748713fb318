"""``preflight --lock FILE``: the host checked for what a lock installs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.commands.selection import (
    lock_selection,
)
from envbuild.errors import ConfigError
from envbuild.projectlock.run import prepare_lock

if TYPE_CHECKING:
    from envbuild.commands.selection import PreflightArgs
    from envbuild.host.preflight import PreflightReport
    from envbuild.layout import Paths
    from envbuild.spec import StackSpec


def preflight_from_lock(
    args: PreflightArgs, lock: Path, groups: list[str]
) -> tuple[StackSpec, Paths, PreflightReport]:
    """``preflight --lock FILE``: the lock's stack and the host's report on it
    (``projectlock.hostfit``)."""
    from envbuild.layout import paths_for
    from envbuild.projectlock.hostfit import lock_preflight
    from envbuild.projectlock.stagestack import stack_for

    if args.profile or args.stack:
        raise ConfigError(
            "preflight --lock checks the host against the lock: --profile and --stack cannot be"
            " used with it"
        )
    req = lock_selection(args, lock, python=args.python)
    prepared = prepare_lock(req)
    spec = stack_for(prepared.plan, root=str(args.root) if args.root else "/mnt/data")
    paths = paths_for(spec, args.root)
    builds = bool(prepared.plan.stage("builds"))
    # nvcc matters where a stage compiles; the lock's files come from its own URLs, not from an
    # index
    checked = [g for g in groups if (g != "cuda-toolkit" or builds) and g != "index"]
    runtime = [(p.entry.name, p.entry.version) for p in prepared.plan.stage("torch")]
    spec, report = lock_preflight(
        spec,
        paths,
        checks=checked,
        index_timeout=args.index_timeout,
        python=args.python,
        builds=builds,
        runtime=runtime,
    )
    if "index" in groups:
        from dataclasses import replace

        from envbuild.host.preflight import Check
        from envbuild.projectlock.run import unreachable_hosts

        bad = unreachable_hosts(prepared, set(prepared.plan.stages))
        hosts = "the lock's file hosts"
        check = (
            Check(
                "lock-hosts",
                "fail",
                "; ".join(bad),
                "reachable",
                "provision --lock stops here (exit 3); "
                "mirror the files where they answer: envbuild wheelhouse mirror --lock FILE",
            )
            if bad
            else Check("lock-hosts", "pass", "answer", "reachable", hosts)
        )
        report = replace(report, checks=(*report.checks, check))
    return spec, paths, report
