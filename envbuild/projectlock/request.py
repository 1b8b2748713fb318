"""What ``provision --lock`` / ``plan --lock`` are asked (``LockRequest``), and the environment
prepared for it (``Prepared``: chosen, gated, staged, adopted): what the other ``projectlock``
modules pass between them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuild.gate.findings import FileReport, Finding
from envbuild.gate.model import Format
from envbuild.gate.selection import Chosen, Selection
from envbuild.gate.uvsync import SyncFlags
from envbuild.projectlock.stages import StagePlan

__all__ = ["LockRequest", "Prepared"]


@dataclass(frozen=True, kw_only=True)
class LockRequest:
    """What ``provision --lock`` / ``plan --lock`` are asked, beside provision's own options."""

    lock: Path
    fmt: Format | None = None
    # the interpreter the environment is for (--python) and the environment it goes into (--venv)
    python: str | None = None
    venv: Path | None = None
    # --environment: platforms or PEP 508 markers (default: this host)
    environment: tuple[str, ...] = ()
    accept: Path | None = None
    project: bool = True
    replace_torch: bool = False
    # refuse a lock that records no sha256 for a file it installs (before anything is made)
    require_hashes: bool = False
    # the torch the --venv already has: the baseline of a lock that leaves torch to it
    base_torch: str | None = None
    # --offline --wheelhouse DIR: every file from there, none from the network
    wheelhouse: str | None = None
    # build a mismatched prebuilt extension from its sdist (``projectlock.rebuild``)
    rebuild_mismatched: bool = False
    # uv sync's selection and install flags: the one owner of the extras and groups asked for
    sync: SyncFlags = SyncFlags()
    # keep what the selection does not install (``provision.exact``; uv sync --inexact)
    inexact: bool = False
    # --build-constraints: files constraining the requirements of isolated builds
    build_constraints: tuple[Path, ...] = ()

    @property
    def selection(self) -> Selection:
        """What of the request chooses the environment: the gate's question
        (``gate.selection.judge_selection``)."""
        return Selection(
            lock=self.lock,
            fmt=self.fmt,
            python=self.python,
            venv=self.venv,
            environment=self.environment,
            flags=self.sync,
            accept=self.accept,
        )


@dataclass
class Prepared:
    chosen: Chosen
    report: FileReport
    plan: StagePlan
    adopted: str | None = None  # the venv's torch, kept as the baseline
    already: tuple[str, ...] = ()  # packages the adopted venv holds at the locked version
    # the plan before adoption left out what the venv holds (the spec digest's)
    full: StagePlan | None = None
    # the gate's failing findings (``prepare(refusing=False)`` only)
    failing: tuple[Finding, ...] = ()
