"""envbuild: reproducible, verified training environments on fresh GPU hosts."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
