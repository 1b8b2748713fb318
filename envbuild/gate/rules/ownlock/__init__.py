"""envbuild's own locks (``lockfiles/<profile>/``: ``lock.json`` and one hash-pinned file per step),
judged as one more rule family of the gate: each problem is a ``gate.findings.Finding``, each stack
a ``FileReport`` (its ``stack`` set), written by ``gate.output`` like any lockfile's. What these
locks say and a uv.lock does not is the order of the steps: torch and the protected set are frozen
once the baseline step ran, so the rules read the steps in turn. Every rule and what it means:
``gate.findings.OWN_RULES``.

- ``steps``     what the rules read (lock.json, each step file) and the file rules: stale, missing,
                broken, a line without a hash or an exact pin
- ``static``    across the steps: protected pins, packages after the baseline, steps that disagree,
                requirements on torch and on what earlier steps locked, PyPI triton
- ``history``   ``--base REF``: the gate's downgrade and re-tag rule on the protected versions
- ``online``    ``--online``: every locked artifact is still on its index with the same sha256
- ``dryrun``    ``pip install --dry-run`` of each step on the locked baseline (not with
  ``--offline``)

The static rules take milliseconds and need nothing but the lock (metadata it lacks comes from
the metadata cache, else the steps' indexes); with ``--offline`` the dry runs are skipped, with a
notice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from envbuild.gate.findings import EnvRow, FileReport
from envbuild.gate.rules.ownlock import history, static, steps
from envbuild.spec import StackSpec
from envbuild.stacklock.model import MANIFEST, lock_dir

__all__ = ["Options", "check_stack"]

FORMAT = "lock.json"


@dataclass(frozen=True, kw_only=True)
class Options:
    base: str | None = None  # a git ref whose lock the working tree is compared with
    offline: bool = False  # static rules only
    fetch_metadata: bool = True  # read missing metadata from the index (not under offline)
    online: bool = False  # every locked artifact still on its index with its hash (``online``)
    wheelhouse: str | None = None  # where --online looks for what the index lost


def check_stack(spec: StackSpec, opts: Options | None = None) -> FileReport:
    """The verdict on the lock beside ``spec``."""
    opts = opts or Options()
    t0 = time.monotonic()
    ctx = steps.StackContext(spec)
    _run(ctx, opts)
    folder = lock_dir(spec)
    report = FileReport(
        steps.shown(folder / MANIFEST),
        FORMAT,
        findings=ctx.findings,
        notices=ctx.notices,
        stack=spec.name,
        folder=str(folder),
    )
    if ctx.lock is not None:
        torch = (ctx.lock.abi.version if ctx.lock.abi is not None else None) or spec.abi.version
        report.environments = [
            EnvRow(
                f"linux {spec.target.arch}, Python {spec.python}", torch, findings=len(ctx.findings)
            )
        ]
    report.seconds = time.monotonic() - t0
    return report


def _run(ctx: steps.StackContext, opts: Options) -> None:
    steps.read(ctx)
    if ctx.lock is None:
        return
    static.check(ctx, fetch=opts.fetch_metadata and not opts.offline)
    if opts.base:
        history.check(ctx, opts.base)
    if opts.online:
        from envbuild.gate.rules.ownlock import online

        online.check(ctx, opts.wheelhouse)
    if opts.offline:
        ctx.note("dry-run resolution skipped (--offline): only the static rules ran")
    else:
        from envbuild.gate.rules.ownlock import dryrun

        dryrun.check(ctx)
