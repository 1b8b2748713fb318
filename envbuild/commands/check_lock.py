"""``envbuild check-lock``: the CI gate: fail (exit 8) on any way a lock could replace torch.

One line per finding, ``FILE: PACKAGE: REASON [rule]``, on stdout; ``--json`` prints a document
with every finding and notice. Several ``--profile`` (or ``--stack``) may be given; with none,
every profile under ``lockfiles/`` that has a lock is checked.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild.commands import ui
from envbuild.errors import ConfigError, ExitCode
from envbuild.lock.check import CheckOptions, check_lock
from envbuild.lock.model import MANIFEST
from envbuild.spec import StackSpec, available_profiles, load_spec, profile_path, resolve_spec


def register(sub: Any) -> None:
    p = sub.add_parser("check-lock", help="CI gate: prove the lock cannot replace, downgrade or shadow torch")
    p.add_argument("--profile", metavar="NAME", action="append", default=[],
                   help="a profile to check (repeatable; default: every profile that has a lock)")
    p.add_argument("--stack", metavar="FILE", type=Path, action="append", default=[],
                   help="a stack spec whose lock (beside it) to check (repeatable)")
    p.add_argument("--base", metavar="GIT_REF", help="fail on a torch downgrade or re-tag against the lock at this ref")
    p.add_argument("--offline", action="store_true", help="static rules only (no dry-run resolution, no index)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON on stdout")
    p.set_defaults(func=run)


def _specs(args: argparse.Namespace) -> list[StackSpec]:
    specs = [resolve_spec(name, None) for name in args.profile]
    specs += [load_spec(path) for path in args.stack]
    if specs:
        return specs
    found = [load_spec(profile_path(n)) for n in available_profiles()]
    found = [s for s in found if (s.path.parent / MANIFEST).is_file()]
    if not found:
        raise ConfigError("no profile with a lock found; name one with --profile or --stack")
    return found


def run(args: argparse.Namespace) -> int:
    opts = CheckOptions(base=args.base, offline=args.offline)
    reports = []
    for spec in _specs(args):
        events.emit("step", f"checking the lock of {spec.name} ({spec.path.parent})")
        reports.append(check_lock(spec, opts))
    failed = [r for r in reports if not r.ok]
    if args.json:
        ui.print_json({"ok": not failed, "reports": [r.to_json() for r in reports]})
    else:
        for r in reports:
            for n in r.notices:
                events.emit("info", f"note: {n}")
            for f in r.findings:
                ui.print_text(f.line())
            if r.ok:
                events.emit("ok", f"{r.stack}: lock ok ({r.seconds * 1000:.0f} ms)")
            else:
                events.emit("fail", f"{r.stack}: {len(r.findings)} finding(s)")
    return int(ExitCode.LOCK) if failed else 0
