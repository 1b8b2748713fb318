"""The stages as a stack that ``envbuild.provision`` runs: one step per stage, each from a
hash-pinned file of the lock's exact URLs, ``--no-deps``; ``--no-index`` unless the stage builds
something in isolation, whose build requirements then come from the project's indexes
(``projectlock.buildreqs``).

Nothing new runs the install: the data root, the venv, the manifest (resume, and the no-op
re-run of a finished environment), the baseline frozen after the torch stage, the ABI guard after
every stage, the final ``import torch`` and the receipt are provision's own. The spec is made in
memory (``StackSpec``); its ``path`` is the lock and its ``digest`` covers the lock's sha256 and
the chosen environment, so a receipt names where its packages came from.
"""

from __future__ import annotations

import re
from pathlib import Path

from envbuild.projectlock.buildreqs import BuildSources, build_sources, builds_isolated, step_env
from envbuild.projectlock.stages import ORDER, STAGE_WORDS, Placed, Stage, StagePlan
from envbuild.spec import ABI, Host, Layout, StackSpec, Step, spec_digest

__all__ = ["stage_files", "stage_line", "stage_pins", "stack_for", "step_stage"]

_NAME = re.compile(r"[^A-Za-z0-9._-]+")


# ``--home``: the links a lock's environment gets, as the stacks' layouts name them ($HOME/venv,
# $HOME/data)
HOME_LINKS = {"venv": "venv", "data": "data"}


def stack_for(
    plan: StagePlan,
    *,
    root: str,
    adopt: bool = False,
    pip_backend: bool = False,
    torch_version: str | None = None,
    digest_plan: StagePlan | None = None,
    links: dict[str, str] | None = None,
    build: BuildSources | None = None,
) -> StackSpec:
    """The stack provision runs for ``plan``. ``adopt``: the venv's torch is the lock's and is kept
    (no stage installs it; the packages already there are left out of ``plan``);
    ``torch_version``: what the adopted torch says at run time (the baseline's version);
    ``digest_plan``: the plan before adoption left anything out. The spec's digest is taken of it,
    so a re-run, which finds what the first run installed already there, is the same stack (and a
    finished one is a no-op). ``build``: where isolated builds get their requirements
    (``projectlock.buildreqs``; by default the project's indexes beside the lock)."""
    chosen = plan.chosen
    torch = plan.torch
    version = torch_version or torch.version or ""
    local = version.split("+", 1)[1] if "+" in version else None
    runtime = [p.entry.name for p in plan.stage("torch") if p.entry is not torch]
    triton = next(
        (n for n in runtime if n in ("triton", "pytorch-triton", "pytorch-triton-rocm")), None
    )
    steps = _stage_steps(plan, adopt, pip_backend, build or build_sources(chosen.source.project))
    name = _NAME.sub("-", f"lock-{chosen.path.parent.name or 'project'}").strip("-.")[:60] or "lock"
    return StackSpec(
        path=chosen.path,
        name=name,
        description=f"{chosen.path} ({chosen.env.name})",
        python=chosen.env.python,
        abi=ABI(
            package="torch",
            version=version,
            local=local,
            protect=tuple(sorted(runtime)),
            triton_provider=triton,
            adopt=adopt,
        ),
        layout=Layout(root=root, links=dict(links or {}), min_free_gb=1.0),
        host=Host(),
        env={},
        steps=steps,
        digest=spec_digest(
            {
                "lock_sha256": chosen.sha256,
                "environment": chosen.env.name,
                "adopt": adopt,
                "stages": (
                    _digest_stages(digest_plan, adopt, pip_backend)
                    if digest_plan
                    else {s.name: s.packages for s in steps}
                ),
            }
        ),
    )


