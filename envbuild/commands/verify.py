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
from envbuild.provision.verify import IMPORT_TIMEOUT, ImportHang, final_check

if TYPE_CHECKING:
    from envbuild.commands.documents import VerifyDocument
    from envbuild.proof.receipt import SoftwareJSON


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


def run(args: VerifyArgs) -> int:
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
    if manifest.baseline is not None and Path(manifest.venv) == venv:
        baseline = guard.Baseline.from_json(manifest.baseline)
        source = f"manifest {paths.manifest}"
    else:
        try:
            baseline = guard.take_baseline(spec.abi, site, manifest.marker_env or {})
        except LookupError as exc:
            raise ABIViolation(
                f"{spec.abi.package} is not installed in {venv}"
                + (f": {unfinished}" if unfinished else "")
            ) from exc
        source = "the environment itself (no manifest)"
        if baseline.version != spec.abi.version:
            raise ABIViolation(
                f"{spec.abi.package} {baseline.version} is installed; the spec says"
                f" {spec.abi.version}"
            )
    record = not args.no_receipt and paths.manifest.is_file()
    with ThreadPoolExecutor(2) as pool:
        # what the receipt says about the host and the files, while torch imports
        host = pool.submit(receipts.snapshot_host, spec) if record else None
        software = pool.submit(receipts.inventory, python)
        # the same check provision ends with; verify always imports (no cached verdict)
        try:
            check = final_check(
                spec,
                baseline=baseline,
                site=site,
                python=python,
                marker_env=manifest.marker_env,
                overlay=layout.overlay_env(spec, paths),
                timeout=args.timeout,
                import_after_violation=True,
            )
        except ImportHang as exc:
            raise VerifyError(
                f"{venv}: {exc}",
                hint=(
                    "A hang in `import torch` is usually a driver or a network file "
                    "system: check `nvidia-smi` and the mounts, or raise --timeout."
                ),
            ) from exc
        inventory = software.result()
    changed = changed_on_disk(inventory, baseline)
    extra = extraneous_of(manifest, venv, site)
    # a provision that stopped short left its later stages out: that is `unfinished`, not drift
    gone = [] if unfinished else missing_of(manifest, venv, site)
    messages = [f.message for f in check.findings] + changed + extra + gone
    receipt = None
    if record:
        payload: receipts.VerifyPayload = {
            "ok": not messages and not unfinished,
            "venv": str(venv),
            "baseline_from": source,
            "violations": [*messages, *filter(None, [unfinished])],
            "torch": check.data,
            "guard_seconds": round(check.report.seconds, 4),
        }
        receipt = receipts.write_receipt(
            paths,
            "verify",
            payload,
            spec=spec,
            python=python,
            host=host.result() if host else None,
            software=inventory,
        )
    if args.json:
        doc: VerifyDocument = {
            "schema": "envbuild.verify/1",
            "venv": str(venv),
            "baseline_from": source,
            "ok": not messages and not unfinished,
            "unfinished": unfinished,
            "violations": [
                {"rule": f.rule, "package": f.package, "message": f.message} for f in check.findings
            ],
            "changed_on_disk": changed,
            "extraneous": extra,
            "missing": gone,
            "torch": check.data,
            "guard_seconds": round(check.report.seconds, 4),
            "receipt": str(receipt) if receipt else None,
        }
        ui.print_json(doc)
    if messages:
        also = f". Also: {unfinished}" if unfinished else ""
        raise ABIViolation(f"{venv}: " + "; ".join(messages) + also)
    if unfinished:
        raise VerifyError(
            f"{venv}: {spec.abi.package} {baseline.version} intact, but {unfinished}",
            hint="Run the same provision command again: it resumes at the step that stopped.",
        )
    if not args.json:
        events.emit(
            "ok",
            f"{venv}: {spec.abi.package} {baseline.version} intact "
            f"(guard {1000 * check.report.seconds:.0f} ms; baseline from {source})",
        )
    return 0


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
