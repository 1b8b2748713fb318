"""A failed provision leaves the venv no worse than a failed ``uv sync`` would: what it says of the
venv after a failure, and the copy that puts an existing venv back.

- Before anything is installed (a download, a hash or a build that fails while preparing,
  ``provision.prepare``): the venv is untouched, or was never made (``not-made``).
- After the first step of ``provision --lock`` began installing into a venv that was there before
  the run: it is put back as it was (``restored``). Just before that first step, the venv is
  copied as hard links (``<venv>.envbuild-before``: every file linked, not copied; seconds for a
  torch venv, no space), and the manifest and the baseline constraints are kept as the run found
  them; on a failure (an installer error, a guard violation, a failed import check, Ctrl-C) the
  venv is swapped back for the copy, and they are written back. Installers
  replace a file by writing a new one (uv links from its cache, pip unpacks), never in place, so
  the copy keeps the old bytes. On success the copy is deleted.
- After the first step began installing into a venv this run made, a stack's venv (a stack's run
  resumes, and a venv an ABI violation left is moved aside by the next run), or one that could not
  be copied (on an overlay filesystem, an image's layers, where a link copies the whole file up;
  a copy that fails): it is left, and the failure says
  which steps it holds and that ``provision`` run again resumes at the step that failed
  (``left``).

The failure receipt's ``payload.failure.venv`` records which (``VenvAfterFailureJSON``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events

if TYPE_CHECKING:
    from envbuild.proof.receipt import VenvAfterFailureJSON
    from envbuild.provision.steps import ProvisionRun

__all__ = ["after_failure", "before_install", "copy_path", "drop", "on_overlay", "remember_state"]

SUFFIX = ".envbuild-before"


def copy_path(venv: Path) -> Path:
    """Where the copy of ``venv`` taken before the first install lives (beside it: one
    filesystem)."""
    return venv.with_name(venv.name + SUFFIX)


def remember_state(run: ProvisionRun) -> None:
    """The manifest's and the constraints' bytes as the run found them (before it saves either):
    what a restored venv goes back with."""
    for f in (run.paths.manifest, run.paths.constraints):
        try:
            run.state_before[f] = f.read_bytes()
        except OSError:
            run.state_before[f] = None


def before_install(run: ProvisionRun) -> None:
    """Just before the first step installs: a venv that was there before this run is copied (hard
    links); a venv this run made is not."""
    run.installing = True
    if run.venv_made or not run.opts.lock_source:  # a stack's run keeps its own rules (resume)
        return
    copy = copy_path(run.paths.venv)
    shutil.rmtree(copy, ignore_errors=True)  # a copy a killed run left
    if on_overlay(run.paths.venv):
        events.emit(
            "debug",
            f"{run.paths.venv} is on an overlay filesystem (an image layer), where a link copies"
            " the file up: not copied, a failure leaves it as the failed step does",
        )
        return
    try:
        shutil.copytree(run.paths.venv, copy, symlinks=True, copy_function=os.link)
    except (OSError, shutil.Error) as exc:
        shutil.rmtree(copy, ignore_errors=True)
        events.emit(
            "debug",
            f"the venv could not be copied as links before installing ({exc}): a failure leaves"
            " it as the failed step does",
        )
        return
    run.before = copy


def on_overlay(path: Path, mounts: Path = Path("/proc/self/mounts")) -> bool:
    """Whether ``path`` is on an overlay filesystem (a container's layers), by the mount that holds
    it (``mounts``, the kernel's table; False where that cannot be read)."""
    real = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with mounts.open(encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                where = parts[1].replace("\\040", " ")
                inside = real == where or real.startswith(where.rstrip("/") + "/")
                if inside and len(where) >= len(best):
                    best, fstype = where, parts[2]
    except OSError:
        return False
    return fstype == "overlay"


def drop(run: ProvisionRun) -> None:
    """The run finished: the copy is not needed."""
    if run.before is not None:
        shutil.rmtree(run.before, ignore_errors=True)
        run.before = None


def after_failure(run: ProvisionRun) -> VenvAfterFailureJSON:
    """The venv after a failure (see the module docstring): restored from the copy where there is
    one."""
    venv = run.paths.venv
    done = [s.name for s in run.manifest.steps if s.status == "ok"]
    if not run.installing:
        if not run.paths.python.exists():
            return {"state": "not-made", "detail": f"no venv was made at {venv}"}
        return {"state": "untouched", "detail": f"the venv {venv} is as it was"}
    if run.before is not None:
        copy = run.before
        failed = venv.with_name(venv.name + ".envbuild-failed")
        try:
            shutil.rmtree(failed, ignore_errors=True)
            venv.rename(failed)
            copy.rename(venv)
        except OSError as exc:
            return _left(run, done, f" (putting it back from {copy} failed: {exc.strerror})")
        shutil.rmtree(failed, ignore_errors=True)
        for f, data in run.state_before.items():
            if data is None:
                f.unlink(missing_ok=True)
            else:
                f.write_bytes(data)
        run.before = None
        return {
            "state": "restored",
            "detail": f"{venv} is back as it was before this run (nothing it installed is left)",
        }
    return _left(run, done, "")


def _left(run: ProvisionRun, done: list[str], why: str) -> VenvAfterFailureJSON:
    pending = [s.name for s in run.plan.steps if s.name not in done]
    holds = f"the steps done ({', '.join(done)})" if done else "no finished step"
    return {
        "state": "left",
        "detail": (
            f"{run.paths.venv} holds {holds}{why}; `provision` run again with the same"
            f" arguments resumes at {pending[0] if pending else 'the final check'}, from the"
            " files already in the cache"
        ),
    }
