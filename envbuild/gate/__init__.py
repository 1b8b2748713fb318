"""The gate: ``envbuild check-lock FILE...`` judges any lockfile a team commits (uv.lock,
poetry.lock, pylock.toml, requirements) against the torch policy, per environment the lock installs;
``envbuild check-lock`` judges envbuild's own locks (``rules.ownlock``) with the same findings and
writers.

Where things live (one room per concern):

- ``formats/``      one reader per lock format -> ``model.Lock`` (entries + what an environment
  installs)
- ``environments``  the concrete environments a lock covers (platform x Python x extras/groups, or
  a pixi.lock's environments)
- ``pythons``       every Python a lock allows, each judged on its own
- ``groups``        environments that install the same judged things are judged once
- ``markers``       PEP 508 markers evaluated with a set of active extras
- ``rules/``        one module per rule family (pins, requirements, extensions, runtime, history),
  and
                    ``rules/ownlock/`` for envbuild's own locks (a stack's steps, in order)
- ``accept``        reviewed exceptions a team commits
- ``findings``      the one Finding, the report of a file (or a stack), every rule and what it means
- ``check``         the driver: read, enumerate, run the rules, apply the exceptions
- ``selection``     ``--lock FILE``'s one question: the project lock read, its Python, the one
  environment of it an install takes (uv sync's selection, as uv says it: ``uvsync``), and the
  verdict on exactly what that installs
- ``output``        console table, markdown, JSON (schema 1), GitHub annotations, for both kinds of
  lock
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envbuild.gate.check import check_file
    from envbuild.gate.environments import Narrow
    from envbuild.gate.findings import RULES, FileReport, Finding, Policy
    from envbuild.gate.model import FORMATS, Format

# The names each room hands on, imported when first asked for: a command that needs one room
# (``provision --lock`` re-run, the model's formats) does not import the judging machinery.
_FROM = {
    "check_file": "check",
    "Narrow": "environments",
    "RULES": "findings",
    "FileReport": "findings",
    "Finding": "findings",
    "Policy": "findings",
    "FORMATS": "model",
    "Format": "model",
}

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = ()

__all__ = ["FORMATS", "RULES", "FileReport", "Finding", "Format", "Narrow", "Policy", "check_file"]


def __getattr__(name: str) -> Any:
    room = _FROM.get(name)
    if room is None:
        raise AttributeError(f"module 'envbuild.gate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"envbuild.gate.{room}"), name)
