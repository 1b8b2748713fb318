"""The Pythons a lock allows, each judged on its own: from its ``requires-python`` (Poetry's
``python``; a pip-compile or ``uv pip compile`` header's Python) up to the newest CPython a file of
the lock is built for (a ``cp314`` wheel: 3.14), never past the range; a lock that states no range
(a requirements file without a header, a pixi.lock), from the minors its ``python_version`` /
``python_full_version`` markers name (and the policy's Python) to the newest of them."""

from __future__ import annotations

import re
from typing import Any

from envbuild.gate.markers import _compare
from envbuild.gate.model import ParsedLock

__all__ = ["newest_file_python", "pythons_of"]

_PY_LITERAL = re.compile(
    r"python_(?:full_)?version\s*(?P<op>[<>=!~]=?=?|not"
    r" in|in)\s*['\"](?P<maj>\d+)(?:\.(?P<min>\d+))?(?P<more>[^'\"]*)"
    r"|['\"](?P<maj2>\d+)(?:\.(?P<min2>\d+))?(?P<more2>[^'\"]*)['\"]\s*(?P<op2>[<>=!~]=?=?|not"
    r" in|in)\s*python_(?:full_)?version"
)
# a clause `>= 3.11` / `< 3.11` splits at 3.11 (3.10 and 3.11 tell it apart); `<= 3.11`, `> 3.11`,
# `== 3.11`, a patch (`>= 3.11.2`) split after it (3.11 and 3.12); the reversed form flips its side
_SPLIT_AFTER = {"<=", ">", "==", "!=", "~=", "===", "in", "not in"}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_LOWEST_MINOR = 6  # no lock of a torch stack installs on an older Python 3
_NEWEST_READ = 99  # a bound on the search for the lowest minor a range allows, not a list


def _minor_of(spec: str) -> int | None:
    m = re.search(r"3\.(\d+)", spec)
    return int(m.group(1)) if m else None


_PLAIN_CLAUSE = re.compile(r"\s*(<=|>=|<|>|==|!=)\s*(\d+(?:\.\d+)*)\s*")


class _PlainSpecifier:
    """``>=3.10, <3.14``: plain release clauses, compared as the marker evaluator compares
    versions (packaging's SpecifierSet, a tenth of the gate's start, for anything else)."""

    def __init__(self, clauses: list[tuple[str, str]]) -> None:
        self.clauses = clauses

    def contains(self, version: str, prereleases: bool = True) -> bool:
        return all(
            _compare("python_full_version", op, version, bound) for op, bound in self.clauses
        )


def _specifier(text: str) -> Any:
    parts = text.split(",")
    clauses = [(m.group(1), m.group(2)) for p in parts if (m := _PLAIN_CLAUSE.fullmatch(p))]
    if len(clauses) == len(parts):
        return _PlainSpecifier(clauses)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def pythons_of(lock: ParsedLock, asked: tuple[str, ...], default_python: str) -> list[str]:
    """Every Python minor the lock allows, each judged on its own: from its ``requires-python``
    (Poetry's ``python`` constraint) up to the newest CPython any locked file is built for (a
    ``cp314`` wheel: 3.14); a lock that states no range, from the minors its markers name (and
    ``default_python``, the policy's) to the newest of them. ``asked`` (``--python``): those."""
    if asked:
        return list(dict.fromkeys(asked))
    allowed: Any = _specifier(lock.requires_python) if lock.requires_python else None
    minors = {n for n in _marker_minors(lock) if _LOWEST_MINOR <= n <= _NEWEST_READ}
    base = _minor_of(default_python) or 12
    low = None
    if allowed is not None:
        low = next((n for n in range(_LOWEST_MINOR, _NEWEST_READ + 1) if _allows(allowed, n)), None)
    if low is None:  # no range stated (or one no Python 3 meets): the markers' minors
        allowed = None
        low = min([base, *minors])
        high = max([base, *minors])
    else:
        newest = newest_file_python(lock)
        high = max([low, *minors]) if newest is None else max(low, newest)
    candidates = range(low, high + 1)
    if allowed is not None:
        candidates = [n for n in candidates if _allows(allowed, n)] or [low]  # type: ignore[assignment]
    return [f"3.{n}" for n in candidates]


def _marker_minors(lock: ParsedLock) -> set[int]:
    """Each minor at which a ``python_version`` / ``python_full_version`` marker of the lock changes
    its answer."""
    minors: set[int] = set()
    for text in dict.fromkeys(lock.marker_texts):
        if "python" not in text:
            continue
        for m in _PY_LITERAL.finditer(text):
            if m.group("maj") is not None:
                major, minor, more, op = (
                    m.group("maj"),
                    m.group("min"),
                    m.group("more"),
                    m.group("op"),
                )
            else:
                major, minor, more = m.group("maj2"), m.group("min2"), m.group("more2")
                op = _FLIPPED.get(m.group("op2"), m.group("op2"))
            if major != "3" or minor is None:  # `>= '3'`: every Python 3 answers alike
                continue
            minors.add(int(minor))
            if op in _SPLIT_AFTER or more.strip("."):
                minors.add(int(minor) + 1)
    return minors


_CPYTHON_TAG = re.compile(r"(?:^|[-.])cp3(\d{1,2})(?=[-._t])")


def newest_file_python(lock: ParsedLock) -> int | None:
    """The newest CPython 3 minor a wheel of the lock is built for (``cp314`` -> 14), read from
    the interpreter tags of its file names; None when no file names one."""
    newest = -1
    for e in lock.entries:
        for f, _ in e.files:
            if ".whl" in f:
                name = f.rsplit("/", 1)[-1]
                for m in _CPYTHON_TAG.finditer(name):
                    newest = max(newest, int(m.group(1)))
    return newest if newest >= 0 else None


def _allows(spec: Any, minor: int) -> bool:
    return any(spec.contains(f"3.{minor}.{patch}", prereleases=True) for patch in (0, 1, 5, 20))
