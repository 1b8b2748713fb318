"""``check-lock FILE...``: the torch policy applied to any lockfile a team keeps beside its code.

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

Rules (one finding per problem; any finding fails the gate with exit 8):

- ``torch-pins``         torch pinned more than once (two versions) or not to one exact version;
- ``torch-min``          the pinned torch is below ``--torch-min`` (or the stack's torch);
- ``torch-downgrade`` / ``torch-swap``  with ``--base REF``: the same file at REF pins a newer
                         torch, or the same version with another local tag (also for ``--protect``);
- ``torch-local``        the pinned torch's local tag is not ``--torch-local`` (e.g. ``cu132``);
- ``pypi-triton``        PyPI ``triton`` locked beside ``pytorch-triton`` (both own ``triton/``);
- ``protected-pins``     a ``--protect`` package pinned more than once;
- ``torch-requirement``  a locked package declares a requirement on torch (or a protected
                         package) that the pinned version does not satisfy. The declared
                         specifiers come from the lock where it records them (poetry.lock, uv.lock
                         for the project's own packages), else from the package's metadata on its
                         index (``envbuild.index``, cached by sha256); ``offline`` says which
                         packages it could not check.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild import events
from envbuild.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

Format = Literal["uv.lock", "pylock", "requirements", "poetry.lock"]
FORMATS: tuple[str, ...] = get_args(Format)
PYPI = "https://pypi.org/simple"
TRITON, PYTORCH_TRITON = "triton", "pytorch-triton"


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


@dataclass(frozen=True, kw_only=True)
class Policy:
    package: str = "torch"
    minimum: str | None = None  # --torch-min, or the stack's abi.version
    local: str | None = None  # --torch-local, or the stack's abi.local
    protect: tuple[str, ...] = ()
    python: str = f"{sys.version_info[0]}.{sys.version_info[1]}"  # markers are evaluated for it, on Linux x86_64

    @property
    def protected(self) -> set[str]:
        return {canonicalize_name(self.package), *(canonicalize_name(n) for n in self.protect)}


@dataclass(frozen=True)
class Finding:
    file: str
    package: str
    rule: str
    reason: str

    def line(self) -> str:
        return f"{self.file}: {self.package}: {self.reason} [{self.rule}]"


@dataclass
class FileReport:
    file: str
    format: str
    torch: str | None = None
    findings: list[Finding] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # packages whose torch requirement could not be read
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, package: str, rule: str, reason: str) -> None:
        self.findings.append(Finding(self.file, package, rule, reason))

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "format": self.format, "ok": self.ok, "torch": self.torch,
                "findings": [asdict(f) for f in self.findings], "notices": self.notices,
                "unchecked": self.unchecked, "seconds": round(self.seconds, 4)}


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


# ----------------------------------------------------------------------------- the rules


def _marker_env(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": python + ".0", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "platform_python_implementation": "CPython", "implementation_name": "cpython",
            "implementation_version": python + ".0", "platform_release": "", "platform_version": "",
            "extra": ""}


def _applies(req: Requirement, python: str) -> bool:
    if req.marker is None:
        return True
    try:
        return bool(req.marker.evaluate(_marker_env(python)))
    except Exception:  # noqa: BLE001 - an unknown marker variable: count the requirement
        return True


def _marker_applies(raw: str, python: str) -> bool:
    if ";" not in raw:
        return True
    try:
        return bool(Marker(raw.split(";", 1)[1]).evaluate(_marker_env(python)))
    except (InvalidMarker, Exception):  # noqa: BLE001
        return True


def _public(v: str) -> Version | None:
    try:
        return Version(Version(v).public)
    except InvalidVersion:
        return None


def _local(v: str) -> str | None:
    try:
        return Version(v).local
    except InvalidVersion:
        return None


def _pins(lock: LockFile, name: str, policy: Policy) -> list[Pkg]:
    return [p for p in lock.named(name) if _marker_applies(p.raw, policy.python)]


def check_file(path: Path, policy: Policy, *, fmt: Format | None = None, base: str | None = None,
               offline: bool = False, index_urls: Iterable[str] = (), shown: str | None = None) -> FileReport:
    t0 = time.monotonic()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such lockfile") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None
    kind = fmt or detect_format(path, text)
    report = FileReport(shown or str(path), kind)
    try:
        lock = parse(path, text, kind)
    except LockParseError as exc:
        report.add("-", "broken-lock", f"not a readable {kind} file: {exc}")
        report.seconds = time.monotonic() - t0
        return report
    torch_name = canonicalize_name(policy.package)
    torch = _torch_rules(lock, policy, report)
    report.torch = torch
    for name in sorted(policy.protected - {torch_name}):
        versions = sorted({p.version or p.raw for p in _pins(lock, name, policy)})
        if len(versions) > 1:
            report.add(name, "protected-pins", f"pinned {len(versions)} times: {', '.join(versions)}")
    names = {p.name for p in lock.packages}
    if TRITON in names and PYTORCH_TRITON in names:
        triton = lock.named(TRITON)[0]
        report.add(TRITON, "pypi-triton", f"PyPI triton {triton.version or ''} is locked beside pytorch-triton "
                   "(both own the `triton` module; the one installed last wins)".replace("  ", " "))
    if base:
        _base_rules(path, kind, base, lock, policy, report)
    if torch is not None:
        _requirement_rules(lock, policy, torch, report, offline=offline, index_urls=tuple(index_urls))
    report.seconds = time.monotonic() - t0
    return report


def _torch_rules(lock: LockFile, policy: Policy, report: FileReport) -> str | None:
    name = canonicalize_name(policy.package)
    pins = _pins(lock, name, policy)
    if not pins:
        report.notices.append(f"{name} is not in this lock; its version rules did not apply")
        return None
    loose = [p for p in pins if p.version is None]
    for p in loose:
        report.add(name, "torch-pins", f"`{p.raw}`" + (f" (line {p.line})" if p.line else "")
                   + " is not pinned to one exact version (==)")
    versions = sorted({p.version for p in pins if p.version})
    if len(versions) > 1:
        report.add(name, "torch-pins", f"pinned {len(versions)} times, to {', '.join(versions)}: one torch per lock")
    if not versions:
        return None
    torch = versions[0]
    if policy.minimum:
        have, floor = _public(torch), _public(policy.minimum)
        if have is not None and floor is not None and have < floor:
            report.add(name, "torch-min", f"{name} {torch} is below the minimum {policy.minimum}")
    tag = _local(torch)
    if policy.local and tag != policy.local:
        report.add(name, "torch-local", f"{name} {torch} has local tag {'+' + tag if tag else 'none'}, "
                   f"the policy wants +{policy.local}")
    return torch


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)


def _base_rules(path: Path, kind: Format, ref: str, lock: LockFile, policy: Policy, report: FileReport) -> None:
    folder = path.resolve().parent
    top = _git(["rev-parse", "--show-toplevel"], folder)
    if top.returncode != 0:
        raise ConfigError(f"--base {ref}: {path} is not inside a git repository")
    if _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], folder).returncode != 0:
        raise ConfigError(f"--base {ref}: no such git revision", hint="Fetch it first (CI: fetch-depth: 0), "
                          "or name a branch, tag or commit that exists.")
    rel = path.resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
    shown = _git(["show", f"{ref}:{rel}"], folder)
    if shown.returncode != 0:
        report.notices.append(f"--base {ref}: {rel} does not exist there; nothing to compare")
        return
    try:
        old = parse(Path(f"{ref}:{rel}"), shown.stdout, kind)
    except LockParseError as exc:
        report.notices.append(f"--base {ref}: {rel} there is not readable ({exc}); nothing to compare")
        return
    for name in sorted(policy.protected):
        before = sorted({p.version for p in _pins(old, name, policy) if p.version})
        after = sorted({p.version for p in _pins(lock, name, policy) if p.version})
        if len(before) != 1 or len(after) != 1 or before == after:
            continue
        b, a = before[0], after[0]
        pb, pa = _public(b), _public(a)
        if pb is None or pa is None:
            continue
        if pb > pa:
            report.add(name, "torch-downgrade", f"{name} {b} at {ref} -> {a} here: a downgrade")
        elif pb == pa and _local(b) != _local(a):
            report.add(name, "torch-swap", f"{name} {b} at {ref} -> {a} here: the same version with another local "
                       "tag, a swapped build")


def _requirement_rules(lock: LockFile, policy: Policy, torch: str, report: FileReport, *, offline: bool,
                       index_urls: tuple[str, ...]) -> None:
    protected = policy.protected
    pinned = {p.name: p.version for p in lock.packages if p.name in protected and p.version}
    pinned[canonicalize_name(policy.package)] = torch
    dependents = _dependents(lock, protected)
    for pkg in lock.packages:
        if pkg.name in protected or (dependents is not None and pkg.name not in dependents):
            continue
        requires = pkg.requires
        if requires is None and pkg.hashes:
            from envbuild.index import cached_requires

            cached = cached_requires(pkg.hashes)  # read before, by sha256: local, offline too
            requires = tuple(cached) if cached is not None else None
        if requires is None and pkg.version is not None and not offline:
            requires = _index_requires(pkg, lock, index_urls)
        if requires is None:
            if dependents is not None or pkg.version is not None:
                report.unchecked.append(f"{pkg.name} {pkg.version or ''}".strip())
            continue
        for raw in requires:
            try:
                dep = Requirement(raw)
            except InvalidRequirement:
                continue
            dn = canonicalize_name(dep.name)
            if dn not in pinned or not dep.specifier or not _applies(dep, policy.python):
                continue
            if not dep.specifier.contains(pinned[dn], prereleases=True):
                report.add(pkg.name, "torch-requirement",
                           f"{pkg.name} {pkg.version} requires {dep.name}{dep.specifier}, which the pinned "
                           f"{dn} {pinned[dn]} does not satisfy (installing it would replace {dn})")
    if report.unchecked:
        why = "--offline" if offline else "no metadata in the lock or on its index"
        shown = ", ".join(report.unchecked[:12]) + (f" and {len(report.unchecked) - 12} more"
                                                     if len(report.unchecked) > 12 else "")
        report.notices.append(f"could not check the torch requirement of {len(report.unchecked)} package(s) "
                              f"({why}): {shown}")


def _dependents(lock: LockFile, protected: set[str]) -> set[str] | None:
    """Names of the packages that depend on torch or a protected package, from the lock; None: unknown."""
    if lock.format == "requirements":
        vias = [p.via for p in lock.packages if p.name in protected]
        if vias and all(v is not None for v in vias):
            return {n for v in vias for n in (v or ())}
        return None
    if all(p.dependencies is not None for p in lock.packages):
        return {p.name for p in lock.packages if set(p.dependencies or ()) & protected}
    return None


def _index_requires(pkg: Pkg, lock: LockFile, index_urls: tuple[str, ...]) -> tuple[str, ...] | None:
    """Requires-Dist of the locked artifact, read from the index it came from (cached by sha256)."""
    from envbuild.errors import EnvbuildError
    from envbuild.index import Artifact, ArtifactFinder, Sources, cached_requires, requires_of

    got = cached_requires(pkg.hashes)
    if got is not None:
        return tuple(got)
    events.emit("debug", f"reading the metadata of {pkg.name} {pkg.version} from its index")
    try:
        named = [(u, h) for u, h in pkg.wheels if u.startswith(("http://", "https://", "file:"))]
        if named:
            url, sha = next(((u, h) for u, h in named if u.split("?")[0].endswith(".whl")), named[0])
            return tuple(requires_of(Artifact(url.rsplit("/", 1)[-1].split("#")[0], url, sha)))
        indexes = tuple(dict.fromkeys([x for x in (pkg.index, *index_urls, *lock.indexes) if x] or [PYPI]))
        finder = ArtifactFinder(Sources(index_urls=indexes))
        arts = finder.matching(pkg.name, pkg.version or "", pkg.hashes) if pkg.hashes else \
            finder.matching_all(pkg.name, pkg.version or "")
        if not arts:
            return None
        return tuple(requires_of(next((a for a in arts if a.is_wheel), arts[0])))
    except (EnvbuildError, OSError, ValueError):
        return None


def check_files(paths: Iterable[Path], policy: Policy, **kwargs: Any) -> list[FileReport]:
    return [check_file(p, policy, **kwargs) for p in paths]


def policy_from_spec(spec: Any) -> Policy:
    """The torch policy of a stack spec: its torch as the floor, its local tag, its protected set."""
    abi = spec.abi
    return Policy(package=abi.package, minimum=abi.version, local=abi.local,
                  protect=tuple(abi.protect), python=spec.python)


def markdown(reports: list[FileReport]) -> str:
    """A pull-request comment: a table of the files, then every finding and notice."""
    failed = [r for r in reports if not r.ok]
    lines = [f"### envbuild check-lock: {'❌ ' + str(sum(len(r.findings) for r in failed)) + ' finding(s)' if failed else '✅ ok'}",
             "", "| file | format | torch | result |", "|---|---|---|---|"]
    for r in reports:
        lines.append(f"| `{r.file}` | {r.format} | {r.torch or '-'} | "
                     f"{'ok' if r.ok else str(len(r.findings)) + ' finding(s)'} |")
    for r in reports:
        for f in r.findings:
            lines.append(f"- **{f.rule}** `{f.file}`: {f.package}: {f.reason}")
    notes = [f"- `{r.file}`: {n}" for r in reports for n in r.notices]
    if notes:
        lines += ["", "<details><summary>notes</summary>", "", *notes, "", "</details>"]
    return "\n".join(lines) + "\n"


__all__ = ["FORMATS", "FileReport", "Finding", "Format", "LockFile", "Pkg", "Policy", "check_file",
           "check_files", "detect_format", "markdown", "parse", "policy_from_spec"]
