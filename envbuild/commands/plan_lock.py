"""``plan --lock FILE``: the stages a lock installs here, and what each prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.commands import ui
from envbuild.commands.selection import (
    InstallArgs,
    lock_request,
)
from envbuild.gate.selection import refuse
from envbuild.projectlock.run import (
    DEFAULT_ROOT,
    LockRequest,
    Prepared,
    adopt,
    prepare_lock,
)
from envbuild.projectlock.stages import STAGE_WORDS

if TYPE_CHECKING:
    from envbuild.commands.documents import (
        PlanLockDocument,
    )


def plan_from_lock(args: InstallArgs, lock: Path) -> int:
    """``plan --lock FILE``: the chosen environment, the gate's verdict and the stages (no network,
    no venv)."""
    req = lock_request(args, lock)
    # the stages first, then the refusal (exit 8)
    prepared = prepare_lock(req, refusing=False)
    # what provision --venv would keep there is not installed (nor checked offline)
    if req.venv is not None:
        prepared = adopt(prepared, req.venv, req.replace_torch)
    if req.wheelhouse:  # every file from the wheelhouse, each checked as provision checks it
        from dataclasses import replace

        from envbuild.projectlock.offlinefiles import check_files, in_wheelhouse, wheelhouse_folder

        folder = wheelhouse_folder(req.wheelhouse)
        check_files(prepared.plan, folder, prepared.plan.stages)
        prepared = replace(prepared, plan=in_wheelhouse(prepared.plan, folder))
    builds = _build_notes(args, prepared, req)
    if args.json:
        doc: PlanLockDocument = {
            "schema": "envbuild.plan.lock/1",
            **prepared.plan.to_json(),
            "builds": builds,
            "gate": prepared.report.to_json(),
        }
        ui.print_json(doc)
    else:
        _print_plan(prepared)
        for name, note in builds.items():
            ui.print_text(f"build {name}: {note}")
        if builds:
            ui.print_text(f"builds against torch: {_when_built(args, prepared)}")
    # exit 8 after the stages, as provision would
    refuse(prepared.chosen, list(prepared.failing), req.accept, rebuild=req.rebuild_mismatched)
    return 0


def _build_notes(args: InstallArgs, prepared: Prepared, req: LockRequest) -> dict[str, str]:
    """{name: a cached built wheel, or that it compiles} of the builds stage
    (``projectlock.builds``)."""
    from envbuild.projectlock.builds import caches, plan_notes
    from envbuild.projectlock.offlinefiles import wheelhouse_folder

    if not prepared.plan.stage("builds"):
        return {}
    root = Path(args.root or DEFAULT_ROOT).expanduser()
    venv = Path(args.venv).expanduser() if args.venv else root / "venv"
    folder = wheelhouse_folder(req.wheelhouse) if req.wheelhouse else None
    return plan_notes(prepared.plan, caches(root, folder), venv / "bin" / "python")


def _when_built(args: InstallArgs, prepared: Prepared) -> str:
    """When provision makes the builds against torch (``provision.prepare``)."""
    from envbuild.installer import installer_for

    if prepared.adopted is not None:
        return (
            "made in its own step, against the environment's torch (the exception: the torch"
            " is the adopted environment's, not in uv's cache)"
        )
    if installer_for(args.backend).name != "uv":
        return "made in its own step, against the installed torch (the exception: the pip backend)"
    return (
        "made before anything is installed, against the lock's torch in a scratch venv (the"
        " earlier stages linked from uv's cache); in its own step where they are already installed"
    )


def _print_plan(prepared: Prepared) -> None:
    from rich.markup import escape  # a cell is text, never markup: "[tool.uv]" stays as written

    chosen, plan, report = prepared.chosen, prepared.plan, prepared.report
    ui.print_text(f"lock {chosen.path} ({chosen.lock.format}, sha256 {chosen.sha256[:16]}...)")
    ui.print_text(
        f"environment: {chosen.env.name} (python {chosen.env.python}); torch {plan.torch.version}"
    )
    if chosen.sync:
        ui.print_text(f"selection: what `{chosen.sync}` installs (uv export says which packages)")
    accepted = "; ".join(
        [
            *(f"{f.package} [{f.rule}] accepted: {f.accepted}" for f in report.accepted),
            *(
                f"{p.entry.name} [extension-abi] rebuilt from its sdist: --rebuild-mismatched"
                for p in plan.placed
                if p.rebuilt
            ),
        ]
    )
    if prepared.failing:
        ui.print_text(
            f"gate: FAIL ({len(prepared.failing)} finding(s) below): provision --lock refuses this"
            " environment"
        )
    else:
        ui.print_text("gate: ok" + (f" ({accepted})" if accepted else ""))
    stages = plan.stages
    for n, stage in enumerate(stages, 1):
        rows = [
            [
                escape(c)
                for c in (
                    p.entry.name,
                    p.entry.version or "",
                    p.artifact.filename if p.artifact else p.line,
                    p.why,
                )
            ]
            for p in plan.stage(stage)
        ]
        ui.print_table(
            f"stage {n}/{len(stages)} {stage}: {STAGE_WORDS[stage]}",
            ["package", "version", "file", "why"],
            rows,
            max_width=100,
            keep=1,
        )
    already = set(prepared.already)  # an adopted venv's packages at the locked version: one line
    for name, why in plan.left_out:
        if name not in already:
            ui.print_text(f"not installed: {name}: {why}")
    if already:
        ui.print_text(_already_line(prepared))


def _already_line(prepared: Prepared) -> str:
    """One line for what an adopted environment already holds at the locked version (50 on a GPU
    image): how many, the baseline's among them by name; ``--json``'s ``left_out`` lists each."""
    full = prepared.full or prepared.plan
    base = sorted(p.entry.name for p in full.stage("torch") if p.entry.name in prepared.already)
    others = len(prepared.already) - len(base)
    named = f"torch's stage: {', '.join(base)}" if base else ""
    if others:
        named += f"{'; and ' if named else ''}{others} other package(s)"
    return (
        f"not installed: {len(prepared.already)} package(s) already in the adopted environment at"
        f" the locked version, their RECORD's files present ({named}); `--json` lists each in"
        " left_out"
    )
