"""The installer: interpreters, venvs, and one step run through pip or uv as a subprocess.

pip is driven as ``<venv>/bin/python -m pip`` and uv as ``uv pip install --python <venv>``;
requirements and constraints are passed as files. Both sit behind one ``Installer`` protocol
(``base.py``): venv creation, a step's run, the bytecode switch, the prefetch download and the
dry run are methods of the backend, so no caller branches on its name.

- ``python.py``: finding and probing interpreters;
- ``base.py``: the protocol, running a step's commands, classifying a failure;
- ``pip.py`` / ``uv.py``: the two backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from envbuild.errors import PreflightError
from envbuild.installer.base import Installer, StepRun, classify_failure
from envbuild.installer.pip import PipInstaller, pip_config_sources
from envbuild.installer.python import (
    Interpreter,
    find_interpreter,
    find_python,
    find_uv,
    probe_python,
    python_version_of,
    run_python_json,
)
from envbuild.installer.uv import UvInstaller
from envbuild.plan import Backend, Plan, PlanOptions, make_plan
from envbuild.spec import StackSpec

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``<root>/.envbuild/steps/`` (requirement files)",
    "``<root>/logs/NN-step.log``",
)

__all__ = [
    "Installer",
    "Interpreter",
    "PipInstaller",
    "StepRun",
    "UvInstaller",
    "classify_failure",
    "find_interpreter",
    "find_python",
    "find_uv",
    "installer_for",
    "pick_backend",
    "pip_config_sources",
    "probe_python",
    "python_version_of",
    "resolve_plan",
    "run_python_json",
]


def installer_for(requested: str | None) -> Installer:
    """The backend asked for (``pip``, ``uv``) or, with None, uv when it is available, else pip."""
    if requested == "pip":
        return PipInstaller()
    uv = find_uv()
    if requested == "uv" and uv is None:
        raise PreflightError(
            "--backend uv: no uv executable found (pip install uv, or use --backend pip)"
        )
    return UvInstaller(uv) if uv else PipInstaller()


def pick_backend(requested: str | None) -> Backend:
    return installer_for(requested).name


def resolve_plan(
    spec: StackSpec,
    *,
    backend: str | None = None,
    wheelhouse: str | None = None,
    locked: Mapping[str, Path],
    built_wheels: Mapping[str, Mapping[str, str]] | None = None,
) -> Plan:
    """The plan ``provision`` runs, with its defaults: the one place both commands get it from.

    ``backend`` None: uv when it is available, else pip; for uv, the sources pip is configured
    with are passed explicitly. ``locked`` (the lock beside the spec:
    ``stacklock.serve.locked_requirements``) and ``built_wheels`` (``stacklock.serve.built_wheels``,
    for an offline install) come from the caller, which reads the lock: the installer sits below the
    lock stage and never imports it.
    """
    installer = installer_for(backend)
    return make_plan(
        spec,
        PlanOptions(
            backend=installer.name,
            wheelhouse=wheelhouse,
            default_sources=installer.default_sources(wheelhouse),
            locked=locked,
            built_wheels=built_wheels or {},
        ),
    )
