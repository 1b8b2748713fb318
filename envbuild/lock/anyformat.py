"""The lockfiles ``check-lock FILE...`` reads, whatever wrote them: one model (``LockFile`` of ``Pkg``).

Formats (detected from the name and the content, or named with ``--format``):

- ``uv.lock``      uv's lock (TOML, ``[[package]]`` with ``dependencies`` by name; the
                   specifiers are in ``[package.metadata]`` only for the project's own packages);
- ``pylock``       PEP 751 ``pylock.toml`` / ``pylock.*.toml``, read and validated by
                   ``packaging.pylock`` (the reference implementation);
- ``requirements`` pip-compile / ``uv pip compile`` output, with or without ``--hash``; the
                   ``# via`` annotations name the packages that pulled a line in;
- ``poetry.lock``  Poetry's lock (TOML, ``[package.dependencies]`` with specifiers).

Requirement files are read line by line with ``packaging.requirements`` (continuations, comments,
``--hash``/``--index-url`` options, markers). pip-requirements-parser was considered: its last
release is from 2022 (it vendors pip 22's parser) and it keeps comments apart from the
requirement they annotate, so the ``# via`` annotations this check relies on would be lost.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

Format = Literal["uv.lock", "pylock", "requirements", "poetry.lock"]
FORMATS: tuple[str, ...] = get_args(Format)

# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Pkg:
    """One locked distribution, whatever the format."""

    name: str  # canonical
    version: str | None  # exact pin, None when not pinned exactly
    raw: str = ""  # as written (requirements: the requirement; others: name==version)
    line: int | None = None
    hashes: tuple[str, ...] = ()  # sha256 hex
    index: str | None = None  # where it comes from
    dependencies: tuple[str, ...] | None = None  # names it depends on (resolved); None: not recorded
    requires: tuple[str, ...] | None = None  # declared requirement strings; None: not recorded
    via: tuple[str, ...] | None = None  # requirements files: the packages that pulled it in
    wheels: tuple[tuple[str, str | None], ...] = ()  # (url, sha256) of artifacts the lock names


@dataclass
class LockFile:
    path: Path
    format: Format
    packages: list[Pkg]
    indexes: list[str] = field(default_factory=list)

    def named(self, name: str) -> list[Pkg]:
        return [p for p in self.packages if p.name == name]


class LockParseError(Exception):
    """The file is not a readable lock of its format (a finding, not a crash)."""


# ----------------------------------------------------------------------------- formats


def detect_format(path: Path, text: str) -> Format:
    name = path.name.lower()
    if name == "uv.lock":
        return "uv.lock"
    if name == "poetry.lock":
        return "poetry.lock"
    if re.fullmatch(r"pylock(\.[^.]+)?\.toml", name):
        return "pylock"
    if name.endswith((".txt", ".in")) or "requirements" in name:
        return "requirements"
    head = text[:4000]
    if re.search(r"^lock-version\s*=", head, re.M) and "[[packages]]" in text:
        return "pylock"
    if re.search(r"^version\s*=\s*1\s*$", head, re.M) and re.search(r"^requires-python\s*=", head, re.M) \
            and "[[package]]" in text:
        return "uv.lock"
    if "[metadata]" in text and "content-hash" in text and "[[package]]" in text:
        return "poetry.lock"
    if re.search(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*(==|@|>=|~=)", text, re.M):
        return "requirements"
    raise ConfigError(f"{path}: cannot tell which kind of lockfile this is",
                      hint=f"Name it with --format ({', '.join(FORMATS)}).")


def parse(path: Path, text: str, fmt: Format) -> LockFile:
    """Read a lock of ``fmt``; raises ``LockParseError`` with the reason when it is not one."""
    if fmt == "requirements":
        return _requirements(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockParseError(f"not valid TOML: {exc}") from None
    if fmt == "uv.lock":
        return _uv_lock(path, data)
    if fmt == "poetry.lock":
        return _poetry_lock(path, data)
    return _pylock(path, data)


def _exact(specifier: str) -> str | None:
    try:
        specs = list(SpecifierSet(specifier))
    except InvalidSpecifier:
        return None
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _sha(value: str | None) -> str | None:
    if value and value.startswith("sha256:"):
        return value[len("sha256:"):]
    return None


def _uv_lock(path: Path, data: dict[str, Any]) -> LockFile:
    packages = []
    for i, p in enumerate(data.get("package", [])):
        if not isinstance(p, dict) or "name" not in p:
            raise LockParseError(f"package[{i}] has no name")
        source = p.get("source", {}) if isinstance(p.get("source"), dict) else {}
        deps = [canonicalize_name(d["name"]) for d in p.get("dependencies", []) if isinstance(d, dict) and "name" in d]
        for extra_deps in (p.get("optional-dependencies") or {}).values():
            deps += [canonicalize_name(d["name"]) for d in extra_deps if isinstance(d, dict) and "name" in d]
        meta = p.get("metadata", {}) if isinstance(p.get("metadata"), dict) else {}
        requires = None
        if "requires-dist" in meta:
            requires = tuple(
                f"{r['name']}{r.get('specifier', '')}" + (f"; {r['marker']}" if r.get("marker") else "")
                for r in meta["requires-dist"] if isinstance(r, dict) and "name" in r)
        wheels = [(w.get("url"), _sha(w.get("hash"))) for w in p.get("wheels", []) if isinstance(w, dict)]
        if isinstance(p.get("sdist"), dict):
            wheels.append((p["sdist"].get("url"), _sha(p["sdist"].get("hash"))))
        version = p.get("version")
        packages.append(Pkg(
            name=canonicalize_name(p["name"]), version=str(version) if version is not None else None,
            raw=f"{p['name']}=={version}", hashes=tuple(h for _, h in wheels if h), index=source.get("registry"),
            dependencies=tuple(deps), requires=requires,
            wheels=tuple((u, h) for u, h in wheels if u)))
    indexes = sorted({p.index for p in packages if p.index})
    return LockFile(path, "uv.lock", packages, indexes)


def _poetry_lock(path: Path, data: dict[str, Any]) -> LockFile:
    packages = []
    for i, p in enumerate(data.get("package", [])):
        if not isinstance(p, dict) or "name" not in p:
            raise LockParseError(f"package[{i}] has no name")
        requires = []
        for dep, spec in (p.get("dependencies") or {}).items():
            for one in spec if isinstance(spec, list) else [spec]:
                if isinstance(one, str):
                    requires.append(_poetry_req(dep, one, None))
                elif isinstance(one, dict) and not one.get("optional"):
                    requires.append(_poetry_req(dep, str(one.get("version", "*")), one.get("markers")))
        source = p.get("source") if isinstance(p.get("source"), dict) else {}
        hashes = tuple(h for f in p.get("files", []) if isinstance(f, dict) and (h := _sha(f.get("hash"))))
        packages.append(Pkg(name=canonicalize_name(p["name"]), version=str(p.get("version")),
                            raw=f"{p['name']}=={p.get('version')}", hashes=hashes,
                            index=source.get("url") if source else None,
                            dependencies=tuple(canonicalize_name(d) for d in (p.get("dependencies") or {})),
                            requires=tuple(requires)))
    return LockFile(path, "poetry.lock", packages, sorted({p.index for p in packages if p.index}))


def _poetry_req(name: str, constraint: str, markers: str | None) -> str:
    """Poetry's constraint syntax (``^2.0``, ``~2.1``, ``2.*``, ``>=2.0,<3.0``, ``*``) as PEP 508."""
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


