"""What the format readers share: TOML reading that turns every failure into ``LockParseError``."""

from __future__ import annotations

from typing import Any

from envbuild._io import TOMLDecodeError, parse_toml
from envbuild.gate.model import LockParseError

__all__ = ["entry_lines", "exact", "sha", "toml_loads"]


def toml_loads(text: str) -> dict[str, Any]:
    """``text`` parsed (``envbuild._io.parse_toml``); ``LockParseError`` where it is not TOML."""
    try:
        return parse_toml(text)
    except TOMLDecodeError as exc:
        raise LockParseError(f"not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise LockParseError("not valid TOML: nested too deeply") from exc


def sha(value: Any) -> str | None:
    if isinstance(value, str) and value.startswith("sha256:"):
        return value[len("sha256:") :].lower()
    return None


def exact(specifier: str) -> str | None:
    """The version of a one-clause ``==`` specifier (no wildcard), else None."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        specs = list(SpecifierSet(specifier))
    except InvalidSpecifier:
        return None
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def entry_lines(lines: list[str], header: str) -> list[int]:
    """For each ``header`` table (``[[package]]``) in order, the 1-based line an annotation points
    at: the table's ``version =`` line (what a bump changes), else its ``name =`` line, else the
    header.
    """
    out = []
    n = len(lines)
    for i, line in enumerate(lines):
        if line.rstrip() != header:
            continue
        at = i + 1
        for j in range(i + 1, min(i + 6, n)):
            text = lines[j]
            if text.startswith("["):
                break
            if text.startswith("version ="):
                at = j + 1
                break
            if text.startswith("name ="):
                at = j + 1
        out.append(at)
    return out
