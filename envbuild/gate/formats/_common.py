"""What the format readers share: TOML reading that turns every failure into ``LockParseError``."""

from __future__ import annotations

import pickle
from typing import Any

from envbuild._io import TOMLDecodeError, parse_toml
from envbuild.gate.model import LockParseError

__all__ = ["entry_lines", "exact", "sha", "toml_loads"]


# The same lock is read by several passes of one command (the gate's parse, the selection's roots,
# the stages' sources, the export's local names): parsing a 2 MB uv.lock costs about six times
# what unpickling its tables does, so the last few texts' tables are kept, pickled, and each caller
# gets a fresh copy it may change (a provision --lock no-op: five parses of the lock became one;
# the pickles never leave this process).
_PARSED: dict[str, bytes] = {}
_PARSED_KEEP = 4
_PARSED_MIN_CHARS = 20_000  # a small file parses faster than its copy is made


def toml_loads(text: str) -> dict[str, Any]:
    blob = _PARSED.get(text) if len(text) >= _PARSED_MIN_CHARS else None
    if blob is not None:
        kept: dict[str, Any] = pickle.loads(blob)
        return kept
    try:
        data: dict[str, Any] = parse_toml(text)
        if len(text) >= _PARSED_MIN_CHARS:
            while len(_PARSED) >= _PARSED_KEEP:
                _PARSED.pop(next(iter(_PARSED)))
            _PARSED[text] = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
        return data
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
