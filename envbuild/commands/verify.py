"""``envbuild verify``: the ABI guard and the full import check on an existing environment.

Beside the import it reads the environment's files (``proof.receipt.inventory``): a file of torch
or its protected set whose bytes on disk are not the ones its RECORD lists is a violation too (the
guard reads metadata only, and an edit in place leaves RECORD as it was). Under a data root that
envbuild provisioned it records a ``verify`` receipt; a passing verify that finds nothing new is
a line in ``<root>/receipts/verified.jsonl`` instead (see ``envbuild.proof.receipt``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events, guard, layout
from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    JsonArgs,
    RootArgs,
    StackArgs,
    Subparsers,
    add_json_arg,
    add_root_arg,
    add_stack_args,
    find_environment,
    path_arg,
    seconds_arg,
)
from envbuild.errors import ABIViolation, ConfigError, VerifyError
from envbuild.proof import receipt as receipts
from envbuild.provision.state import Manifest
from envbuild.provision.verify import IMPORT_TIMEOUT, FinalCheck, ImportHang, final_check

if TYPE_CHECKING:
    from envbuild.commands.documents import VerifyDocument
    from envbuild.proof.receipt import SoftwareJSON
    from envbuild.spec import StackSpec


@dataclass(frozen=True)
class VerifyArgs(StackArgs, JsonArgs, RootArgs):
    """``verify``'s options."""

    venv: Path | None
    timeout: float
    no_receipt: bool


def register(sub: Subparsers) -> None:
    p = sub.add_parser("verify", help="check an environment against its ABI baseline")
    add_stack_args(p)
    add_json_arg(p)
    add_root_arg(p, "data root holding the venv and its manifest")
    p.add_argument(
        "--venv",
        type=path_arg,
        help="check this environment (baseline from the root's manifest if any)",
    )
    p.add_argument(
        "--timeout",
        type=seconds_arg(),
        default=IMPORT_TIMEOUT,
        metavar="S",
        help=f"give up on `import torch` after S seconds (default {IMPORT_TIMEOUT:g}; exit 7)",
    )
    p.add_argument(
        "--no-receipt", action="store_true", help="do not record this verification under the root"
    )
    p.set_defaults(func=Handler(run, VerifyArgs))


@dataclass(frozen=True)
class _Target:
    """The environment verify checks, with its stack, its root and what the root says of it
    (``unfinished``: the last provision stopped short, in one paragraph)."""

    spec: StackSpec
    paths: layout.Paths
    venv: Path
    python: Path
    site: Path
    manifest: Manifest
    unfinished: str | None


@dataclass(frozen=True)
class _Findings:
    """What verify found: the guard's and the import's check, the files changed on disk, the
    packages extraneous to or missing from the root's selection."""

    check: FinalCheck
    changed: list[str]
    extra: list[str]
    gone: list[str]

    @property
    def messages(self) -> list[str]:
        return [f.message for f in self.check.findings] + self.changed + self.extra + self.gone


def run(args: VerifyArgs) -> int:
    target = _target(args)
    baseline, source = _baseline(target)
    record = not args.no_receipt and target.paths.manifest.is_file()
    with ThreadPoolExecutor(2) as pool:
        # what the receipt says about the host and the files, while torch imports
        host = pool.submit(receipts.snapshot_host, target.spec) if record else None
        software = pool.submit(receipts.inventory, target.python)
        check = _final_check(target, baseline, args.timeout)
        inventory = software.result()
    found = _Findings(
        check,
        changed_on_disk(inventory, baseline),
        extraneous_of(target.manifest, target.venv, target.site),
        # a provision that stopped short left its later stages out: that is `unfinished`, not drift
        [] if target.unfinished else missing_of(target.manifest, target.venv, target.site),
    )
    receipt = None
    if record:
        receipt = receipts.write_receipt(
            target.paths,
            "verify",
            _payload(target, found, source),
            spec=target.spec,
            python=target.python,
            host=host.result() if host else None,
            software=inventory,
        )
    if args.json:
        ui.print_json(_document(target, found, source, receipt))
    _raise_on_findings(target, found, baseline)
    if not args.json:
        events.emit(
            "ok",
            f"{target.venv}: {target.spec.abi.package} {baseline.version} intact "
            f"(guard {1000 * check.report.seconds:.0f} ms; baseline from {source})",
        )
    return 0


def _target(args: VerifyArgs) -> _Target:
    """The environment ``args`` point at; ConfigError when there is no interpreter there."""
    found = find_environment(args)
    spec, paths = found.spec, found.paths
    venv = args.venv.expanduser().absolute() if args.venv else found.venv
    python = venv / "bin" / "python"
    if not python.exists():
        raise ConfigError(
            f"no environment at {venv} (no {python}; root {paths.root}, {found.why})",
            hint=(
                "Provision it first, activate the venv it made or set ENVBUILD_ROOT, or pass"
                " --venv."
            ),
        )
    site = guard.site_packages(venv)
    manifest = Manifest.load(paths.manifest)
    last = receipts.last_provision(paths.receipts) if Path(manifest.venv) == venv else None
    unfinished = receipts.stopped_short(last) if last is not None else None
    return _Target(spec, paths, venv, python, site, manifest, unfinished)