def _stage_steps(
    plan: StagePlan, adopt: bool, pip_backend: bool, build: BuildSources
) -> tuple[Step, ...]:
    """One step per stage that installs anything: no deps, from its hash-pinned lines; a stage
    with isolated builds resolves their requirements from ``build``'s indexes, as uv's would."""
    steps = []
    for stage in plan.stages:
        placed = stage_pins(plan, stage, adopt=adopt)
        if not placed:
            continue
        packages = tuple(_shown(p, pip_backend) for p in placed)
        if any(builds_isolated(p) for p in placed):  # builds resolve their requirements, as uv's
            steps.append(
                Step(
                    name=stage,
                    packages=packages,
                    no_deps=True,
                    no_index=build.no_index,
                    index_url=build.index_url,
                    extra_index_urls=build.extra_index_urls,
                    find_links=build.find_links,
                    env=step_env(build),
                )
            )
        else:
            steps.append(
                Step(
                    name=stage,
                    packages=packages,
                    no_deps=True,
                    no_index=True,
                    no_build_isolation=stage == "builds",
                )
            )
    return tuple(steps)


def stage_pins(plan: StagePlan, stage: Stage, *, adopt: bool = False) -> list[Placed]:
    """The typed pins of ``stage``'s step: its packages of ``plan``, less an adopted torch (the
    venv's, kept). Every writer of a step's files takes them from here, never from the step's
    ``name==version`` names."""
    return [p for p in plan.stage(stage) if not (adopt and p.entry is plan.torch)]


def _digest_stages(plan: StagePlan, adopt: bool, pip_backend: bool) -> dict[str, tuple[str, ...]]:
    return {
        stage: tuple(_shown(p, pip_backend) for p in stage_pins(plan, stage, adopt=adopt))
        for stage in plan.stages
    }


def _shown(p: Placed, pip_backend: bool) -> str:
    """The step's package as the plan and the guard name it: ``name==version`` (a PEP 508
    requirement; the file the installer reads holds the exact URL). The pip backend installs the
    project from its folder (pip's hash mode refuses an editable line)."""
    if p.stage == "project" and pip_backend:
        return (
            p.line
            if not p.line.startswith("-e ")
            else f"{p.entry.name} @ {Path(p.line[3:]).as_uri()}"
        )
    if p.entry.version and p.stage != "project":
        return f"{p.entry.name}=={p.entry.version}"
    return p.entry.name


def stage_files(
    plan: StagePlan, spec: StackSpec, folder: Path, *, pip_backend: bool = False
) -> dict[str, Path]:
    """Write one hash-pinned requirements file per step into ``folder``: {step name: file}. The
    pip backend's project step is left unlocked (pip refuses ``-e`` in hash-checking mode)."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for n, step in enumerate(spec.steps, 1):
        if step.name == "project" and pip_backend:
            continue
        stage = step_stage(step.name)
        lines = [stage_line(p) for p in stage_pins(plan, stage, adopt=spec.abi.adopt)]
        path = folder / f"{n:02d}-{step.name}.txt"
        text = (
            f"# envbuild provision --lock {plan.chosen.path} ({plan.chosen.env.name}), lock sha256 "
            f"{plan.chosen.sha256}\n# stage {step.name}: {STAGE_WORDS[stage]}\n"
            + "\n".join(lines)
            + "\n"
        )
        path.write_text(text, encoding="utf-8")
        out[step.name] = path
    return out


def stage_line(p: Placed) -> str:
    """The line of ``p`` in its stage's file: the exact URL and sha256, and the note that has the
    installer record it as uv sync does: for a file from a package index, that index
    (``spec.stagefile.index_note``); for a git pin, the lock's git source (``git_note``)."""
    from envbuild.spec.stagefile import git_note, index_note

    if p.git is not None:
        return p.line + git_note(p.git.source) if p.git.source else p.line
    return p.line + index_note(p.index) if p.index is not None and p.artifact else p.line


def step_stage(name: str) -> Stage:
    """A step's stage: a stack made from a lock names each step by its stage."""
    stage = next((s for s in ORDER if s == name), None)
    assert stage is not None, name
    return stage
