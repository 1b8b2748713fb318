"""PEP 751 ``pylock.toml`` / ``pylock.*.toml``, read and validated by ``packaging.pylock``.

Read as the PEP writes it: ``wheels`` and ``sdist`` are the package's files, where its bytes are
(``url`` or ``path``), whether an ``index`` is named or not (``pip lock --no-index`` names none);
a direct reference is ``[packages.archive]`` (its URL is the entry's), ``vcs`` or ``directory``
(built from source: no file is recorded); a package's ``requires-python`` joins its ``marker``.

Each package applies where its ``marker`` holds (markers may test ``'cu128' in extras`` and
``'dev' in dependency_groups``); the lock's ``environments`` limit where it installs at all.
PEP 751 does not record which extras conflict, so the lock's extras are taken as one choice (one
of them, or none), the default groups are always on and every other group is one choice too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from envbuild.gate.formats._common import entry_lines, toml_loads
from envbuild.gate.model import Entry, Item, LockParseError, ParsedLock

if TYPE_CHECKING:
    from packaging.pylock import Pylock

__all__ = ["parse", "read_pylock"]


def read_pylock(text: str) -> Pylock:
    """The one reader of a PEP 751 file's text (a committed pylock.toml, uv's export, ``uv pip
    compile --format pylock.toml``): ``packaging.pylock``'s typed ``Pylock``, validated;
    ``LockParseError`` with the reason where it is not one."""
    from packaging.pylock import Pylock, PylockValidationError

    data = toml_loads(text)
    try:
        return Pylock.from_dict(data)
    except PylockValidationError as exc:
        raise LockParseError(f"not a valid PEP 751 lock: {exc}") from exc
    # a malformed field packaging did not anticipate
    except (TypeError, ValueError, AttributeError) as exc:
        raise LockParseError(f"not a valid PEP 751 lock: {exc}") from exc


def parse(path: Path, text: str) -> ParsedLock:
    lock = read_pylock(text)
    lines = text.splitlines()
    headers = entry_lines(lines, "[[packages]]")
    entries: list[Entry] = []
    markers: list[str] = []
    for i, p in enumerate(lock.packages):
        files: list[tuple[str, str | None]] = [
            (w.url or (str(w.path) if w.path else w.name or ""), w.hashes.get("sha256"))
            for w in p.wheels or ()
        ]
        if p.sdist is not None:
            files.append(
                (
                    p.sdist.url or (str(p.sdist.path) if p.sdist.path else ""),
                    p.sdist.hashes.get("sha256"),
                )
            )
        # PEP 751: a wheel's or sdist's ``url`` is where its bytes are (from an index or not); a
        # direct reference is ``[packages.archive]``, ``vcs`` or ``directory``
        url = None
        if p.archive is not None:
            url = p.archive.url or (str(p.archive.path) if p.archive.path else None)
            if url:
                files.append((url, p.archive.hashes.get("sha256")))
        deps = None
        if p.dependencies is not None:
            deps = tuple(
                canonicalize_name(str(d.get("name"))) for d in p.dependencies if d.get("name")
            )
        marker = _marker(
            str(p.marker) if p.marker is not None else None,
            str(p.requires_python) if p.requires_python is not None else None,
        )
        if marker:
            markers.append(marker)
        entries.append(
            Entry(
                key=i,
                name=canonicalize_name(p.name),
                version=str(p.version) if p.version else None,
                raw=f"{p.name}=={p.version}" + (f"; {p.marker}" if p.marker else ""),
                line=headers[i] if i < len(headers) else None,
                hashes=tuple(h for _, h in files if h),
                index=p.index,
                url=url,
                files=tuple((u, h) for u, h in files if u),
                dependencies=deps,
                marker=marker,
            )
        )
    envs = [str(m) for m in lock.environments or ()]
    out = ParsedLock(
        path,
        "pylock",
        entries,
        sorted({e.index for e in entries if e.index}),
        requires_python=str(lock.requires_python) if lock.requires_python else None,
        environments=envs,
        marker_texts=markers + envs,
    )
    extras = [canonicalize_name(x) for x in lock.extras or ()]
    default = frozenset(canonicalize_name(g) for g in lock.default_groups or ())
    others = [
        canonicalize_name(g)
        for g in lock.dependency_groups or ()
        if canonicalize_name(g) not in default
    ]
    out.always_groups = default
    # PEP 751 lists the extras and groups an installer may be asked for, not which go together:
    # each is judged on its own (a set of one-of), beside the default groups
    if extras:
        out.conflicts.append(
            [Item(f"extra:{x}", f"extra {x}", frozenset({x}), name=x) for x in extras]
        )
    if others:
        out.conflicts.append(
            [
                Item(f"group:{g}", f"group {g}", groups=frozenset({g}), name=g, kind="group")
                for g in others
            ]
        )
    return out


def _marker(marker: str | None, requires_python: str | None) -> str | None:
    """The package's ``marker`` and its ``requires-python`` (PEP 751: where it installs at all),
    as one marker: ``python_full_version`` clauses joined to it."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if not requires_python:
        return marker
    try:
        specs = list(SpecifierSet(requires_python))
    except InvalidSpecifier:
        return marker
    clauses = [f"python_full_version {s.operator} '{s.version}'" for s in specs]
    if not clauses:
        return marker
    joined = " and ".join(clauses)
    return f"({marker}) and {joined}" if marker else joined
