"""The front ends: one module per command parses its arguments, calls a library and prints
(``ui.py``: the one printer).
"""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``<venv>/envbuild-environment.json``, the environment record (``common.record_environment``)",
)
