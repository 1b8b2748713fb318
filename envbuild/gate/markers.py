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

import functools
import operator
import re
from collections.abc import Callable
from typing import Any

from packaging.utils import canonicalize_name

__all__ = ["InvalidMarker", "MarkerCache"]


class InvalidMarker(ValueError):
    """A marker that does not parse (packaging's reason as the message)."""


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
}
_SET_KEYS = {"extras", "dependency_groups"}
_VARIABLES = (
    "python_full_version|python_version|platform_python_implementation|implementation_version|"
    "implementation_name|platform_machine|platform_release|platform_system|platform_version|"
    "sys_platform|os_name|dependency_groups|extras|extra"
)
_OP = r"===|==|!=|<=|>=|~=|<|>|not\s+in|in"
_LIT = r"'[^'\\]*'|\"[^\"\\]*\""
_ATOM_RE = (
    rf"\b(?:{_VARIABLES})\b\s*(?:{_OP})\s*(?:{_LIT})"
    rf"|(?:{_LIT})\s*(?:{_OP})\s*\b(?:{_VARIABLES})\b"
)
_ATOM = re.compile(
    rf"(?P<var>\b(?:{_VARIABLES})\b)\s*(?P<op>{_OP})\s*(?P<lit>{_LIT})"
    rf"|(?P<lit2>{_LIT})\s*(?P<op2>{_OP})\s*(?P<var2>\b(?:{_VARIABLES})\b)"
)
_TOKENS = re.compile(rf"\s*(?:(\()|(\))|\b(and|or)\b(?=[\s(])|({_ATOM_RE}))")
_PLAIN = re.compile(rf"(?:\s*(?:\(|\)|\b(?:and|or)\b(?=[\s(])|(?:{_ATOM_RE})))*\s*")


class MarkerCache:
    """Markers by their text, each read once into a postfix program over the lock's comparisons
    ("atoms": ``sys_platform == 'linux'``, ``extra == 'extra-7-trainer-cu128'``). An environment
    decides each atom once; a marker is then a few dozen ``&``/``|`` over those answers, or over bit
    masks of every environment at once (``masks``), so thousands of 20-clause markers cost
    microseconds each. Parse errors are remembered and raised as ``InvalidMarker``."""

    def __init__(self) -> None:
        self._trees: dict[str, list[Any] | InvalidMarker] = {}
        self._programs: dict[str, list[int]] = {}
        self._sources: dict[str, str | None] = {}
        self._atom_text: dict[str, int] = {}
        self._atoms: dict[tuple[str, str, str, bool], int] = {}
        # (key, op, literal, variable on the left)
        self.atoms: list[tuple[str, str, str, bool]] = []

    def evaluate(
        self,
        text: str,
        values: dict[str, str],
        extras: frozenset[str],
        groups: frozenset[str],
        answers: list[bool],
    ) -> bool:
        """``text`` in the environment whose atom answers so far are ``answers`` (extended here);
        raises ``InvalidMarker``."""
        program = self._program(text)
        if len(answers) < len(self.atoms):
            answers.extend(
                _decide(atom, values, extras, groups) for atom in self.atoms[len(answers) :]
            )
        return bool(_run(program, answers))

    def masks(self, text: str, envs: list[Any], atom_masks: list[int]) -> int:
        """The environments (a bit per index of ``envs``) where ``text`` holds: the same program
        over bit masks (``&`` for and, ``|`` for or) instead of booleans; ``atom_masks`` holds each
        atom's mask so far and is extended here. Raises ``InvalidMarker``."""
        program = self._program(text)
        if len(atom_masks) < len(self.atoms):
            for atom in self.atoms[len(atom_masks) :]:
                bits = 0
                for j, env in enumerate(envs):
                    if _decide(atom, env.values, env.extras, env.groups):
                        bits |= 1 << j
                atom_masks.append(bits)
        return _run(program, atom_masks)

    def masks_by(self, text: str, atom_mask: Callable[[tuple[str, str, str, bool]], int]) -> int:
        """Like ``masks``, with each atom's mask from ``atom_mask`` (a grid that knows its atoms'
        masks without deciding them environment by environment). Raises ``InvalidMarker``."""
        program = self._program(text)
        stack: list[int] = []
        atoms = self.atoms
        for op in program:
            if op >= 0:
                stack.append(atom_mask(atoms[op]))
            elif op == _AND:
                right = stack.pop()
                stack[-1] &= right
            elif op == _OR:
                right = stack.pop()
                stack[-1] |= right
            else:
                stack.append(-1)
        return stack[-1]

    def _program(self, text: str) -> list[int]:
        program = self._programs.get(text)
        if program is None:
            source = self._fast(text)
            if source is None:
                source = self._expr(self.tree(text))
            program = self._programs[text] = _postfix(source)
        return program

    def check(self, text: str) -> None:
        """Raise ``InvalidMarker`` when ``text`` does not parse (the plain form is checked without
        packaging's parser, which is slow on long markers; anything else goes through it)."""
        if text in self._programs:
            return
        source = self._fast(text)
        if source is None:
            self.tree(text)

    def _index(self, atom: tuple[str, str, str, bool]) -> int:
        index = self._atoms.get(atom)
        if index is None:
            index = self._atoms[atom] = len(self.atoms)
            self.atoms.append(atom)
        return index

    def _fast(self, text: str) -> str | None:
        """The compiled expression of a marker in the plain form lockers write (``VAR OP 'literal'``
        clauses, ``and``/``or``, parentheses), read with regular expressions: packaging's general
        parser costs ~1 ms for a 20-clause marker and a large uv.lock holds hundreds. Anything else
        (or anything odd) returns None and goes through packaging."""
        if text in self._sources:
            return self._sources[text]
        source = None
        if _PLAIN.fullmatch(text):
            source = self._fast_tokens(_TOKENS.findall(text))
        self._sources[text] = source
        return source

    def _fast_tokens(self, tokens: list[tuple[str, str, str, str]]) -> str | None:
        out: list[str] = []
        depth = 0
        expect_operand = True
        atoms = self._atom_text
        for opening, closing, boolean, atom_text in tokens:
            if opening:
                if not expect_operand:
                    return None
                depth += 1
                out.append("(")
            elif closing:
                if expect_operand or depth == 0:
                    return None
                depth -= 1
                out.append(")")
            elif boolean:
                if expect_operand:
                    return None
                out.append(boolean)
                expect_operand = True
            else:
                if not expect_operand:
                    return None
                index = atoms.get(atom_text)
                if index is None:
                    m = _ATOM.fullmatch(atom_text)
                    if m is None:
                        return None
                    if m.group("var") is not None:
                        atom = (
                            m.group("var"),
                            " ".join(m.group("op").split()),
                            m.group("lit")[1:-1],
                            True,
                        )
                    else:
                        atom = (
                            m.group("var2"),
                            " ".join(m.group("op2").split()),
                            m.group("lit2")[1:-1],
                            False,
                        )
                    if atom[1] in ("in", "not in") and atom[0] not in _SET_KEYS and atom[3]:
                        return None  # `VAR in 'literal'`: rare; packaging decides
                    index = atoms[atom_text] = self._index(atom)
                out.append(str(index))
                expect_operand = False
        if depth or expect_operand:
            return None
        return " ".join(out)

    def _expr(self, tree: list[Any]) -> str:
        parts = []
        for item in tree:
            if isinstance(item, list):
                parts.append(f"( {self._expr(item)} )")
            elif isinstance(item, tuple):
                left, op, right = item
                variable_left = type(left).__name__ == "Variable"
                key, literal = (
                    (left.value, right.value) if variable_left else (right.value, left.value)
                )
                parts.append(
                    str(self._index((str(key), str(op.value), str(literal), variable_left)))
                )
            elif item in ("and", "or"):
                parts.append(item)
        return " ".join(parts)

    def tree(self, text: str) -> list[Any]:
        """The parsed tree of ``text``; raises ``InvalidMarker`` (once per distinct text)."""
        got = self._trees.get(text)
        if got is None:
            from packaging.markers import InvalidMarker as PackagingInvalidMarker
            from packaging.markers import Marker

            try:
                got = list(Marker(text)._markers)
            except PackagingInvalidMarker as exc:
                got = InvalidMarker(str(exc))
            self._trees[text] = got
        if isinstance(got, InvalidMarker):
            raise got
        return got


