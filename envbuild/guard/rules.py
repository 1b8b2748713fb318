"""The guard's rules: what departs from the baseline after a step (``check``), who in the step
caused it (``culprits``), a ``--no-deps`` step's unmet requirements, and the final ``import torch``
check (``FULL_CHECK``). The rules themselves are listed in the package's docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.guard.baseline import Baseline
from envbuild.guard.buildrecord import provenance_mismatch, read_provenance
from envbuild.guard.site import (
    Dist,
    active_requirements,
    changed,
    files_differ,
    read_cuda,
    read_runtime_version,
    record_hash,
    scan,
    shared_files,
)
from envbuild.spec import StackSpec


@dataclass(frozen=True)
class Violation:
    """One way the environment departs from its baseline (a warning unless ``--strict``, or one
    that breaks the baseline): the guard rule, the package it names, and what happened."""

    # "version", "local", "cuda", "reinstalled", "protected", "triton", "overlap", "provenance",
    # "unmet"
    rule: str
    package: str
    message: str


@dataclass
class GuardReport:
    violations: list[Violation] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def check(
    spec: StackSpec,
    baseline: Baseline,
    site: Path,
    *,
    before: Mapping[str, Dist] | None = None,
    no_deps_names: Iterable[str] = (),
    marker_env: Mapping[str, str] | None = None,
    keep: Path | None = None,
) -> GuardReport:
    """Compare the environment in ``site`` with ``baseline``. ``before``: the scan before the
    step. ``keep``: a JSON file of the caller's where the files the distributions share are kept
    under their RECORDs' identities (``site.shared_files``)."""
    import time

    t0 = time.perf_counter()
    abi = spec.abi
    report = GuardReport()
    dists = scan(site)
    v, w = report.violations, report.warnings
    torch = dists.get(abi.package)
    if torch is None:
        v.append(
            Violation("version", abi.package, f"{abi.package} {baseline.version} was uninstalled")
        )
    else:
        _check_torch(spec, baseline, site, torch, v)
    _check_protected(baseline, dists, site, v)
    _check_files(spec, dists, site, v, keep)
    runtime_version = (
        (read_runtime_version(site, abi.package.replace("-", "_")) or torch.version)
        if torch
        else None
    )
    _check_provenance(dists, runtime_version, v)
    if no_deps_names:
        for f in unmet_requirements(dists, no_deps_names, marker_env or {}):
            w.append(f)
    report.seconds = time.perf_counter() - t0
    return report


def _check_torch(
    spec: StackSpec, baseline: Baseline, site: Path, torch: Dist, v: list[Violation]
) -> None:
    """The installed torch against the baseline: its version (metadata and at run time), its
    files' identity, its local tag and its CUDA."""
    abi = spec.abi
    module = abi.package.replace("-", "_")
    runtime = read_runtime_version(site, module) or torch.version
    if torch.version != (baseline.dist_version or baseline.version) or runtime != baseline.version:
        v.append(
            Violation(
                "version", abi.package, f"{abi.package} changed: {baseline.version} -> {runtime}"
            )
        )
    else:
        pin = {
            "record_sha256": baseline.record_sha256,
            "payload_sha256": baseline.payload_sha256,
            "stamped": baseline.stamped,
            "record_key": list(baseline.record_key),
        }
        problem = _identity_problem(torch, pin, site)
        if problem:
            v.append(
                Violation(problem[0], abi.package, f"{abi.package} {torch.version} {problem[1]}")
            )
    if abi.local and abi.local not in runtime:
        v.append(
            Violation(
                "local", abi.package, f"{abi.package} {runtime} lacks the local tag {abi.local!r}"
            )
        )
    cuda = read_cuda(site, module)
    if abi.cuda and cuda != abi.cuda:
        v.append(
            Violation(
                "cuda",
                abi.package,
                f"{abi.package}.version.cuda is {cuda!r}, expected {abi.cuda!r}",
            )
        )


def _check_protected(
    baseline: Baseline, dists: Mapping[str, Dist], site: Path, v: list[Violation]
) -> None:
    """Each protected package of the baseline: still there, at its version, with its files."""
    for name, pin in baseline.protected.items():
        d = dists.get(name)
        if d is None:
            v.append(
                Violation("protected", name, f"protected {name} {pin['version']} was uninstalled")
            )
        elif d.version != pin["version"]:
            v.append(
                Violation(
                    "protected", name, f"protected {name} changed: {pin['version']} -> {d.version}"
                )
            )
        else:
            problem = _identity_problem(d, pin, site)
            if problem:
                v.append(Violation("protected", name, f"protected {name} {d.version} {problem[1]}"))


