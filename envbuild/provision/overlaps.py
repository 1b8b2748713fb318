"""Files two distributions of a lock's selection both install, known before anything is installed.

What each distribution installs is its RECORD (``index.records``): of the wheels the prepare just
unpacked (``provision.prepare``), and of the distributions the venv already holds that no step
replaces. Two owners of one path (other bytes) overwrite each other:

- where one of them is the protected baseline (torch, its runtime, its triton: the ABI guard's
  protected set), the run is refused before anything is installed (exit 8), unless the lock's
  reviewed exceptions accept it (``--accept FILE`` or the file beside the lock:
  ``rule = "file-overlap"``, the other package's name; ``ProvisionOptions.accept_overlap`` asks
  them);
- otherwise it is installed, as ``uv sync`` installs it, with one winner every time: the owner in
  the latest step, and within one step the name that sorts last, installed in a run of its own
  after the rest (``plan.PlannedStep.install_last``). ``uv sync`` itself installs a step's wheels
  in parallel, so which copy it keeps is a race (``index.records``); envbuild's is fixed, said in
  the output and recorded in the receipt (``lock.overlaps``) and the stack (``abi.overlap``, which
  the guard checks after every step: the winner's copy is the one on disk).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from envbuild import events, guard
from envbuild.errors import LockError
from envbuild.index.records import FileOverlap, find_overlaps, overlap_groups
from envbuild.plan import overlap_winners
from envbuild.spec import Overlap

if TYPE_CHECKING:
    from envbuild.provision.prepare import PreparedSteps
    from envbuild.provision.steps import ProvisionRun

__all__ = ["RULE", "check", "winner"]

RULE = "file-overlap"  # the reviewed exceptions' rule (``gate.findings.RULES``)


def winner(overlap: FileOverlap, step_of: dict[str, int]) -> str:
    """The owner whose copy stays: installed in the latest step (a package the venv already holds
    counts as step 0), then the name that sorts last."""
    return max(overlap.packages, key=lambda name: (step_of.get(name, 0), name))


def check(run: ProvisionRun, prepared: PreparedSteps | None) -> None:
    """Find the overlaps of what the run installs and the venv keeps; refuse the baseline's, give
    the others a winner (see the module docstring). A no-op for a run without ``accept_overlap``
    (a stack spec names its overlaps itself: ``[[abi.overlap]]``)."""
    accept = run.opts.accept_overlap
    if accept is None:
        return
    if prepared is None or not prepared.records:
        # nothing to install: the venv's own overlaps, kept by what its RECORDs are
        found = _venv_overlaps(run)
    else:
        files = {name: rows for name, (_, rows) in prepared.records.items()}
        if run.paths.python.exists():
            for name, dist in guard.scan(guard.site_packages(run.paths.venv)).items():
                files.setdefault(name, dist.files())
        found = find_overlaps(files)
    if not found:
        return
    abi = run.spec.abi
    protected = [abi.package, *abi.protect, *([abi.triton_provider] if abi.triton_provider else [])]
    refused = []
    step_of = {n: s.number for s in run.plan.steps for n in s.step.names}
    kept = []
    for o in found:
        if o.touches(protected):
            reason = accept(o)
            if reason is None:
                refused.append(o)
                continue
            events.emit("warn", f"{o.shown()}, over the protected baseline: accepted ({reason})")
        kept.append(Overlap(packages=o.packages, winner=winner(o, step_of)))
    if refused:
        raise _refusal(refused, protected)
    _acknowledge(run, found, kept)


def _venv_overlaps(run: ProvisionRun) -> list[FileOverlap]:
    """The overlaps among what the venv holds, from the files its distributions share as the guard
    keeps them (``guard.shared_files``, under every RECORD's identity): a no-op re-run reads no
    RECORD for it."""
    if not run.paths.python.exists():
        return []
    dists = guard.scan(guard.site_packages(run.paths.venv))
    return overlap_groups(guard.shared_files(dists, run.paths.shared_files).owners)


def _acknowledge(run: ProvisionRun, found: list[FileOverlap], kept: list[Overlap]) -> None:
    """The winners into the stack (the guard's ``abi.overlap``), the plan (installed last), the
    output and the receipt."""
    abi = dataclasses.replace(run.spec.abi, overlaps=(*run.spec.abi.overlaps, *kept))
    run.spec = dataclasses.replace(run.spec, abi=abi)
    steps = tuple(
        dataclasses.replace(s, install_last=overlap_winners(run.spec, s.step))
        for s in run.plan.steps
    )
    run.plan = dataclasses.replace(run.plan, spec=run.spec, steps=steps)
    run.result.plan = run.plan
    shown = []
    for o, k in zip(found, kept, strict=True):
        events.emit(
            "warn",
            f"{o.shown()}: {k.winner}'s copy is the one kept (envbuild installs it last; uv's"
            " own order between them is a race)",
        )
        shown.append(
            {
                "packages": list(o.packages),
                "winner": k.winner,
                "paths": len(o.paths),
                "first": o.paths[0],
            }
        )
    run.result.lock["overlaps"] = shown


def _refusal(refused: list[FileOverlap], protected: list[str]) -> LockError:
    first = refused[0]
    other = next(p for p in first.packages if p not in protected)
    more = f" (and {len(refused) - 1} more overlap(s))" if len(refused) > 1 else ""
    return LockError(
        f"{first.shown()}{more}: installing it would overwrite the protected baseline's files"
        f" ({', '.join(p for p in first.packages if p in protected)}), so nothing was installed",
        hint=(
            f"Drop {other} from the selection (uv sync's --no-group/--extra flags, or the lock), or"
            f" accept it with a reason in the --accept file (or envbuild-check-lock.toml beside"
            f' the lock): [[accept]] rule = "{RULE}", package = "{other}", reason = "...".'
            " `envbuild check-lock` reports the same overlap."
        ),
    )
