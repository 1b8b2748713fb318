"""Project names as PEP 503 compares them (``Flash_Attn`` -> ``flash-attn``): the normalisation of
``packaging.utils.canonicalize_name``, without importing ``packaging.utils`` (it pulls in
``packaging.tags`` and ``sysconfig``: a tenth of the gate's start on a small machine)."""

from __future__ import annotations

import re

__all__ = ["canonical"]

_SEPARATORS = re.compile(r"[-_.]+")


def canonical(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()