def _identity_problem(d: Dist, pin: Mapping[str, Any], site: Path) -> tuple[str, str] | None:
    """How ``d`` (at the pinned version) differs from its frozen identity ``pin``, as (rule,
    text)."""
    if d.record_sha256 != pin.get("record_sha256") or (pin.get("stamped") and not d.stamped):
        by = f" by {d.installer()}" if d.installer() else ""
        why = (
            "the baseline stamp envbuild listed in its RECORD is gone"
            if pin.get("stamped")
            else "its RECORD changed"
        )
        if pin.get("payload_sha256") and d.payload_sha256() == pin["payload_sha256"]:
            return (
                "reinstalled",
                f"was reinstalled{by} (same version, same files, rewritten: {why})",
            )
        if pin.get("payload_sha256") or not pin.get("stamped"):
            return (
                "reinstalled",
                f"was replaced{by} by a different build of the same version (RECORD changed)",
            )
        return "reinstalled", f"was reinstalled{by} (same version; {why})"
    if tuple(pin.get("record_key") or ()) == tuple(d.record_key):
        return None  # the very RECORD file the baseline read: nothing was copied, nothing to check
    bad = files_differ(d, site)
    if bad:
        return (
            "modified",
            (
                f"has {len(bad)} file(s) that differ from its RECORD ({', '.join(bad[:3])}"
                f"{', ...' if len(bad) > 3 else ''}): changed after it was installed"
            ),
        )
    return None


def _check_files(
    spec: StackSpec,
    dists: Mapping[str, Dist],
    site: Path,
    v: list[Violation],
    keep: Path | None = None,
) -> None:
    abi = spec.abi
    shared = shared_files(dists, keep)
    triton_owners = set(shared.triton)
    if abi.triton_provider:
        extra = sorted(triton_owners - {abi.triton_provider})
        if extra:
            v.append(
                Violation(
                    "triton",
                    extra[0],
                    f"{', '.join(extra)} installed a second `triton` module next to"
                    f" {abi.triton_provider} (same import name: its files overwrite"
                    f" {abi.triton_provider}'s)",
                )
            )
    elif len(triton_owners) > 1:
        names = sorted(triton_owners)
        v.append(
            Violation("triton", names[-1], f"{', '.join(names)} all provide the `triton` module")
        )
    acknowledged = {frozenset(o.packages): o.winner for o in abi.overlaps}
    reported: set[frozenset[str]] = set()
    for path, rows in shared.owners.items():
        names = [n for n, _ in rows]
        hashes = {n: h for n, h in rows}
        group = frozenset(names)
        if group & triton_owners and path.startswith("triton/"):
            continue  # reported by the triton rule
        same = set(hashes.values())
        if len(same) == 1 and next(iter(same)).startswith("sha256="):
            # the same bytes from each (a namespace package's nvidia/__init__.py): nothing is
            # overwritten
            continue
        winner = next((w for g, w in acknowledged.items() if group <= g), None)
        if winner is None:
            if group not in reported:
                reported.add(group)
                v.append(
                    Violation(
                        "overlap",
                        sorted(names)[-1],
                        f"{' and '.join(sorted(names))} both own {path} (and maybe more files); "
                        "acknowledge it with [[abi.overlap]] packages/winner, or drop one",
                    )
                )
            continue
        expected = hashes.get(winner, "")
        if expected.startswith("sha256=") and (site / path).is_file():
            actual = record_hash(site / path)
            if actual != expected and group not in reported:
                reported.add(group)
                loser = next(n for n in names if n != winner)
                v.append(
                    Violation(
                        "overlap",
                        loser,
                        f"{path} on disk is not {winner}'s copy (acknowledged overlap of"
                        f" {', '.join(sorted(names))}): {loser} was installed after {winner};"
                        f" install {winner} last",
                    )
                )


def _check_provenance(
    dists: Mapping[str, Dist], torch_version: str | None, v: list[Violation]
) -> None:
    for name, d in dists.items():
        prov = read_provenance(d.dist_info)
        if prov is None:
            _check_abi_tag(name, d, torch_version, v)
            continue
        problem = provenance_mismatch(prov, torch_version)
        if problem:
            v.append(Violation("provenance", name, f"{name} {d.version}: {problem}"))


