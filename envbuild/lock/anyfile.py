"""``check-lock FILE...``: the torch policy applied to any lockfile a team keeps beside its code.

The files are read by ``envbuild.lock.anyformat`` (uv.lock, PEP 751 pylock.toml, pip-compile /
``uv pip compile`` requirements with or without hashes, poetry.lock; detected, or ``--format``).

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

import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild import events
from envbuild.errors import ConfigError
from envbuild.lock.anyformat import (
    FORMATS,
    Format,
    LockFile,
    LockParseError,
    Pkg,
    detect_format,
    parse,
)
from envbuild.lock.report import Finding, file_at_ref

PYPI = "https://pypi.org/simple"
TRITON, PYTORCH_TRITON = "triton", "pytorch-triton"


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


def _base_rules(path: Path, kind: Format, ref: str, lock: LockFile, policy: Policy, report: FileReport) -> None:
    rel, text = file_at_ref(path, ref)
    if text is None:
        report.notices.append(f"--base {ref}: {rel} does not exist there; nothing to compare")
        return
    try:
        old = parse(Path(f"{ref}:{rel}"), text, kind)
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
