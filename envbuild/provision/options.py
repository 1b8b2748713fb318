"""What a provision run is asked to do (``ProvisionOptions``) and what it reports
(``ProvisionResult``).

Kept apart from ``core.py`` so the step runner (``steps.py``) and the final check read them
without importing the orchestrator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envbuild import layout
from envbuild.plan import Plan, PlannedStep
from envbuild.provision.verify import IMPORT_TIMEOUT

if TYPE_CHECKING:
    from envbuild.index.records import FileOverlap
    from envbuild.proof.receipt import WarmupJSON

Choice = Literal["auto", "yes", "no"]


@dataclass(frozen=True, kw_only=True)
class ProvisionOptions:
    root: Path | None = None
    home: Path | None = None
    python: str | None = None
    venv: Path | None = None  # install into this existing environment instead of <root>/venv
    backend: str | None = None  # "pip", "uv", None: uv when available
    force_links: bool = False
    strict: bool = False
    only_step: str | None = None
    wheelhouse: str | None = None  # --offline --wheelhouse: the only package source
    # --build-cache DIR|URL: the fleet's shared build cache (None: $ENVBUILD_BUILD_CACHE, if set)
    build_cache: str | None = None
    locked: Mapping[str, Path] = field(default_factory=dict)
    no_lock: bool = False  # --no-lock: a lock beside the spec was bypassed (named in the receipt)
    # uv backend: yes compiles every package at install; auto/no leave it to the import
    compile_bytecode: Choice = "auto"
    prefetch: Choice = "auto"  # auto: yes when a later step reads a remote index
    step_timeout: float | None = None  # seconds one installer run may take; None: no limit
    import_timeout: float = IMPORT_TIMEOUT  # seconds the final `import torch` may take
    # a new venv gets the installer's seed packages (pip); False: bare, as `uv sync` makes it
    seed: bool = True
    # provision --lock: the lock file and environment (receipt)
    lock_source: Mapping[str, object] = field(default_factory=dict)
    # {step: hook}: the step as it installs, made just before it runs from the venv's python
    # (provision --lock's builds: wheels from the build cache, built on a miss); such a step is
    # never prefetched
    prepare_steps: Mapping[str, Callable[[PlannedStep, Path], PlannedStep]] = field(
        default_factory=dict
    )
    # provision --lock: the names the selection installs (``provision.exact``); None: no selection
    selection: tuple[str, ...] | None = None
    exact: bool = True  # with a selection: remove what it does not install (False: --inexact)
    # provision --lock: files two selected distributions both install are found before anything is
    # installed (``provision.overlaps``); this says why one over the protected baseline is accepted
    # (the reason of the lock's reviewed exception), or None: refused. None here: not looked for
    accept_overlap: Callable[[FileOverlap], str | None] | None = None


@dataclass
class ProvisionResult:
    paths: layout.Paths
    plan: Plan
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    guard_seconds: list[float] = field(default_factory=list)
    full_check: dict[str, object] | None = None
    import_cached: bool = False  # the import verdict was reused: no distribution changed since
    # the background import after the baseline (provision/warmup.py)
    warmup: WarmupJSON | None = None
    receipt: Path | None = None
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # wall seconds per phase
    # how the lock was used: the receipt's "lock"
    lock: dict[str, object] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)  # exact sync: `name version` of each removed
    # provision --lock: the names of the selection the venv no longer held, put back by this run
    restored: list[str] = field(default_factory=list)


__all__ = ["Choice", "ProvisionOptions", "ProvisionResult"]
