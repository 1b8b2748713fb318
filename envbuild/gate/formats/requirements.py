"""Requirement files: pip-compile, ``uv pip compile`` (``--universal`` writes markers), ``pip
freeze``.

Read line by line with ``packaging.requirements`` (continuations, comments, ``--hash`` and
``--index-url`` options, markers). Each line applies where its marker holds; the ``# via``
annotations name the packages that pulled a line in. pip-requirements-parser was considered: its
last release is from 2022 (it vendors pip 22's parser) and it keeps comments apart from the
requirement they annotate, so the ``# via`` annotations this gate relies on would be lost.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuild.gate.formats._common import exact
from envbuild.gate.model import Entry, LockParseError, ParsedLock
from envbuild.spec.stepfile import logical_lines

__all__ = ["parse"]

_HASH = re.compile(r"^--hash[= ](sha256):([0-9a-fA-F]{64})$")


def _via(comments: list[str]) -> tuple[str, ...] | None:
    """pip-compile's ``# via a, b`` or ``# via`` followed by ``#   a`` lines."""
    names: list[str] = []
    found = False
    for c in comments:
        if c.startswith("via"):
            found = True
            rest = c[3:].strip()
            # "-r requirements.in", "--override x.txt": not packages
            if rest and not rest.startswith("-"):
                names += [x for x in re.split(r"[,\s]+", rest) if x]
        elif found and c and not c.startswith("-"):
            names.append(c.split()[0])
    if not found:
        return None
    return tuple(
        canonicalize_name(n) for n in names if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", n)
    )


def parse(path: Path, text: str) -> ParsedLock:
    from packaging.requirements import InvalidRequirement, Requirement

    entries: list[Entry] = []
    indexes: list[str] = []
    markers: list[str] = []
    for lineno, line, comments in logical_lines(text):
        tokens = line.split()
        if tokens[0].startswith("-"):
            opt = tokens[0].split("=", 1)
            value = opt[1] if len(opt) > 1 else (tokens[1] if len(tokens) > 1 else "")
            if opt[0] in ("-i", "--index-url", "--extra-index-url"):
                indexes.append(value)
            continue  # -r/-c includes, --find-links, --pre ...: not packages
        req_tokens = [t for t in tokens if not t.startswith("--")]
        opts = [t for t in tokens if t.startswith("--")]
        raw = " ".join(req_tokens)
        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            raise LockParseError(f"line {lineno}: not a valid requirement {raw!r}: {exc}") from exc
        marker = str(req.marker) if req.marker is not None else None
        if marker:
            markers.append(marker)
        hashes = tuple(m.group(2).lower() for o in opts if (m := _HASH.match(o)))
        version = exact(str(req.specifier)) if not req.url else _url_version(req.url, req.name)
        entries.append(
            Entry(
                key=len(entries),
                name=canonicalize_name(req.name),
                version=version,
                raw=raw,
                line=lineno,
                hashes=hashes,
                url=req.url,
                via=_via(comments),
                marker=marker,
                files=((req.url, hashes[0] if hashes else None),) if req.url else (),
            )
        )
    return ParsedLock(path, "requirements", entries, indexes, marker_texts=markers)


def _url_version(url: str, name: str) -> str | None:
    """The version in a direct wheel URL's file name (``flash_attn-2.8.3+cu12torch2.10…-….whl``)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    filename = url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1]
    if not filename.endswith(".whl"):
        return None
    try:
        parsed = parse_wheel_filename(_unquote(filename))
    except InvalidWheelFilename:
        return None
    return str(parsed[1]) if parsed[0] == canonicalize_name(name) else None


def _unquote(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text)