def _pylock(path: Path, data: dict[str, Any]) -> LockFile:
    from packaging.pylock import Pylock, PylockValidationError

    try:
        lock = Pylock.from_dict(data)
    except PylockValidationError as exc:
        raise LockParseError(f"not a valid PEP 751 lock: {exc}") from None
    packages = []
    for p in lock.packages:
        wheels = [(w.url or (str(w.path) if w.path else w.name or ""), w.hashes.get("sha256")) for w in p.wheels or ()]
        if p.sdist is not None:
            wheels.append((p.sdist.url or (str(p.sdist.path) if p.sdist.path else ""), p.sdist.hashes.get("sha256")))
        deps = None
        if p.dependencies is not None:
            deps = tuple(canonicalize_name(str(d.get("name"))) for d in p.dependencies if d.get("name"))
        packages.append(Pkg(name=canonicalize_name(p.name), version=str(p.version) if p.version else None,
                            raw=f"{p.name}=={p.version}" + (f"; {p.marker}" if p.marker else ""),
                            hashes=tuple(h for _, h in wheels if h), index=p.index,
                            dependencies=deps, wheels=tuple((u, h) for u, h in wheels if u)))
    return LockFile(path, "pylock", packages, sorted({p.index for p in packages if p.index}))


_HASH = re.compile(r"^--hash[= ](sha256):([0-9a-fA-F]{64})$")


def _logical_lines(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """(first line number, the line without comments, the comment lines that follow it)."""
    buf, start = "", 0
    out: list[tuple[int, str, list[str]]] = []
    for i, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            if out:
                out[-1][2].append(stripped[1:].strip())
            continue
        line = re.split(r"\s+#", raw, maxsplit=1)[0].rstrip()
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((start, buf.strip(), [re.split(r"\s+#", raw, maxsplit=1)[1].strip()] if " #" in raw else []))
        buf = ""
    if buf.strip():
        out.append((start, buf.strip(), []))
    yield from out


def _via(comments: list[str]) -> tuple[str, ...] | None:
    """pip-compile's ``# via a, b`` or ``# via`` followed by ``#   a`` lines."""
    names: list[str] = []
    found = False
    for c in comments:
        if c.startswith("via"):
            found = True
            rest = c[3:].strip()
            if rest and not rest.startswith("-"):  # "-r requirements.in", "--override x.txt": not packages
                names += [x for x in re.split(r"[,\s]+", rest) if x]
        elif found and c and not c.startswith("-"):
            names.append(c.split()[0])
    if not found:
        return None
    return tuple(canonicalize_name(n) for n in names if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", n))


def _requirements(path: Path, text: str) -> LockFile:
    packages: list[Pkg] = []
    indexes: list[str] = []
    for lineno, line, comments in _logical_lines(text):
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
            raise LockParseError(f"line {lineno}: not a valid requirement {raw!r}: {exc}") from None
        hashes = tuple(m.group(2).lower() for o in opts if (m := _HASH.match(o)))
        packages.append(Pkg(name=canonicalize_name(req.name), version=_exact(str(req.specifier)) if not req.url else None,
                            raw=raw, line=lineno, hashes=hashes, via=_via(comments)))
    return LockFile(path, "requirements", packages, indexes)


__all__ = ["FORMATS", "Format", "LockFile", "LockParseError", "Pkg", "detect_format", "parse"]
