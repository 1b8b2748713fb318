"""``envbuild smoke``: kernel smoke tests inside the target venv, each against a reference. Exit 7 on a failure.

Also holds the target-venv arguments that ``dist-step`` shares (``--root``, ``--venv``,
``--python``, ``--no-receipt``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.common import add_json_arg, add_stack_args, load_stack, path_arg, seconds_arg
from envbuild.errors import ExitCode, PreflightError
from envbuild.layout import Paths, overlay_env, paths_for
from envbuild.proof.provenance import Provenance, capture
from envbuild.spec import StackSpec

_MARK = {"pass": "pass", "fail": "FAIL", "skip": "skip"}


def add_target_args(p: argparse.ArgumentParser) -> None:
    add_stack_args(p)
    add_json_arg(p)
    p.add_argument("--root", type=path_arg, help="data root: receipts and logs go under it (default: the spec's layout.root)")
    p.add_argument("--venv", type=path_arg, help="the venv to test (default: <root>/<layout.venv>)")
    p.add_argument("--python", type=path_arg, help="an interpreter to test instead of a venv's bin/python")
    p.add_argument("--no-receipt", action="store_true", help="do not write a receipt")


def resolve_target(args: argparse.Namespace) -> tuple[StackSpec, Paths, Path]:
    spec = load_stack(args)
    paths = paths_for(spec, args.root)
    if args.python:
        python = args.python.expanduser()
    elif args.venv:
        python = args.venv.expanduser().absolute() / "bin" / "python"
    else:
        python = paths.python
    if not python.exists():  # refused before anything is made under the data root
        raise PreflightError(
            f"no Python interpreter at {python}: the venv is missing or incomplete",
            hint="Provision it first (envbuild provision), or point --venv at an existing venv.")
    return spec, paths, python


def start_provenance(spec: StackSpec, regime: str) -> Provenance:
    """Provenance first, before any heavy work (seed 003)."""
    return capture(profile=spec.name, launch_regime=regime)


def save_receipt(args: argparse.Namespace, paths: Paths, kind: str, payload: dict[str, Any], *,
                 spec: StackSpec, python: Path, provenance: Provenance) -> str | None:
    if args.no_receipt:
        return None
    from envbuild.proof.receipt import write_receipt

    try:
        return str(write_receipt(paths, kind, payload, spec=spec, python=python, provenance=provenance))
    except OSError as exc:
        events.emit("warn", f"could not write the receipt under {paths.receipts}: {exc.strerror or exc}; "
                            "pass --root DIR for a writable data root, or --no-receipt")
        return None


def log_path(paths: Paths, name: str) -> Path | None:
    """``<root>/logs/<name>`` when the data root can take it (the run goes on without a log otherwise)."""
    try:
        paths.logs.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return paths.logs / name if os.access(paths.logs, os.W_OK) else None


def target_env(spec: StackSpec, paths: Paths) -> dict[str, str]:
    """The caller's environment with the venv's overlay (caches on the data root, the baseline)."""
    env = dict(os.environ)
    env.update(overlay_env(spec, paths))
    return env


def register(sub: Any) -> None:
    from envbuild.proof.smoke import CHECK_NAMES

    p = sub.add_parser("smoke", help="kernel smoke tests in the venv, each against a reference",
                       description="Run kernel smoke tests with the venv's python. Exit 7 when a check fails.")
    add_target_args(p)
    p.add_argument("--only", action="append", default=[], choices=CHECK_NAMES, metavar="CHECK",
                   help=f"run only these checks (repeatable): {', '.join(CHECK_NAMES)}")
    p.add_argument("--quick", action="store_true", help="a shorter matmul benchmark")
    p.add_argument("--timeout", type=seconds_arg(), default=900.0, metavar="S", help="give up after S seconds (default 900)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from envbuild.proof.smoke import run_smoke

    spec, paths, python = resolve_target(args)
    prov = start_provenance(spec, "single-process")
    log = log_path(paths, "smoke.log")
    res = run_smoke(python, only=tuple(args.only), quick=args.quick, log_file=log,
                    env=target_env(spec, paths), timeout=args.timeout)
    payload = {"ok": res.ok, "seconds": res.seconds, "environment": res.environment,
               "checks": [{k: v for k, v in c.items() if k != "traceback"} for c in res.checks],
               "launch_regime": "single-process"}
    receipt = save_receipt(args, paths, "smoke", payload, spec=spec, python=python, provenance=prov)
    if args.json:
        ui.print_json({**payload, "checks": res.checks, "receipt": receipt})
    else:
        env = res.environment
        ui.print_text(f"smoke: torch {env.get('torch')} cuda {env.get('cuda') or '-'} "
                      f"on {env.get('device', 'CPU')} ({python})")
        ui.print_table(None, ["check", "verdict", "rel err", "tol", "time", "note"],
                       [_row(c) for c in res.checks])
        ui.print_text(f"{'all checks passed' if res.ok else 'FAILED'} in {res.seconds:.1f} s"
                      + (f"; receipt {receipt}" if receipt else "") + (f"; log {log}" if log else ""))
    return 0 if res.ok else int(ExitCode.VERIFY)


def _row(c: dict[str, Any]) -> list[str]:
    err = c.get("rel_err")
    notes = []
    if c.get("verdict") == "fail" or c.get("verdict") == "skip":
        notes.append(str(c.get("reason") or ""))
    if c.get("kernel_ms") is not None and c.get("verdict") != "skip":
        notes.append(f"{c['kernel_ms']:.3f} ms/call")
    if c.get("tflops") is not None and c.get("verdict") != "skip":
        sheet = c.get("datasheet_tflops")
        notes.append(f"{c['tflops']:.1f} TFLOP/s" + (f" ({100 * c['tflops'] / sheet:.0f}% of {sheet:g})" if sheet else ""))
    if c.get("version") and c.get("verdict") == "pass":
        notes.append(f"version {c['version']}")
    return [str(c.get("name")), _MARK.get(str(c.get("verdict")), str(c.get("verdict"))),
            f"{err:.2e}" if isinstance(err, (int, float)) else "-",
            f"{c['tol']:.2g}" if c.get("tol") is not None else "-",
            f"{c.get('seconds', 0):.2f} s", "; ".join(n for n in notes if n)]