def _check_abi_tag(name: str, d: Dist, torch_version: str | None, v: list[Violation]) -> None:
    """A prebuilt extension without envbuild's provenance record (a release wheel: flash-attn
    ``+cu12torch2.10cxx11abiTRUE``) checked by the ABI claim in its local version, with the same
    parser and rules as ``check-lock``'s ``extension-abi`` (``envbuild.abitag``)."""
    if torch_version is None or "+" not in d.version:
        return
    from envbuild.abitag import mismatches, parse_claim, torch_build

    claim = parse_claim(d.version)
    if claim is None:
        return
    for m in mismatches(claim, torch_build(torch_version), "linux"):
        v.append(
            Violation(
                "provenance",
                name,
                f"{name} {d.version} is {m.message}: it will fail to import "
                "(undefined symbol); install the wheel built for the installed torch",
            )
        )


def unmet_requirements(
    dists: Mapping[str, Dist], names: Iterable[str], env: Mapping[str, str]
) -> list[Violation]:
    out: list[Violation] = []
    for name in names:
        d = dists.get(canonicalize_name(name))
        if d is None:
            continue
        for req in active_requirements(d, env):
            dep = dists.get(canonicalize_name(req.name))
            if dep is None:
                out.append(
                    Violation(
                        "unmet",
                        d.name,
                        f"{d.name} {d.version} requires {req}, which is not installed",
                    )
                )
                continue
            try:
                ok = req.specifier.contains(Version(dep.version), prereleases=True)
            except InvalidVersion:
                ok = True
            if not ok:
                out.append(
                    Violation(
                        "unmet",
                        d.name,
                        f"{d.name} {d.version} requires {req}, but {dep.name} {dep.version} is"
                        " installed",
                    )
                )
    return out


def requirers(dists: Mapping[str, Dist], target: str, among: Iterable[str]) -> list[str]:
    """Which of ``among`` (e.g. what a step installed or changed) declare a requirement on
    ``target``."""
    target = canonicalize_name(target)
    out = []
    for name in among:
        d = dists.get(canonicalize_name(name))
        if d is None or d.name == target:
            continue
        for raw in d.requires():
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) == target:
                out.append(f"{d.name} {d.version} (requires {req})")
                break
    return out


def culprits(
    finding: Violation,
    before: Mapping[str, Dist],
    after: Mapping[str, Dist],
    step_names: Iterable[str],
) -> list[str]:
    """Report lines saying who, in the step between ``before`` and ``after``, caused ``finding``.

    A package that changed the ABI package or a protected one during the step is named with the
    requirement that pulled it in. If the package did not change during the step at all, nothing
    in the step is blamed: it already differed from the baseline when the step began."""
    if finding.rule == "overlap":
        return []
    touched = changed(before, after)
    target = canonicalize_name(finding.package)
    if finding.rule in ("version", "reinstalled", "protected") and target not in touched:
        return [
            f"  not this step: {target} was already like this when the step began "
            "(changed outside envbuild, by hand or between steps)"
        ]
    found = requirers(after, target, [*step_names, *touched])
    if found:
        return [f"  pulled in by: {'; '.join(dict.fromkeys(found))}"]
    if finding.rule == "unmet":
        return []
    return [f"  installed or changed by this step: {', '.join(touched or list(step_names))}"]


FULL_CHECK = (
    "import json, torch\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
    "'file': torch.__file__}))\n"
)
# The same, plus the source files the import loaded (what the import warm-up compiles next time).
FULL_CHECK_MODULES = (
    "import json, sys, torch\n"
    "mods = sorted({f for m in list(sys.modules.values()) for f in [getattr(m, '__file__', None)] "
    "if isinstance(f, str) and f.endswith('.py')})\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
    "'file': torch.__file__, 'modules': mods}))\n"
)


def full_check_result(spec: StackSpec, data: Mapping[str, Any]) -> list[Violation]:
    """Interpret the output of FULL_CHECK run by the venv's python."""
    abi = spec.abi
    out: list[Violation] = []
    if not abi.is_version(str(data.get("version"))):
        out.append(
            Violation(
                "version",
                abi.package,
                f"import {abi.package} gives {data.get('version')}, expected {abi.version}",
            )
        )
    if abi.local and abi.local not in str(data.get("version")):
        out.append(
            Violation(
                "local",
                abi.package,
                f"import {abi.package} gives {data.get('version')}, without {abi.local!r}",
            )
        )
    if abi.cuda and data.get("cuda") != abi.cuda:
        out.append(
            Violation(
                "cuda",
                abi.package,
                f"torch.version.cuda is {data.get('cuda')!r}, expected {abi.cuda!r}",
            )
        )
    return out
