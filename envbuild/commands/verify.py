"""``envbuild verify``: the ABI guard and the full import check on an existing environment."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from envbuild import abi, events, layout
from envbuild.commands import ui
from envbuild.commands.common import add_json_arg, add_stack_args, load_stack, path_arg, seconds_arg
from envbuild.errors import ABIViolation, ConfigError, VerifyError
from envbuild.provision.state import Manifest
from envbuild.provision.verify import IMPORT_TIMEOUT, ImportHang, final_check


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check an environment against its ABI baseline")
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--root", type=path_arg, help="data root holding the venv and its manifest")
    p.add_argument("--venv", type=path_arg, help="check this environment (baseline from --root's manifest if any)")
    p.add_argument("--timeout", type=seconds_arg(), default=IMPORT_TIMEOUT, metavar="S",
                   help=f"give up on `import torch` after S seconds (default {IMPORT_TIMEOUT:g}; exit 7)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_stack(args)
    paths = layout.paths_for(spec, args.root)
    venv = args.venv.expanduser().absolute() if args.venv else paths.venv
    python = venv / "bin" / "python"
    if not python.exists():
        raise ConfigError(f"no environment at {venv} (no {python}); provision it first or pass --venv")
    site = abi.site_packages(venv)
    manifest = Manifest.load(paths.manifest)
    if manifest.baseline is not None and (args.venv is None or Path(manifest.venv) == venv):
        baseline = abi.Baseline.from_json(manifest.baseline)
        source = f"manifest {paths.manifest}"
    else:
        try:
            baseline = abi.take_baseline(spec.abi, site, manifest.marker_env or {})
        except LookupError:
            raise ABIViolation(f"{spec.abi.package} is not installed in {venv}") from None
        source = "the environment itself (no manifest)"
        if baseline.version != spec.abi.version:
            raise ABIViolation(f"{spec.abi.package} {baseline.version} is installed; the spec says {spec.abi.version}")
    # the same check provision ends with; verify always imports (no cached verdict)
    try:
        check = final_check(spec, baseline=baseline, site=site, python=python, marker_env=manifest.marker_env,
                            overlay=layout.overlay_env(spec, paths), timeout=args.timeout,
                            import_after_violation=True)
    except ImportHang as exc:
        raise VerifyError(f"{venv}: {exc}", hint="A hang in `import torch` is usually a driver or a network file "
                          "system: check `nvidia-smi` and the mounts, or raise --timeout.") from None
    findings = check.findings
    if args.json:
        ui.print_json({"venv": str(venv), "baseline_from": source, "ok": not findings,
                       "violations": [f.__dict__ for f in findings], "torch": check.data,
                       "guard_seconds": round(check.report.seconds, 4)})
    if findings:
        raise ABIViolation(f"{venv}: " + "; ".join(f.message for f in findings))
    if not args.json:
        events.emit("ok", f"{venv}: {spec.abi.package} {baseline.version} intact "
                    f"(guard {1000 * check.report.seconds:.0f} ms; baseline from {source})")
    return 0
