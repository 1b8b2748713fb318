"""envbuild: reproducible, verified training environments on fresh GPU hosts."""

from __future__ import annotations

__version__ = "0.1.0"

# What each module at the top of envbuild/ owns on disk (docs/architecture.md's file table; a
# package says it in its own __init__.py, as OWNS; ``()``: nothing). Every top-level module has a
# key.
TOP_LEVEL_OWNS: dict[str, tuple[str, ...]] = {
    "__init__": (),
    "__main__": (),
    "_io": (),
    "abitag": (),
    "cli": (),
    "errors": (),
    "events": (),
    "layout": (
        "``<root>/{venv,data,cache/*,checkpoints,receipts,logs}``",
        "``~/venv -> <root>/venv`` and the other ``$HOME`` links",
        "``<root>/.envbuild/envbuild-env.sh`` (the env overlay)",
        "``<venv>/bin/envbuild`` (the launcher of the envbuild that made the venv)",
    ),
    "nvidia": (),
    "plan": (),
    "quoting": (),
    "run": ("the log files it is given",),
}

__all__ = ["__version__"]
