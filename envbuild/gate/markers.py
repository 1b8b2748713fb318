"""PEP 508 markers evaluated in one concrete environment, with a *set* of active extras.

``packaging.markers.Marker.evaluate`` takes one ``extra`` string. A uv.lock environment has
several at once: every conflicting extra or group uv encodes as a pseudo-extra
(``extra == 'extra-7-trainer-cu128'``, ``extra == 'group-7-trainer-dev'``), and a marker may
test one while excluding another. So the parsed marker (packaging's own parser; its tree is
``Marker._markers``, unchanged since packaging 22) is walked here, each comparison decided with
packaging's rules: a version comparison through ``Specifier`` where the right side is a valid
specifier, else a plain string comparison. Nothing is simplified or rewritten; each distinct
marker string is parsed once per run and each result is cached per environment, so a lock of
thousands of 20-clause markers costs one dictionary lookup per edge and environment.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.specifiers import InvalidSpecifier, Specifier
from packaging.utils import canonicalize_name

__all__ = ["InvalidMarker", "MarkerCache", "evaluate_tree"]

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}
_SET_KEYS = {"extras", "dependency_groups"}


class MarkerCache:
    """Parsed marker trees by their text (parse errors are remembered too)."""

    def __init__(self) -> None:
        self._trees: dict[str, list[Any] | InvalidMarker] = {}

    def tree(self, text: str) -> list[Any]:
        """The parsed tree of ``text``; raises ``InvalidMarker`` (once per distinct text)."""
        got = self._trees.get(text)
        if got is None:
            try:
                got = list(Marker(text)._markers)
            except InvalidMarker as exc:
                got = exc
            self._trees[text] = got
        if isinstance(got, InvalidMarker):
            raise got
        return got


def _compare(key: str, op: str, lhs: str, rhs: str) -> bool:
    try:
        spec = Specifier(f"{op}{rhs}")
    except InvalidSpecifier:
        pass
    else:
        if key.endswith("version") or key == "platform_release":
            return spec.contains(lhs, prereleases=True)
    fn = _OPS.get(op)
    if fn is None:  # "~=" / "===" on a non-version: packaging refuses these as undefined
        return False
    return bool(fn(lhs, rhs))


def _atom(atom: tuple[Any, Any, Any], values: dict[str, str], extras: frozenset[str],
          groups: frozenset[str]) -> bool:
    left, op_node, right = atom
    op = op_node.value
    if type(left).__name__ == "Variable":
        key, literal, variable_left = left.value, right.value, True
    else:
        key, literal, variable_left = right.value, left.value, False
    if key == "extra":  # one of the active extras (uv's pseudo-extras included)
        hit = canonicalize_name(literal) in extras
        return hit if op == "==" else (not hit if op == "!=" else False)
    if key in _SET_KEYS:  # PEP 751: 'cu128' in extras, 'dev' in dependency_groups
        bag = extras if key == "extras" else groups
        hit = canonicalize_name(literal) in bag
        return hit if op == "in" else (not hit if op == "not in" else False)
    value = values.get(key, "")
    return _compare(key, op, value, literal) if variable_left else _compare(key, op, literal, value)


def evaluate_tree(tree: list[Any], values: dict[str, str], extras: frozenset[str],
                  groups: frozenset[str]) -> bool:
    """``tree`` (from ``MarkerCache.tree``) in the environment: ``and`` binds tighter than ``or``."""
    any_true = False
    clause = True
    for item in tree:
        if item == "or":
            any_true = any_true or clause
            clause = True
        elif item == "and":
            continue
        elif not clause:
            continue  # this and-clause is already false
        elif isinstance(item, list):
            clause = evaluate_tree(item, values, extras, groups)
        else:
            clause = _atom(item, values, extras, groups)
    return any_true or clause
