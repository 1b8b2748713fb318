"""``check-lock``: prove that a lock cannot replace, downgrade or shadow the baseline torch.

Static rules (offline, milliseconds; metadata from lock.json or the metadata cache):

- ``stale-lock``        the lock was made from another spec (digest, step list), or a step file
                        changed after ``envbuild lock`` wrote it;
- ``missing-file`` / ``broken-lock`` / ``missing-hash`` / ``not-pinned``  file-level problems;
- ``protected-pin-mismatch``   torch or a protected package pinned to different versions in
                        different steps (or not to ``abi.version``);
- ``protected-after-baseline`` torch or a protected package in a step after the baseline;
- ``torch-requirement`` a locked package of a step with dependencies declares a requirement on
                        torch (or a protected package) that the pinned version does not satisfy;
- ``pypi-triton``       a locked package depends on PyPI ``triton`` (or the step locks it) while
                        the baseline's triton comes from another distribution (``pytorch-triton``);
- ``torch-downgrade`` / ``torch-swap``  with ``--base REF``: the lock at REF pins a newer torch
                        (or protected package), or the same version with another local tag.

- ``step-disagrees``    a later step pins a package an earlier step pinned, at another version, and its
                        spec does not say ``replaces = [NAME]`` (the lock refuses to write this);

With ``--online`` (``lock.online``): ``artifact-gone`` / ``artifact-changed``, a locked file that
left its index or changed its hash there (a pruned nightly), and whether the wheelhouse has it.

Dynamic rule (needs the step's index or wheelhouse; skipped with a notice under ``offline``):

- ``dry-run-protected`` ``pip install --dry-run --report`` of a step, into a venv that holds
                        stand-in dist-info for the locked baseline, would install a protected
                        package (or PyPI triton); ``dry-run-failed`` when it cannot resolve.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild._io import sha256_file
from envbuild.errors import LockError
from envbuild.index import cached_requires
from envbuild.lock.model import (
    MANIFEST,
    Lock,
    LockedPackage,
    LockedReq,
    lock_dir,
    lock_from_text,
    read_lock,
    read_step_file,
)
from envbuild.lock.report import (
    TRITON,
    CheckReport,
    Finding,
    StepView,
    file_at_ref,
    marker_env,
    protected_names,
)
from envbuild.lock.serve import stale_reason
from envbuild.spec import StackSpec
from envbuild.stepfile import line_problems


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    base: str | None = None  # a git ref whose lock the working tree is compared with
    offline: bool = False  # static rules only
    fetch_metadata: bool = True  # read missing metadata from the index (not under offline)
    online: bool = False  # every locked artifact still on its index with its hash (``lock.online``)
    wheelhouse: str | None = None  # where --online looks for what the index lost


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _applies(req: Requirement, env: dict[str, str], extras: set[str]) -> bool:
    if req.marker is None:
        return True
    try:
        return any(req.marker.evaluate({**env, "extra": e}) for e in ({""} | extras))
    except Exception:  # an unknown marker variable: count it (conservative)
        return True


def check_lock(spec: StackSpec, opts: CheckOptions | None = None) -> CheckReport:
    opts = opts or CheckOptions()
    t0 = time.monotonic()
    folder = lock_dir(spec)
    report = CheckReport(spec.name, folder)
    lock_json = _rel(folder / MANIFEST)
    try:
        manifest = read_lock(folder)
    except LockError as exc:
        report.findings.append(Finding(lock_json, "-", "broken-lock", exc.message))
        return _done(report, t0)
    if manifest is None:
        report.findings.append(Finding(lock_json, "-", "missing-file",
                                       f"no lock beside {_rel(spec.path)}; run `envbuild lock --stack {_rel(spec.path)}`"))
        return _done(report, t0)
    if reason := stale_reason(spec, manifest):
        report.findings.append(Finding(lock_json, "-", "stale-lock",
                                       f"{reason}; run `envbuild lock --stack {_rel(spec.path)}`"))
    views = _read_steps(spec, manifest, report)
    static_rules(spec, manifest, views, report, fetch=opts.fetch_metadata and not opts.offline)
    if opts.base:
        base_rules(spec, manifest, opts.base, report)
    if opts.online:
        from envbuild.lock.online import online_rules

        online_rules(spec, manifest, report, opts.wheelhouse)
    if opts.offline:
        report.notices.append("dry-run resolution skipped (--offline): only the static rules ran")
    else:
        from envbuild.lock.dryrun import dry_run_rules

        dry_run_rules(spec, manifest, views, report)
    return _done(report, t0)


def _done(report: CheckReport, t0: float) -> CheckReport:
    report.seconds = time.monotonic() - t0
    return report


def _read_steps(spec: StackSpec, manifest: Lock, report: CheckReport) -> list[StepView]:
    views = []
    spec_index = {s.name: i for i, s in enumerate(spec.steps)}
    for ls in manifest.steps:
        if not ls.locked:
            report.notices.append(f"step {ls.name!r} is not locked ({ls.reason}); "
                                  "it resolves from the spec")
            continue
        path = manifest.folder / (ls.file or "")
        shown = _rel(path)
        if not ls.file or not path.is_file():
            report.findings.append(Finding(shown, "-", "missing-file",
                                           f"the lock file of step {ls.name!r} is missing; run `envbuild lock`"))
            continue
        try:
            reqs = read_step_file(path, shown)
        except LockError as exc:
            report.findings.append(Finding(shown, "-", "broken-lock", exc.message))
            continue
        if sha256_file(path) != ls.file_sha256:
            report.findings.append(Finding(shown, "-", "stale-lock",
                                           f"changed after `envbuild lock` wrote it (sha256 differs from {MANIFEST})"))
        for problem in line_problems(reqs):
            report.findings.append(Finding(shown, problem.req.name, problem.rule,
                                           f"line {problem.req.line}: {problem.reason}"))
        idx = spec_index.get(ls.name, len(spec.steps))
        no_deps = spec.steps[idx].no_deps if idx < len(spec.steps) else ls.flags.no_deps
        views.append(StepView(idx, ls.name, shown, no_deps, reqs, {p.name: p for p in ls.packages}))
    return views


def static_rules(spec: StackSpec, manifest: Lock, views: list[StepView], report: CheckReport,
                 *, fetch: bool) -> None:
    abi = spec.abi
    protected = protected_names(spec, manifest)
    baseline = spec.baseline_index if spec.baseline_index is not None else -1

    def is_prot(n: str) -> bool:
        return n in protected or abi.is_protected(n)

    pins: dict[str, tuple[str, str]] = {}  # name -> (version, file) first seen
    if abi.adopt:
        pins[abi.package] = (abi.version, "abi.version")
    for v in views:
        for r in v.reqs:
            if not is_prot(r.name) or r.version is None:
                continue
            if r.name == abi.package and r.version != abi.version:
                report.findings.append(Finding(v.file, r.name, "protected-pin-mismatch",
                                               f"pinned to {r.version}, but abi.version is {abi.version}"))
            first = pins.setdefault(r.name, (r.version, v.file))
            if first[0] != r.version:
                report.findings.append(Finding(v.file, r.name, "protected-pin-mismatch",
                                               f"pinned to {r.version} here but to {first[0]} in {first[1]}"))
            if v.index > baseline:
                report.findings.append(Finding(
                    v.file, r.name, "protected-after-baseline",
                    f"{r.name} {r.version} is in step {v.name!r}, after the baseline; it is frozen once the "
                    "baseline step ran (leave it to the baseline, or make this step no_deps)"))
    _step_disagrees(spec, views, report, is_prot)
    torch_version = pins.get(abi.package, (abi.version, ""))[0]
    env = marker_env(spec)
    triton_foreign = bool(abi.triton_provider and abi.triton_provider != TRITON)
    missing_meta: list[str] = []
    seen: dict[str, tuple[str, str]] = {}  # name -> (version, file) locked by earlier steps
    for v in views:
        if v.index <= baseline:
            seen.update({r.name: (r.version, v.file) for r in v.reqs if r.version})
            continue
        extras: dict[str, set[str]] = {}
        if v.index < len(spec.steps):
            extras = {canonicalize_name(q.name): set(q.extras) for q in spec.steps[v.index].requirements}
        visible = dict(seen)
        visible.update({r.name: (r.version, v.file) for r in v.reqs if r.version})
        seen.update({r.name: (r.version, v.file) for r in v.reqs if r.version})
        for r in v.reqs:
            if r.name == TRITON and triton_foreign:
                report.findings.append(Finding(v.file, r.name, "pypi-triton",
                                               f"PyPI triton is locked while the baseline's triton comes from "
                                               f"{abi.triton_provider} (both own the `triton` module)"))
            if r.is_vcs or r.version is None:
                continue
            requires = _requires_for(r, v.packages.get(r.name), fetch, spec, v)
            if requires is None:
                missing_meta.append(f"{r.name} {r.version}")
                continue
            for raw in requires:
                try:
                    dep = Requirement(raw)
                except InvalidRequirement:
                    continue
                if not _applies(dep, env, extras.get(r.name, set())):
                    continue
                dn = canonicalize_name(dep.name)
                have = visible.get(dn)
                if have is not None and not is_prot(dn) and dep.specifier \
                        and not dep.specifier.contains(have[0], prereleases=True):
                    text = (f"{r.name} {r.version} requires {_req_text(dep)}, but {dn} {have[0]} is locked "
                            f"in {have[1]}")
                    if v.no_deps:
                        report.notices.append(f"{v.file}: {text} (no_deps step: left unmet)")
                    else:
                        report.findings.append(Finding(v.file, r.name, "unmet-requirement", text))
                if v.no_deps:
                    continue
                if dn == TRITON and triton_foreign:
                    report.findings.append(Finding(
                        v.file, r.name, "pypi-triton",
                        f"{r.name} {r.version} requires {_req_text(dep)} (PyPI triton), which installs next to "
                        f"{abi.triton_provider} from the baseline (both own the `triton` module)"))
                    continue
                pinned = torch_version if dn == abi.package else (pins[dn][0] if dn in pins else None)
                if pinned is None or not is_prot(dn) or not dep.specifier:
                    continue
                if not dep.specifier.contains(pinned, prereleases=True):
                    report.findings.append(Finding(
                        v.file, r.name, "torch-requirement",
                        f"{r.name} {r.version} requires {_req_text(dep)}, which the pinned {dn} {pinned} "
                        "does not satisfy (it would replace it; make the step no_deps or pin another version)"))
    if missing_meta:
        report.notices.append("metadata not available offline for: " + ", ".join(missing_meta)
                              + " (their torch/triton requirements were not checked; run without --offline)")


def _step_disagrees(spec: StackSpec, views: list[StepView], report: CheckReport, is_prot: Callable[[str], bool]) -> None:
    """A package pinned by an earlier step at another version, without ``replaces`` in the later step."""
    first: dict[str, tuple[str, str]] = {}  # name -> (version, step name) as installed so far
    for v in sorted(views, key=lambda v: v.index):
        replaces = spec.steps[v.index].replaces if v.index < len(spec.steps) else ()
        for r in v.reqs:
            if r.version is None or is_prot(r.name):
                continue
            prior = first.get(r.name)
            if prior is not None and prior[0] != r.version and r.name not in replaces:
                report.findings.append(Finding(
                    v.file, r.name, "step-disagrees",
                    f"pinned to {r.version} here, but step {prior[1]!r} installs {r.name} {prior[0]}; make the steps "
                    f"agree, or say replaces = [\"{r.name}\"] in step {v.name!r}"))
            first[r.name] = (r.version, v.name)


def _req_text(dep: Requirement) -> str:
    return f"{dep.name}{dep.specifier}" if dep.specifier else dep.name


def _requires_for(r: LockedReq, entry: LockedPackage | None, fetch: bool, spec: StackSpec,
                  view: StepView) -> list[str] | None:
    if entry is not None and entry.version == r.version and entry.requires_dist is not None \
            and set(r.hashes) & set(entry.hashes):
        return list(entry.requires_dist)
    got = cached_requires(r.hashes)
    if got is not None or not fetch:
        return got
    from envbuild.index import ArtifactFinder, requires_of
    from envbuild.lock.compile import step_sources

    if view.index >= len(spec.steps):
        return None
    sources, _ = step_sources(spec.steps[view.index], None)
    arts = ArtifactFinder(sources).matching(r.name, r.version or "", r.hashes)
    if not arts:
        return None
    return requires_of(next((a for a in arts if a.is_wheel), arts[0]))


# ----------------------------------------------------------------------------- --base REF


def base_rules(spec: StackSpec, manifest: Lock, ref: str, report: CheckReport) -> None:
    rel, text = file_at_ref(manifest.folder / MANIFEST, ref)
    if text is None:
        report.notices.append(f"--base {ref}: no lock at {rel} there; nothing to compare")
        return
    try:
        base = lock_from_text(Path(f"{ref}:{rel}"), text)
    except LockError as exc:
        report.findings.append(Finding(f"{ref}:{rel}", "-", "broken-lock", exc.message))
        return
    old, new = _protected_versions(base, spec), _protected_versions(manifest, spec)
    lock_json = _rel(manifest.path)
    for name, before in sorted(old.items()):
        after = new.get(name)
        if after is None or after == before:
            continue
        try:
            b, a = Version(before), Version(after)
        except InvalidVersion:
            continue
        if Version(b.public) > Version(a.public):
            report.findings.append(Finding(lock_json, name, "torch-downgrade",
                                           f"{name} {before} at {ref} -> {after} here: a downgrade"))
        elif b.public == a.public and b.local != a.local:
            report.findings.append(Finding(
                lock_json, name, "torch-swap",
                f"{name} {before} at {ref} -> {after} here: the same version with another local tag "
                f"({'+' + b.local if b.local else 'none'} -> {'+' + a.local if a.local else 'none'}), a swapped build"))


def _protected_versions(manifest: Lock, spec: StackSpec) -> dict[str, str]:
    protected = protected_names(spec, manifest)
    out: dict[str, str] = {}
    if manifest.abi is not None and manifest.abi.version:
        out[canonicalize_name(manifest.abi.package)] = manifest.abi.version
    for s in manifest.steps:
        for p in s.packages:
            n = canonicalize_name(p.name)
            if (n in protected or spec.abi.is_protected(n)) and p.version:
                if n == spec.abi.package:
                    out[n] = p.version
                else:
                    out.setdefault(n, p.version)
    return out


__all__ = ["CheckOptions", "CheckReport", "Finding", "check_lock", "marker_env"]
