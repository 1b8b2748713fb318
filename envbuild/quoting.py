"""How a value from a stack spec or the command line is written into a file another program reads.

envbuild renders four kinds of file that other programs parse and run: a Dockerfile (read by
BuildKit or buildah, its ``RUN`` lines by ``/bin/bash``), the env overlay that a venv's
``activate`` sources (POSIX shell), a Modal image file (Python source) and Ansible variables
(YAML). Every value that did not come from envbuild itself goes through exactly one function
of this module for its target; no renderer builds a line by formatting a value in directly.

Each function either returns text that the target reads back as exactly the value it was given,
or raises ``ConfigError`` naming the value (``what``: a key path such as ``env.HF_HOME`` or an
option such as ``--root``): exit 2, before anything is written. The stack spec refuses the same
characters when it is loaded (``spec/stack.py``), so a refusal here is a second line of defence, and
the first for values that come from the command line.

Refused everywhere (``unsafe_character``): control characters (C0 but tab, DEL, C1), the Unicode
line and paragraph separators (some readers end a line there), the bidirectional embedding,
override and isolate controls (text that reads differently from what runs, CVE-2021-42574) and
lone surrogates (an undecodable byte from the environment; no file can hold one).
"""

from __future__ import annotations

import json
import pprint
import re
import shlex
import unicodedata
from collections.abc import Iterable
from typing import Any

from envbuild.errors import ConfigError

__all__ = [
    "ENV_NAME",
    "check_env_name",
    "check_text",
    "docker_comment",
    "docker_env",
    "docker_env_value",
    "docker_path",
    "docker_run",
    "py_docstring",
    "py_literal",
    "sh_export",
    "sh_join",
    "sh_word",
    "shown",
    "unsafe_character",
    "yaml_key",
    "yaml_str",
]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNSAFE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMES = {
    "\x00": "NUL",
    "\t": "TAB",
    "\n": "LINE FEED",
    "\r": "CARRIAGE RETURN",
    "\x1b": "ESCAPE",
    "\x7f": "DELETE",
    "\x85": "NEXT LINE",
    "\x0b": "VERTICAL TAB",
    "\x0c": "FORM FEED",
}
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unsafe_character(text: str) -> str | None:
    """A description of the first character of ``text`` no rendered file may hold, or None."""
    m = _UNSAFE.search(text)
    if m is None:
        return None
    ch = m.group()
    code = f"U+{ord(ch):04X}"
    if "\ud800" <= ch <= "\udfff":
        kind = "an undecodable byte (a lone surrogate)"
    elif ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029":
        kind = "a line break"
    elif ch in _BIDI:
        kind = "a bidirectional text control"
    else:
        kind = "a control character"
    name = _NAMES.get(ch) or unicodedata.name(ch, "")
    return f"{kind} ({code}{' ' + name if name else ''}) at position {m.start() + 1}"


def shown(text: str) -> str:
    """``text`` safe to print on a terminal: unsafe characters as ``\\uXXXX`` escapes."""
    return re.sub("[\\t" + _UNSAFE.pattern[1:], lambda m: f"\\u{ord(m.group()):04x}", text)


def check_text(value: str, what: str) -> str:
    """``value`` when it holds no unsafe character; else ``ConfigError`` naming ``what``."""
    bad = unsafe_character(value)
    if bad is not None:
        raise ConfigError(
            f"{what}: holds {bad}; envbuild refuses these in anything it writes into a Dockerfile,"
            " a shell file, Python or YAML, or passes on a command line (a line break there ends"
            " the line and can start a command)"
        )
    return value


def check_env_name(name: str, what: str) -> str:
    """An environment variable name, ``[A-Za-z_][A-Za-z0-9_]*``; else ``ConfigError``."""
    if not ENV_NAME.match(name):
        raise ConfigError(
            f"{what}: {shown(name)!r} is not an environment variable name "
            "(letters, digits and '_', not starting with a digit)"
        )
    return name


# ----------------------------------------------------------------------------- POSIX shell


def sh_word(value: str, what: str = "a value") -> str:
    """One shell word that the shell reads back as ``value`` (single quotes where needed)."""
    if "\x00" in value:
        raise ConfigError(f"{what}: holds a NUL character, which no shell word can carry")
    return shlex.quote(value)


def sh_join(argv: Iterable[str], what: str = "a command") -> str:
    """A command line whose words the shell reads back as ``argv``."""
    return " ".join(sh_word(a, what) for a in argv)


def sh_export(name: str, value: str, what: str) -> str:
    """``export NAME='value'``: a line of a sourced file that sets exactly this one variable."""
    return f"export {check_env_name(name, what)}={sh_word(value, what)}"