_AND, _OR, _TRUE = -1, -2, -3


def _postfix(source: str) -> list[int]:
    """``"( 0 and 1 ) or 2"`` (atom indexes, ``and`` binding tighter than ``or``) in postfix
    order."""
    out: list[int] = []
    ops: list[str] = []
    for tok in source.split():
        if tok == "(":
            ops.append(tok)
        elif tok == ")":
            while ops and ops[-1] != "(":
                out.append(_AND if ops.pop() == "and" else _OR)
            ops.pop()
        elif tok in ("and", "or"):
            while ops and ops[-1] != "(" and (ops[-1] == "and" or tok == "or"):
                out.append(_AND if ops.pop() == "and" else _OR)
            ops.append(tok)
        else:
            out.append(int(tok))
    while ops:
        out.append(_AND if ops.pop() == "and" else _OR)
    return out or [_TRUE]


def _run(program: list[int], values: list[Any]) -> int:
    """Evaluate a postfix program over atom answers (booleans, or bit masks of environments)."""
    stack: list[Any] = []
    for op in program:
        if op >= 0:
            stack.append(values[op])
        elif op == _AND:
            right = stack.pop()
            stack[-1] = stack[-1] & right
        elif op == _OR:
            right = stack.pop()
            stack[-1] = stack[-1] | right
        else:
            stack.append(-1)
    return int(stack[-1])


def _decide(
    atom: tuple[str, str, str, bool],
    values: dict[str, str],
    extras: frozenset[str],
    groups: frozenset[str],
) -> bool:
    key, op, literal, variable_left = atom
    if key == "extra":  # one of the active extras (uv's pseudo-extras included)
        hit = canonicalize_name(literal) in extras
        return hit if op == "==" else (not hit if op == "!=" else False)
    if key in _SET_KEYS:  # PEP 751: 'cu128' in extras, 'dev' in dependency_groups
        hit = canonicalize_name(literal) in (extras if key == "extras" else groups)
        return hit if op == "in" else (not hit if op == "not in" else False)
    value = values.get(key, "")
    return _compare(key, op, value, literal) if variable_left else _compare(key, op, literal, value)


_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


@functools.lru_cache(maxsize=65536)
def _compare(key: str, op: str, lhs: str, rhs: str) -> bool:
    if (
        key.endswith("version")
        and op in _ORDER
        and _RELEASE.fullmatch(lhs)
        and _RELEASE.fullmatch(rhs)
    ):
        # plain releases (``python_full_version >= '3.11'``), as PEP 440 orders them (3.10 ==
        # 3.10.0)
        a = [int(x) for x in lhs.split(".")]
        b = [int(x) for x in rhs.split(".")]
        width = max(len(a), len(b))
        return _ORDER[op](a + [0] * (width - len(a)), b + [0] * (width - len(b)))
    from packaging.specifiers import InvalidSpecifier, Specifier

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
