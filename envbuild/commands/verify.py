"""``envbuild verify``: the ABI guard and the full import check on an existing environment."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from envbuild import abi, events, layout
from envbuild.commands import ui
from envbuild.commands.common import add_json_arg, add_stack_args, load_stack
from envbuild.errors import ABIViolation, ConfigError
from envbuild.installer.core import run_python_json
from envbuild.provision.state import Manifest


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check an environment against its ABI baseline")
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--root", type=Path, help="data root holding the venv and its manifest")
    p.add_argument("--venv", type=Path, help="check this environment (baseline from --root's manifest if any)")
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
    report = abi.check(spec, baseline, site, marker_env=manifest.marker_env)
    findings = list(report.violations)
    full: dict[str, object] | None = None
    try:
        full = run_python_json(python, abi.FULL_CHECK)
        findings += abi.full_check_result(spec, full)
    except Exception as exc:
        findings.append(abi.Finding("import", spec.abi.package, f"import {spec.abi.package} fails: {exc}"))
    if args.json:
        ui.print_json({"venv": str(venv), "baseline_from": source, "ok": not findings,
                       "violations": [f.__dict__ for f in findings], "torch": full,
                       "guard_seconds": round(report.seconds, 4)})
    if findings:
        raise ABIViolation(f"{venv}: " + "; ".join(f.message for f in findings))
    if not args.json:
        events.emit("ok", f"{venv}: {spec.abi.package} {baseline.version} intact "
                    f"(guard {1000 * report.seconds:.0f} ms; baseline from {source})")
    return 0