# ----------------------------------------------------------------------------- Dockerfile

# Characters a path may have where a Dockerfile takes it bare: COPY arguments (which also expand
# $VARIABLES) and the comma-separated options of RUN --mount.
_DOCKER_PATH = re.compile(r"[A-Za-z0-9_./+@-][A-Za-z0-9_./+@:-]*\Z")
_DOCKER_BARE = re.compile(r"[A-Za-z0-9_./+@:%,=-]+\Z")  # an ENV value that needs no quotes


def docker_env_value(value: str, what: str) -> str:
    """An ``ENV`` value that BuildKit, buildah and dockerfile-parse all read back as ``value``.

    Runs of ordinary characters go in single quotes (no ``$VAR`` expansion, no escapes inside);
    each backslash and single quote goes outside them, escaped (``\\\\``, ``\\'``). BuildKit's
    word splitter keeps a backslash and the character after it together even inside quotes, and
    its double quotes unescape more than dockerfile-parse's do, so neither may carry one. A value
    never ends the line with a backslash (that would continue the instruction on the next line).
    A line break cannot be written inside an instruction at all: refused.
    """
    check_text(value, what)
    if value and _DOCKER_BARE.match(value):
        return value
    out = []
    for part in re.split(r"([\\'])", value):
        if part in ("\\", "'"):
            out.append("\\" + part)
        elif part:
            out.append("'" + part + "'")
    text = "".join(out)
    return text + "''" if not text or text.endswith(("\\\\", "\\'")) else text


def docker_env(name: str, value: str, what: str) -> str:
    """``NAME=value`` for an ``ENV`` instruction (``docker_env_value``)."""
    return f"{check_env_name(name, what)}={docker_env_value(value, what)}"


def docker_run(argv: Iterable[str], what: str) -> str:
    """The words of a shell-form ``RUN`` command: shell-quoted, on one line.

    A ``RUN`` line is not expanded by the Dockerfile parser; ``/bin/bash -c`` reads it. Quoting
    also keeps a ``<<WORD`` from being taken for a heredoc (BuildKit looks for unquoted ones).
    """
    return " ".join(sh_word(check_text(a, what), what) for a in argv)


def docker_path(path: str, what: str) -> str:
    """A path written bare into ``COPY`` or a ``--mount`` option: plain characters only.

    ``COPY`` expands ``$VAR`` and splits on spaces, ``--mount`` splits on commas; rather than
    escape for each, such paths are limited to letters, digits and ``_ . / + @ : -``.
    """
    if not _DOCKER_PATH.match(path):
        raise ConfigError(
            f"{what}: {shown(path)!r} cannot be written into the Dockerfile as a path: use "
            "letters, digits and _ . / + @ : - only (no spaces, quotes, '$' or ',')"
        )
    return path


def docker_comment(text: str, what: str) -> str:
    """``# text``: a comment line (text with a line break would end it and start an instruction)."""
    return "# " + check_text(text, what) if text else "#"


# ----------------------------------------------------------------------------- Python source


def py_literal(value: Any, width: int = 100) -> str:
    """A Python literal (str, int, bool, None, list, tuple, dict of those) that evaluates to
    ``value``.

    ``repr`` of these types is exact for every string; ``pprint`` only lays it out on lines.
    """
    return pprint.pformat(value, width=width, sort_dicts=False)


def py_docstring(text: str, what: str) -> str:
    """``text`` for the inside of a ``\"\"\"`` string: backslashes and quotes escaped (JSON's
    escapes are Python's), so no ``\"\"\"`` in it can end the docstring."""
    check_text(text, what)
    return json.dumps(text, ensure_ascii=False)[1:-1]


# ----------------------------------------------------------------------------- YAML (Ansible)

# What YAML lets a double-quoted scalar hold unescaped (YAML 1.1, as PyYAML reads it), less the
# characters YAML 1.1 takes for line breaks (NEL, LS, PS: folded away) and the byte order mark.
_YAML_PRINTABLE = re.compile(
    "(?![\x85\u2028\u2029\ufeff])[\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def yaml_str(value: str) -> str:
    """A YAML scalar that is exactly ``value`` and that Ansible never templates.

    Double-quoted with every character outside YAML's printable set escaped (no line folding, no
    line break), and tagged ``!unsafe``: Ansible would otherwise evaluate ``{{ ... }}`` in a
    variable as Jinja (``lookup('pipe', ...)`` runs a command on the controller).
    """
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif _YAML_PRINTABLE.match(ch):
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '!unsafe "' + "".join(out) + '"'


def yaml_key(name: str, what: str) -> str:
    """A mapping key: a plain YAML scalar, so only names that need no quoting (variable names)."""
    return check_env_name(name, what)
