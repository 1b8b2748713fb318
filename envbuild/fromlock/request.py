"""What ``provision --lock`` / ``plan --lock`` are asked (``LockRequest``), and the environment
prepared for it (``Prepared``: chosen, gated, staged, adopted): what the other ``fromlock`` modules
pass between them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuild.fromlock.select import Chosen
from envbuild.fromlock.stages import StagePlan
from envbuild.fromlock.uvsync import SyncFlags
from envbuild.gate.check import FileReport
from envbuild.gate.findings import Finding
from envbuild.gate.model import Format

__all__ = ["LockRequest", "Prepared"]


@dataclass(frozen=True, kw_only=True)
class LockRequest:
    """What ``provision --lock`` / ``plan --lock`` are asked, beside provision's own options."""

    lock: Path
    fmt: Format | None = None
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    accept: Path | None = None
    project: bool = True
    replace_torch: bool = False
    require_hashes: bool = False  # refuse a lock that records no sha256 for a file it installs (before anything is made)
    base_torch: str | None = None  # the torch the --venv already has: the baseline of a lock that leaves torch to it
    wheelhouse: str | None = None  # --offline --wheelhouse DIR: every file from there, none from the network
    rebuild_mismatched: bool = False  # build a mismatched prebuilt extension from its sdist (``fromlock.rebuild``)
    sync: SyncFlags = SyncFlags()  # uv sync's selection and install flags (``--extra`` and ``--group`` included)
    inexact: bool = False  # keep what the selection does not install (``provision.exact``; uv sync --inexact)
    # --build-constraints: files constraining the requirements of isolated builds
    build_constraints: tuple[Path, ...] = ()


@dataclass
class Prepared:
    chosen: Chosen
    report: FileReport
    plan: StagePlan
    adopted: str | None = None  # the venv's torch, kept as the baseline
    already: tuple[str, ...] = ()  # packages the adopted venv holds at the locked version
    full: StagePlan | None = None  # the plan before adoption left out what the venv holds (the spec digest's)
    failing: tuple[Finding, ...] = ()  # the gate's failing findings (``prepare(refusing=False)`` only)