def _baseline(target: _Target) -> tuple[guard.Baseline, str]:
    """The ABI baseline to check against, and where it came from: the root's manifest, else the
    environment itself (ABIViolation when its torch is missing or not the spec's)."""
    spec, manifest, venv = target.spec, target.manifest, target.venv
    if manifest.baseline is not None and Path(manifest.venv) == venv:
        return guard.Baseline.from_json(manifest.baseline), f"manifest {target.paths.manifest}"
    try:
        baseline = guard.take_baseline(spec.abi, target.site, manifest.marker_env or {})
    except LookupError as exc:
        raise ABIViolation(
            f"{spec.abi.package} is not installed in {venv}"
            + (f": {target.unfinished}" if target.unfinished else "")
        ) from exc
    if baseline.version != spec.abi.version:
        raise ABIViolation(
            f"{spec.abi.package} {baseline.version} is installed; the spec says {spec.abi.version}"
        )
    return baseline, "the environment itself (no manifest)"


def _final_check(target: _Target, baseline: guard.Baseline, timeout: float) -> FinalCheck:
    """The same check provision ends with; verify always imports (no cached verdict)."""
    try:
        return final_check(
            target.spec,
            baseline=baseline,
            site=target.site,
            python=target.python,
            marker_env=target.manifest.marker_env,
            overlay=layout.overlay_env(target.spec, target.paths),
            timeout=timeout,
            import_after_violation=True,
        )
    except ImportHang as exc:
        raise VerifyError(
            f"{target.venv}: {exc}",
            hint=(
                "A hang in `import torch` is usually a driver or a network file "
                "system: check `nvidia-smi` and the mounts, or raise --timeout."
            ),
        ) from exc


def _payload(target: _Target, found: _Findings, source: str) -> receipts.VerifyPayload:
    """The ``verify`` receipt's payload."""
    return {
        "ok": not found.messages and not target.unfinished,
        "venv": str(target.venv),
        "baseline_from": source,
        "violations": [*found.messages, *filter(None, [target.unfinished])],
        "torch": found.check.data,
        "guard_seconds": round(found.check.report.seconds, 4),
    }


def _document(
    target: _Target, found: _Findings, source: str, receipt: Path | None
) -> VerifyDocument:
    """``verify --json``'s document."""
    check = found.check
    return {
        "schema": "envbuild.verify/1",
        "venv": str(target.venv),
        "baseline_from": source,
        "ok": not found.messages and not target.unfinished,
        "unfinished": target.unfinished,
        "violations": [
            {"rule": f.rule, "package": f.package, "message": f.message} for f in check.findings
        ],
        "changed_on_disk": found.changed,
        "extraneous": found.extra,
        "missing": found.gone,
        "torch": check.data,
        "guard_seconds": round(check.report.seconds, 4),
        "receipt": str(receipt) if receipt else None,
    }


def _raise_on_findings(target: _Target, found: _Findings, baseline: guard.Baseline) -> None:
    """ABIViolation (exit 6) for any finding, else VerifyError (exit 7) for a provision that
    stopped short."""
    venv, unfinished = target.venv, target.unfinished
    if found.messages:
        also = f". Also: {unfinished}" if unfinished else ""
        raise ABIViolation(f"{venv}: " + "; ".join(found.messages) + also)
    if unfinished:
        raise VerifyError(
            f"{venv}: {target.spec.abi.package} {baseline.version} intact, but {unfinished}",
            hint="Run the same provision command again: it resumes at the step that stopped.",
        )


def extraneous_of(manifest: Manifest, venv: Path, site: Path) -> list[str]:
    """A root provisioned from a lock's selection with exact sync: one message per package the venv
    holds that the selection does not install (``provision.exact``)."""
    from envbuild.provision.exact import extraneous

    if manifest.sync is None or not manifest.sync.get("exact") or Path(manifest.venv) != venv:
        return []
    return [
        f"{d.name} {d.version} is installed, and the lock's selection this root holds does not "
        "install it (extraneous: `provision --lock` removes it, --inexact keeps it)"
        for d in extraneous(manifest.sync, guard.scan(site))
    ]


def missing_of(manifest: Manifest, venv: Path, site: Path) -> list[str]:
    """A root provisioned from a lock's selection: one message per package the selection installs
    that the venv no longer holds (``provision.exact.missing``), exact sync or not."""
    from envbuild.provision.exact import missing

    if manifest.sync is None or Path(manifest.venv) != venv:
        return []
    return [
        f"{name} is not installed, and the lock's selection this root holds installs it "
        "(missing: `provision --lock` puts it back)"
        for name in missing(manifest.sync, guard.scan(site))
    ]


def changed_on_disk(inventory: SoftwareJSON, baseline: guard.Baseline) -> list[str]:
    """One message per distribution of torch and its protected set with files whose bytes on disk
    are not the ones RECORD lists (an edit in place, a truncated copy), naming the first few."""
    guarded = {baseline.package, *baseline.protected}
    out = []
    for d in inventory.get("distributions") or []:
        count = d.get("modified_count") or 0
        if d.get("name") in guarded and count:
            names = ", ".join(d.get("modified") or [])
            more = (
                f" and {count - len(d.get('modified') or [])} more"
                if count > len(d.get("modified") or [])
                else ""
            )
            out.append(
                f"{d['name']} {d.get('version')}: {count} file(s) changed on disk since it was"
                f" installed ({names}{more})"
            )
    return out
