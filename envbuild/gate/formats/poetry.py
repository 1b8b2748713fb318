"""poetry.lock: entries with their declared dependency specifiers, and where each applies.

Poetry 2 writes ``markers`` on every entry (lock format 2.1: the union of the conditions under
which the entry is needed; a table per group when they differ). An environment installs the
entries whose markers hold there, every group included. A lock without them (Poetry 1) cannot say
which of two entries of a name an environment gets; the report says so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild.gate.formats._common import entry_lines, sha, toml_loads
from envbuild.gate.model import Entry, LockParseError, ParsedLock

__all__ = ["parse", "poetry_requirement"]


def parse(path: Path, text: str) -> ParsedLock:
    data = toml_loads(text)
    lines = text.splitlines()
    headers = entry_lines(lines, "[[package]]")
    entries: list[Entry] = []
    markers_seen: list[str] = []
    packages = data.get("package", []) or []
    if not isinstance(packages, list):
        raise LockParseError("`package` is not an array of tables")
    for i, p in enumerate(packages):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise LockParseError(f"package[{i}] has no name")
        for key, kind in (("files", list), ("dependencies", dict), ("source", dict)):
            if key in p and not isinstance(p[key], kind):
                raise LockParseError(
                    f"package[{i}] ({p['name']}): `{key}` is a {type(p[key]).__name__}, where "
                    f"Poetry writes {'an array' if kind is list else 'a table'}"
                )
        requires = []
        declared: dict[str, Any] = (
            p["dependencies"] if isinstance(p.get("dependencies"), dict) else {}
        )
        for dep, spec in declared.items():
            for one in spec if isinstance(spec, list) else [spec]:
                if isinstance(one, str):
                    requires.append(poetry_requirement(dep, one, None))
                elif isinstance(one, dict) and not one.get("optional"):
                    requires.append(
                        poetry_requirement(dep, str(one.get("version", "*")), one.get("markers"))
                    )
                    if isinstance(one.get("markers"), str):
                        markers_seen.append(one["markers"])
        source: dict[str, Any] = p["source"] if isinstance(p.get("source"), dict) else {}
        files = [
            (str(f.get("file") or ""), sha(f.get("hash")))
            for f in p.get("files", []) or []
            if isinstance(f, dict)
        ]
        url = source.get("url") if source.get("type") in ("url", "file") else None
        marker = _marker(p.get("markers"))
        if marker:
            markers_seen.append(marker)
        version = str(p.get("version")) if p.get("version") is not None else None
        entries.append(
            Entry(
                key=i,
                name=canonicalize_name(p["name"]),
                version=version,
                raw=f"{p['name']}=={version}" if version is not None else p["name"],
                line=headers[i] if i < len(headers) else None,
                hashes=tuple(h for _, h in files if h),
                index=source.get("url") if source.get("type") == "legacy" else None,
                url=url,
                files=(
                    tuple((url or f, h) for f, h in files if f)
                    if url is None
                    else ((url, files[0][1] if files else None),)
                ),
                requires=tuple(requires),
                dependencies=tuple(canonicalize_name(d) for d in declared),
                marker=marker,
            )
        )
    names = [e.name for e in entries]
    unmarked_twice = any(names.count(e.name) > 1 and not e.marker for e in entries)
    meta: dict[str, Any] = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
    lock = ParsedLock(
        path,
        "poetry.lock",
        entries,
        sorted({e.index for e in entries if e.index}),
        requires_python=_python(meta.get("python-versions")),
        marker_texts=markers_seen,
    )
    if unmarked_twice:
        lock.notes.append(
            "poetry.lock holds a package twice without per-entry markers (a Poetry 1 lock): both"
            " entries are counted in every environment; `poetry lock` with Poetry 2 records them"
        )
    return lock


def _marker(value: Any) -> str | None:
    if isinstance(value, str):
        return value or None
    if isinstance(value, dict):  # per group: installed where any of them holds
        parts = [f"({v})" for v in value.values() if isinstance(v, str) and v]
        return " or ".join(parts) if parts and len(parts) == len(value) else None
    return None


def _python(value: Any) -> str | None:
    if not isinstance(value, str) or value.strip() in ("", "*"):
        return None
    req = poetry_requirement("python", value, None)
    return req[len("python") :] or None


def poetry_requirement(name: str, constraint: str, markers: str | None) -> str:
    """Poetry's constraint syntax (``^2.0``, ``~2.1``, ``2.*``, ``>=2.0,<3.0``, ``*``) as PEP
    508."""
    parts = []
    for c in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", constraint.strip()):
        if not c or c == "*":
            continue
        if c.startswith("^") or (c.startswith("~") and not c.startswith("~=")):
            base = c[1:].lstrip("=")
            nums = [int(x) for x in re.findall(r"\d+", base.split("+")[0])[:3]] or [0]
            if c.startswith("^"):
                first = next((k for k, n in enumerate(nums) if n), len(nums) - 1)
                upper = nums[:first] + [nums[first] + 1]
            else:
                upper = [nums[0], nums[1] + 1] if len(nums) > 1 else [nums[0] + 1]
            parts += [f">={base}", "<" + ".".join(map(str, upper))]
        elif c[0].isdigit():
            parts.append(f"=={c}")
        else:
            parts.append(c)
    text = name + ",".join(parts)
    return f"{text}; {markers}" if markers else text
