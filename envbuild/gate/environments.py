"""The concrete environments a lock can install: platform x Python x the extras/groups chosen.

Environments are enumerated, never derived by marker algebra: a fixed set of platforms people
train and develop on, the Python minors the lock's own markers tell apart, and one choice per
set of conflicting extras/groups. Each is evaluated with ``envbuild.gate.markers``.

- Platforms: Linux x86_64/aarch64, macOS arm64/x86_64, Windows AMD64. A lock whose markers never
  mention a platform (``pip-compile`` and ``pip lock`` output: one machine's resolution) is judged
  for Linux x86_64 only, and the report says so.
- Pythons: the lowest the lock allows (``requires-python``), plus each minor at which a
  ``python_version`` / ``python_full_version`` marker in the file changes its answer.
- Choices: uv.lock ``conflicts`` (each set: one of its members, or none of them); extras and
  groups that conflict with nothing are all on (they can be installed together).
- ``--environment`` / ``--python`` / ``--group`` narrow the set (``Narrow``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from envbuild.errors import ConfigError
from envbuild.gate.markers import InvalidMarker, MarkerCache, _compare
from envbuild.gate.model import Environment, Lock

__all__ = ["NO_CHOICE", "PLATFORMS", "Narrow", "covers", "enumerate_environments"]

NO_CHOICE = "no conflicting extra"

PLATFORMS: dict[str, tuple[str, dict[str, str]]] = {
    "linux-x86_64": ("linux x86_64", {"sys_platform": "linux", "platform_system": "Linux",
                                      "platform_machine": "x86_64", "os_name": "posix"}),
    "linux-aarch64": ("linux aarch64", {"sys_platform": "linux", "platform_system": "Linux",
                                        "platform_machine": "aarch64", "os_name": "posix"}),
    "macos-arm64": ("macos arm64", {"sys_platform": "darwin", "platform_system": "Darwin",
                                    "platform_machine": "arm64", "os_name": "posix"}),
    "macos-x86_64": ("macos x86_64", {"sys_platform": "darwin", "platform_system": "Darwin",
                                      "platform_machine": "x86_64", "os_name": "posix"}),
    "windows-amd64": ("windows amd64", {"sys_platform": "win32", "platform_system": "Windows",
                                        "platform_machine": "AMD64", "os_name": "nt"}),
}
_PLATFORM_KEYS = re.compile(r"\b(sys_platform|platform_system|platform_machine|os_name|platform_release)\b")
_PY_LITERAL = re.compile(
    r"python_(?:full_)?version\s*(?P<op>[<>=!~]=?=?|not in|in)\s*['\"](?P<maj>\d+)\.(?P<min>\d+)(?P<more>[^'\"]*)"
    r"|['\"](?P<maj2>\d+)\.(?P<min2>\d+)(?P<more2>[^'\"]*)['\"]\s*(?P<op2>[<>=!~]=?=?|not in|in)\s*python_(?:full_)?version")
# a clause `>= 3.11` / `< 3.11` splits at 3.11 (3.10 and 3.11 tell it apart); `<= 3.11`, `> 3.11`,
# `== 3.11`, a patch (`>= 3.11.2`) split after it (3.11 and 3.12); the reversed form flips its side
_SPLIT_AFTER = {"<=", ">", "==", "!=", "~=", "===", "in", "not in"}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_HIGHEST_MINOR = 14


@dataclass(frozen=True)
class Narrow:
    """``--environment`` (markers or platform shorthands), ``--python``, ``--group``."""

    environment: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    group: tuple[str, ...] = ()
    default_python: str = "3.12"  # when the lock says nothing about Python
    _markers: MarkerCache = field(default_factory=MarkerCache, compare=False)

    def validate(self) -> None:
        for text in self.environment:
            if _shorthand(text) is None:
                try:
                    self._markers.tree(text)
                except InvalidMarker as exc:
                    raise ConfigError(f"--environment {text!r} is neither a platform ({', '.join(PLATFORMS)}, "
                                      f"linux, macos, windows) nor a valid PEP 508 marker: {exc}") from None
        for py in self.python:
            if not re.fullmatch(r"3\.\d{1,2}", py):
                raise ConfigError(f"--python {py!r}: give a Python minor version such as 3.12")


def _shorthand(text: str) -> list[str] | None:
    key = text.strip().lower().replace(" ", "-").replace("_", "-").replace("darwin", "macos").replace("win32", "windows")
    key = key.replace("x86-64", "x86_64").replace("amd64", "amd64")
    hits = [k for k in PLATFORMS if k == key or k.split("-")[0] == key]
    return hits or None


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
        return all(_compare("python_full_version", op, version, bound) for op, bound in self.clauses)


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


def _pythons(lock: Lock, narrow: Narrow) -> list[str]:
    if narrow.python:
        return list(dict.fromkeys(narrow.python))
    allowed: Any = _specifier(lock.requires_python) if lock.requires_python else None
    minors: set[int] = set()
    for text in dict.fromkeys(lock.marker_texts):
        if "python" not in text:
            continue
        for m in _PY_LITERAL.finditer(text):
            if m.group("maj") is not None:
                major, minor, more, op = m.group("maj"), m.group("min"), m.group("more"), m.group("op")
            else:
                major, minor, more = m.group("maj2"), m.group("min2"), m.group("more2")
                op = _FLIPPED.get(m.group("op2"), m.group("op2"))
            if major == "3":
                minors.add(int(minor))
                if op in _SPLIT_AFTER or more.strip("."):
                    minors.add(int(minor) + 1)
    low = None
    if allowed is not None:
        low = next((n for n in range(6, _HIGHEST_MINOR + 1) if _allows(allowed, n)), None)
    if low is None:
        base = _minor_of(narrow.default_python) or 12
        low = min([base, *minors]) if minors else base
    candidates = sorted({low, *(n for n in minors if low <= n <= _HIGHEST_MINOR)})
    if allowed is not None:
        candidates = [n for n in candidates if _allows(allowed, n)] or [low]
    return [f"3.{n}" for n in candidates]


def _allows(spec: Any, minor: int) -> bool:
    return any(spec.contains(f"3.{minor}.{patch}", prereleases=True) for patch in (0, 1, 5, 20))


def _values(platform: dict[str, str], python: str) -> dict[str, str]:
    return {**platform, "python_version": python, "python_full_version": python + ".0",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "implementation_version": python + ".0", "platform_release": "", "platform_version": ""}


def enumerate_environments(lock: Lock, narrow: Narrow = Narrow()) -> list[Environment]:
    """Every concrete environment the lock covers (narrowed); the lock's notes say what was assumed."""
    mentions_platform = any(_PLATFORM_KEYS.search(t) for t in lock.marker_texts)
    if mentions_platform:
        platforms = list(PLATFORMS)
    else:
        platforms = ["linux-x86_64"]
        if not any("platform" in n for n in lock.notes):
            lock.notes.append("the lock's markers name no platform (one machine's resolution): judged for "
                              "linux x86_64; --environment names another")
    shorthand = [k for text in narrow.environment for k in (_shorthand(text) or [])]
    marker_filters = [t for t in narrow.environment if _shorthand(t) is None]
    if shorthand:
        platforms = [p for p in PLATFORMS if p in shorthand]
    pythons = _pythons(lock, narrow)
    choice_sets = lock.choices or []
    options: list[list[tuple[str, frozenset[str], frozenset[str]]]] = [
        [("", frozenset(), frozenset()), *cs] for cs in choice_sets]
    envs: list[Environment] = []
    for key, py, combo in itertools.product(platforms, pythons, itertools.product(*options) if options else [()]):
        words, plat = PLATFORMS[key]
        extras = set(lock.always_extras)
        groups = set(lock.always_groups)
        selection = []
        for label, ex, gr in combo:
            if label:
                selection.append(label)
            extras |= ex
            groups |= gr
        env = Environment(words, py, _values(plat, py), frozenset(extras), frozenset(groups),
                          tuple(selection) if selection or not choice_sets else (NO_CHOICE,))
        if not covers(lock, env):
            continue
        if marker_filters and not all(_holds(env, m, narrow._markers) for m in marker_filters):
            continue
        if narrow.group and not any(_chose(env, g) for g in narrow.group):
            continue
        envs.append(env)
    return envs


def _chose(env: Environment, group: str) -> bool:
    want = group.strip().lower()
    return any(s.split(" ", 1)[-1].lower() == want for s in env.selection)


def _holds(env: Environment, marker: str, cache: MarkerCache) -> bool:
    return cache.evaluate(marker, env.values, env.extras, env.groups, [])


def covers(lock: Lock, env: Environment) -> bool:
    """Whether ``env`` is one the lock is made for (its ``environments`` / ``supported-markers``;
    a lock that names none covers every environment; a marker that does not parse counts as covering)."""
    if not lock.environments:
        return True
    for marker in lock.environments:
        try:
            if env.holds(marker, lock.markers):
                return True
        except InvalidMarker:
            return True
    return False
