"""The dynamic rule: a ``pip install --dry-run --report`` of each step on the locked baseline.

The environment is a venv without pip that holds *stand-in* dist-info records (METADATA with
the locked Requires-Dist, an empty RECORD) for everything the lock installs up to and including
the baseline; each step's records are added after its dry run, so a later step sees the earlier
ones. pip runs from envbuild's own environment with ``--python`` pointing into that venv. The
step's requirements are its locked pins without hashes, with the plan's installer arguments
(index, find-links, ``--pre``, ``--no-deps``, ``--upgrade`` and its strategy), and no
constraints: the question is what the resolver *would* install, not whether it may.

Where no interpreter of the stack's Python exists (a CI runner with 3.11 checking a 3.13
stack), the dry runs are ``uv pip install --dry-run --python-version X --python-platform P``
on a venv of this Python: uv resolves for the target's markers and ``Requires-Python`` while
it reads the stand-in records as installed (pip cannot: its ``--python-version`` leaves
markers to the running interpreter and refuses dependencies without ``--only-binary``).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from itertools import pairwise
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild.errors import PreflightError
from envbuild.gate.rules.ownlock.steps import StackContext, StepView
from envbuild.gate.rules.pins import TRITON
from envbuild.index.net import redact, unreachable
from envbuild.installer import PipInstaller, find_python, find_uv, pip_config_sources
from envbuild.plan import PlanOptions, make_plan
from envbuild.run import run
from envbuild.spec import StackSpec

__all__ = ["check"]

_DROP = {"--require-hashes", "--verify-hashes", "--disable-pip-version-check", "--no-input"}
_UV_PLUS = re.compile(r"^\s*\+\s+([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)


def _stand_in(site: Path, name: str, version: str, requires: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "INSTALLER").write_text("envbuild-check-lock\n")
    (info / "RECORD").write_text("")


def _interpreter(spec: StackSpec, ctx: StackContext) -> tuple[Path, bool]:
    """The venv's interpreter, and whether it is the stack's Python on the stack's machine (else uv
    resolves for the target: pip evaluates markers for the host, whatever --platform says)."""
    import platform

    try:
        python = find_python(spec.python)
        if sys.platform == "linux" and platform.machine() == spec.target.arch:
            return python, True
    except PreflightError:
        python = None
    if find_uv() is None:
        ctx.note(
            f"dry runs use Python {sys.version_info[0]}.{sys.version_info[1]}: "
            f"no Python {spec.python} (the stack's) on its machine and no uv were found"
        )
        return Path(sys.executable), True
    why = "the target is another machine" if python is not None else f"no Python {spec.python} here"
    ctx.note(f"dry runs resolve for Python {spec.python} on {spec.target.platform} with uv ({why})")
    return Path(sys.executable), False


def check(ctx: StackContext) -> None:
    spec, views = ctx.spec, ctx.views
    abi = spec.abi
    baseline = spec.baseline_index if spec.baseline_index is not None else -1
    plan = make_plan(spec)
    todo = [v for v in views if v.index > baseline and v.index < len(spec.steps)]
    if not todo:
        return
    sources: list[str] = []
    # index -> the first project of a step that reads it (its page is probed)
    pages: dict[str, str] = {}
    for step in (plan.steps[v.index] for v in todo):
        sources += [
            b
            for a, b in pairwise(step.args)
            if a in ("--index-url", "--extra-index-url", "--find-links")
        ]
        for a, b in pairwise(step.args):
            if a in ("--index-url", "--extra-index-url") and step.step.packages:
                pages.setdefault(b, step.step.names[0])
    bad = unreachable(sources, projects=pages)
    if bad:
        raise PreflightError(
            "check-lock's dry runs need the steps' package sources, which do not answer: "
            + "; ".join(sorted(set(bad))),
            hint="Run with --offline for the static rules only.",
        )
    python, native = _interpreter(spec, ctx)
    if not native:
        plan = make_plan(spec, PlanOptions(backend="uv", default_sources=pip_config_sources()))
    with tempfile.TemporaryDirectory(prefix="envbuild-checklock-") as tmp:
        venv = Path(tmp) / "venv"
        out = run(
            [str(python), "-m", "venv", "--without-pip", str(venv)], capture=True, timeout=300
        )
        if not out.ok:
            raise PreflightError(
                f"cannot make the dry-run venv with {python}: {out.describe('venv')}:"
                f" {out.tail.strip()}"
            )
        site = next(venv.glob("lib/python3*/site-packages"))
        if abi.adopt:
            _stand_in(site, abi.package, abi.version, [])
        by_index = {v.index: v for v in views}
        for i in range(baseline + 1):
            for p in by_index[i].packages.values() if i in by_index else []:
                if p.version:
                    _stand_in(site, p.name, p.version, list(p.requires_dist or []))
        for v in sorted(todo, key=lambda v: v.index):
            _dry_run(ctx, plan.steps[v.index].args, v, venv, Path(tmp), native)
            for p in v.packages.values():
                if p.version:
                    _stand_in(site, p.name, p.version, list(p.requires_dist or []))


def _dry_run(
    ctx: StackContext,
    plan_args: tuple[str, ...],
    v: StepView,
    venv: Path,
    tmp: Path,
    native: bool = True,
) -> None:
    spec = ctx.spec
    abi = spec.abi
    req = tmp / f"{v.name}.txt"
    req.write_text(
        "".join(
            (f"{r.name} @ {r.url}" if r.url else f"{r.name}=={r.version}") + "\n"
            for r in v.reqs
            if r.url or r.version
        )
    )
    out_json = tmp / f"{v.name}.report.json"
    args = [a for a in plan_args if a not in _DROP]
    if native:
        argv = PipInstaller().dry_run_argv(
            venv / "bin" / "python", args=args, requirements_file=req, report=out_json
        )
    else:
        argv = [
            find_uv() or "uv",
            "pip",
            "install",
            "--dry-run",
            "--no-config",
            "--no-python-downloads",
            "--python",
            str(venv / "bin" / "python"),
            "--python-version",
            spec.python,
            "--python-platform",
            spec.target.uv_platform,
            *args,
            "-r",
            str(req),
        ]
    res = run(argv, capture=True, timeout=900, env=_env(spec, v))
    if not res.ok:
        lines = [ln for ln in res.tail.strip().splitlines() if ln.strip()]
        why = redact(
            res.hung_message("the dry run")
            if res.timed_out
            else lines[-1]
            if lines
            else f"exit {res.returncode}"
        )
        ctx.add(
            v.file,
            "-",
            "dry-run-failed",
            f"a dry run of step {v.name!r} on the pinned baseline did not resolve: {why}",
        )
        return
    if native:
        data: dict[str, Any] = json.loads(out_json.read_text())
        installs = [
            (
                canonicalize_name(i.get("metadata", {}).get("name", "")),
                i.get("metadata", {}).get("version", ""),
            )
            for i in data.get("install", [])
        ]
    else:  # uv's plan: " + name==version" per package it would install
        installs = [
            (canonicalize_name(m.group(1)), m.group(2)) for m in _UV_PLUS.finditer(res.output or "")
        ]
    for name, version in installs:
        if ctx.is_protected(name):
            ctx.add(
                v.file,
                name,
                "dry-run-protected",
                f"a dry run of step {v.name!r} on the pinned baseline would install {name}"
                f" {version} (the baseline pins"
                f" {abi.version if name == abi.package else 'another build'})",
            )
        elif name == TRITON and abi.triton_provider and abi.triton_provider != TRITON:
            ctx.add(
                v.file,
                name,
                "dry-run-protected",
                f"a dry run of step {v.name!r} would install PyPI triton {version} next to"
                f" {abi.triton_provider}",
            )


def _env(spec: StackSpec, v: StepView) -> dict[str, str] | None:
    import os

    env = dict(os.environ)
    if v.index < len(spec.steps):
        env.update(spec.steps[v.index].env)
    return env
