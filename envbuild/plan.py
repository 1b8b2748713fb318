"""Plan: a pure function from a stack spec (+ options) to ordered steps with exact installer arguments.

Nothing here runs anything. ``envbuild plan`` prints the result; ``provision`` executes it.
The argument lists are backend-specific (pip or uv) but mean the same thing:

- an empty ``index_url`` means "the sources pip is configured with" (pip.conf, ``PIP_*``);
  for uv, which does not read pip's config, those sources are passed explicitly (see
  ``InstallerSources``) so both backends see the same packages;
- every step after the baseline reads the constraints file that pins torch and the protected
  set to the exact installed versions, so a resolver that wants another torch fails loudly;
- ``--offline --wheelhouse`` replaces every step's sources with ``--no-index --find-links``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from envbuild.errors import ConfigError
from envbuild.spec import StackSpec, Step

Backend = Literal["pip", "uv"]
BACKENDS: tuple[str, ...] = get_args(Backend)
PIP_NETWORK_ARGS = ("--timeout", "30", "--retries", "2")


@dataclass(frozen=True)
class InstallerSources:
    """Where packages come from when a step names no index of its own."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    backend: Backend = "pip"
    wheelhouse: str | None = None  # --offline --wheelhouse DIR|URL: the only source
    default_sources: InstallerSources = field(default_factory=InstallerSources)
    locked: Mapping[str, Path] = field(default_factory=dict)  # step name -> hash-pinned requirement file


@dataclass(frozen=True, kw_only=True)
class PlannedStep:
    number: int  # 1-based, as shown to users
    step: Step
    role: Literal["pre-baseline", "baseline", "guarded"]
    requirements: tuple[str, ...]  # what goes into the step's requirements file
    locked_file: Path | None
    args: tuple[str, ...]  # installer options, without the program, requirements and constraints
    env: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def constrained(self) -> bool:
        return self.role == "guarded"

    @property
    def digest(self) -> str:
        """Identity of what this step installs and how: a change re-runs it on resume."""
        payload = {"req": self.requirements, "args": self.args, "env": dict(self.env),
                   "locked": self.locked_file.read_text() if self.locked_file else None}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Plan:
    spec: StackSpec
    options: PlanOptions
    steps: tuple[PlannedStep, ...]

    def step(self, name: str) -> PlannedStep:
        for s in self.steps:
            if s.name == name:
                return s
        self.spec.step(name)  # raises with a did-you-mean
        raise AssertionError(name)

    def sources(self) -> list[str]:
        """Every index or find-links location the plan reads (for reachability checks)."""
        seen: list[str] = []
        for s in self.steps:
            args = list(s.args)
            for i, a in enumerate(args[:-1]):
                if a in ("--index-url", "--extra-index-url", "--find-links") and args[i + 1] not in seen:
                    seen.append(args[i + 1])
        return seen


def make_plan(spec: StackSpec, options: PlanOptions | None = None) -> Plan:
    opts = options or PlanOptions()
    if opts.backend not in BACKENDS:
        raise ConfigError(f"unknown backend {opts.backend!r}; choose one of {', '.join(BACKENDS)}")
    baseline = spec.baseline_index
    if baseline is None:  # adopted torch: every step is guarded
        baseline = -1
    steps = []
    for i, step in enumerate(spec.steps):
        role: Literal["pre-baseline", "baseline", "guarded"]
        role = "baseline" if i == baseline else ("guarded" if i > baseline else "pre-baseline")
        locked = opts.locked.get(step.name)
        steps.append(
            PlannedStep(
                number=i + 1,
                step=step,
                role=role,
                requirements=step.packages,
                locked_file=locked,
                args=tuple(_installer_args(step, opts, locked is not None)),
                env=dict(step.env),
            )
        )
    return Plan(spec=spec, options=opts, steps=tuple(steps))


def _installer_args(step: Step, opts: PlanOptions, locked: bool) -> list[str]:
    pip = opts.backend == "pip"
    args: list[str] = []
    if opts.wheelhouse:
        args += ["--no-index", "--find-links", opts.wheelhouse]
    else:
        index = step.index_url
        extras = list(step.extra_index_urls)
        links = list(step.find_links)
        if step.no_index:
            args.append("--no-index")
        elif index is None and not pip:
            # uv does not read pip.conf: hand it the sources pip would use.
            d = opts.default_sources
            index = d.index_url
            extras = list(d.extra_index_urls) + extras
            links = list(d.find_links) + links
        if index and not step.no_index:
            args += ["--index-url", index]
        if not step.no_index:
            for url in extras:
                args += ["--extra-index-url", url]
        for link in links:
            args += ["--find-links", link]
        if not pip and (extras or links) and not step.no_index:
            # pip looks at every source and takes the best match; uv's default stops at the
            # first index that has the name. Same semantics for both backends:
            args += ["--index-strategy", "unsafe-best-match"]
    if step.pre:
        args += ["--pre"] if pip else ["--prerelease", "allow"]
    if step.no_deps:
        args.append("--no-deps")
    if step.no_build_isolation:
        args.append("--no-build-isolation")
    if step.upgrade:
        args.append("--upgrade")
        if pip:
            args += ["--upgrade-strategy", step.upgrade_strategy]
    if step.reinstall:
        args.append("--force-reinstall" if pip else "--reinstall")
    if locked:
        # uv's --require-hashes also wants hashes for dependencies that are already installed
        # (torch under a guarded step); --verify-hashes checks every hash the lock file carries.
        args.append("--require-hashes" if pip else "--verify-hashes")
    if pip:
        args += ["--disable-pip-version-check", "--no-input", *PIP_NETWORK_ARGS]
    return args


def installer_argv(
    planned: PlannedStep,
    *,
    backend: Backend,
    python: Path,
    uv: str | None,
    requirements_file: Path,
    constraints_file: Path | None,
) -> list[str]:
    """The full command line for one step."""
    if backend == "pip":
        argv = [str(python), "-m", "pip", "install"]
    else:
        if uv is None:
            raise ConfigError("the uv backend was asked for but no uv executable was found")
        argv = [uv, "pip", "install", "--python", str(python)]
    argv += list(planned.args)
    argv += ["-r", str(requirements_file)]
    if constraints_file is not None:
        argv += ["-c", str(constraints_file)]
    return argv


def plan_to_json(plan: Plan) -> dict[str, object]:
    return {
        "stack": plan.spec.name,
        "spec": str(plan.spec.path),
        "spec_digest": plan.spec.digest,
        "python": plan.spec.python,
        "backend": plan.options.backend,
        "abi": {"package": plan.spec.abi.package, "version": plan.spec.abi.version,
                "local": plan.spec.abi.local, "cuda": plan.spec.abi.cuda,
                "protect": list(plan.spec.abi.protect), "adopt": plan.spec.abi.adopt},
        "steps": [
            {
                "number": s.number,
                "name": s.name,
                "role": s.role,
                "requirements": list(s.requirements),
                "locked_file": str(s.locked_file) if s.locked_file else None,
                "installer_args": list(s.args),
                "constraints": s.constrained,
                "env": dict(s.env),
            }
            for s in plan.steps
        ],
    }
