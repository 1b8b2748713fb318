"""``envbuild dist-step``: a short TP+SP+EP+FSDP2 training step under torchrun. Exit 7 on a
failure."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild import events, nvidia
from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    Subparsers,
    amount_arg,
    count_arg,
    path_arg,
    seconds_arg,
)
from envbuild.commands.smoke import (
    ReceiptFacts,
    TargetArgs,
    add_target_args,
    log_path,
    resolve_target,
    save_receipt,
    target_env,
)
from envbuild.errors import ExitCode
from envbuild.proof.diststep.launch import DistOptions, plan_mesh, run_dist_step

if TYPE_CHECKING:
    from envbuild.commands.documents import DistStepDocument
    from envbuild.proof.receipt import DistStepPayload

MAX_NPROC = 64  # processes on one node (DistOptions.validate says the same)
MAX_NODES = 4096
MAX_WORLD = MAX_NPROC * MAX_NODES


@dataclass(frozen=True)
class DistStepArgs(TargetArgs):
    """``dist-step``'s options."""

    nproc: int | None
    nnodes: int
    rdzv_endpoint: str | None
    rdzv_id: str
    dp: int
    tp: int
    ep: int
    steps: int
    cpu: bool
    bf16: bool
    bw_mb: float
    ckpt_dir: Path | None
    timeout: float
    stall_timeout: float


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "dist-step",
        help="a short TP+SP+EP+FSDP2 training step under torchrun",
        description=(
            "torchrun one process per GPU (gloo processes on CPU): a small transformer with a MoE "
            "layer on a dp x tp mesh with expert parallel, checked against a single-process "
            "reference, a DCP round trip and an all-reduce bandwidth probe. Exit 7 on a failure."
        ),
    )
    add_target_args(p)
    _add_launch_args(p)
    _add_mesh_args(p)
    _add_step_args(p)
    _add_limit_args(p)
    p.set_defaults(func=Handler(run, DistStepArgs))


def _add_launch_args(p: argparse.ArgumentParser) -> None:
    """How torchrun starts: processes per node, nodes, the rendezvous."""
    p.add_argument(
        "--nproc",
        type=count_arg(1, MAX_NPROC),
        help="processes on this node (default: one per GPU; 2 on CPU)",
    )
    p.add_argument(
        "--nnodes",
        type=count_arg(1, MAX_NODES),
        default=1,
        help="nodes (default 1); >1 needs --rdzv-endpoint",
    )
    p.add_argument(
        "--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous for multi-node runs"
    )
    p.add_argument(
        "--rdzv-id", default="envbuild-dist-step", help="rendezvous id, the same on every node"
    )


def _add_mesh_args(p: argparse.ArgumentParser) -> None:
    """The device mesh: data, tensor and expert parallel sizes."""
    p.add_argument(
        "--dp",
        type=count_arg(1, MAX_WORLD, special=(0,)),
        default=0,
        help="data-parallel size (default: world / tp)",
    )
    p.add_argument(
        "--tp",
        type=count_arg(1, MAX_WORLD, special=(0,)),
        default=0,
        help="tensor-parallel size (default: 2 if the world is even, else 1)",
    )
    p.add_argument(
        "--ep",
        type=count_arg(1, MAX_WORLD, special=(0,)),
        default=0,
        help="expert-parallel size (default: the world size)",
    )


def _add_step_args(p: argparse.ArgumentParser) -> None:
    """What the step does: its length, device, precision, probe size and checkpoint folder."""
    p.add_argument(
        "--steps", type=count_arg(2, 10_000), default=5, help="optimizer steps (default 5)"
    )
    p.add_argument("--cpu", action="store_true", help="gloo on CPU even where GPUs exist")
    p.add_argument("--bf16", action="store_true", help="bf16 parameters (looser parity tolerance)")
    p.add_argument(
        "--bw-mb",
        type=amount_arg(0, 65536, special=(-1.0,)),
        default=-1.0,
        metavar="MIB",
        help="all-reduce probe size in MiB (default 1024 on GPU, 8 on CPU; 0 skips)",
    )
    p.add_argument(
        "--ckpt-dir",
        type=path_arg,
        metavar="DIR",
        help=(
            "DCP checkpoint folder for the round trip; must be shared by all nodes (default: a"
            " temporary folder on one node, <root>/checkpoints/envbuild-dist-step-<rdzv-id> across"
            " nodes)"
        ),
    )


def _add_limit_args(p: argparse.ArgumentParser) -> None:
    """When the run gives up: the whole run's deadline, a silent rank's."""
    p.add_argument(
        "--timeout",
        type=seconds_arg(),
        default=600.0,
        metavar="S",
        help="give up after S seconds (default 600)",
    )
    p.add_argument(
        "--stall-timeout",
        type=seconds_arg(),
        default=60.0,
        metavar="S",
        help=(
            "stop when a rank sends no heartbeat for S seconds (stopped, killed or wedged;"
            " default 60)"
        ),
    )


def _options(args: DistStepArgs, gpus: int, ckpt_dir: Path | None) -> DistOptions:
    return DistOptions(
        nproc=args.nproc,
        nnodes=args.nnodes,
        rdzv_endpoint=args.rdzv_endpoint,
        rdzv_id=args.rdzv_id,
        dp=args.dp,
        tp=args.tp,
        ep=args.ep,
        steps=args.steps,
        cpu=args.cpu or gpus == 0,
        bf16=args.bf16,
        bw_mb=args.bw_mb,
        timeout=args.timeout,
        stall_timeout=args.stall_timeout,
        ckpt_dir=ckpt_dir,
    )


def run(args: DistStepArgs) -> int:
    _options(args, 0, None).validate()  # the arguments first (exit 2), then the host (exit 3)
    if args.nproc:
        plan_mesh(args.nproc * args.nnodes, args.dp, args.tp, args.ep)
    spec, paths, python = resolve_target(args)
    gpus = 0 if args.cpu else len(nvidia.visible_gpus())
    opts = _options(
        args,
        gpus,
        args.ckpt_dir
        or (paths.checkpoints / f"envbuild-dist-step-{args.rdzv_id}" if args.nnodes > 1 else None),
    )
    nproc = args.nproc or (gpus or 2)
    opts.validate()
    # before anything is launched or written
    plan_mesh(nproc * args.nnodes, args.dp, args.tp, args.ep)
    regime = (
        f"torchrun-{'standalone' if args.nnodes == 1 and not args.rdzv_endpoint else 'c10d'} "
        f"{args.nnodes}x{nproc} {'gloo' if opts.cpu else 'nccl'}"
    )
    facts = ReceiptFacts.start(args, spec, python, regime)
    log = log_path(paths, "dist-step.log")
    res = run_dist_step(
        python, opts, gpu_count=gpus, log_file=log, base_env=target_env(spec, paths)
    )
    r = res.result
    mesh = r.get("mesh", {})
    regime += f" dp{mesh.get('dp')}xtp{mesh.get('tp')} ep{mesh.get('ep')}"
    payload: DistStepPayload = {  # allreduce_expected: below
        **r,  # type: ignore[typeddict-item]
        "ok": res.ok,
        "returncode": res.returncode,
        "torchrun_seconds": res.seconds,
        "torchrun_launched_at": res.started,
        "launch_regime": regime,
    }
    if not opts.cpu:
        from envbuild.proof.diststep import topology

        expected = topology.judge(r)
        if expected is not None:
            payload["allreduce_expected"] = expected
            level: events.Level = "warn" if expected["verdict"] == "warn" else "info"
            events.emit(level, topology.describe(expected))
    receipt = save_receipt(paths, "dist-step", payload, spec=spec, python=python, facts=facts)
    if args.json:
        doc: DistStepDocument = {"schema": "envbuild.dist-step/1", **payload, "receipt": receipt}
        ui.print_json(doc)
    else:
        verdict = "dist-step passed" if res.ok else "dist-step FAILED"
        torchrun = f" (torchrun exit {res.returncode})" if res.returncode else ""
        ui.print_text(
            f"{verdict} in {res.seconds:.1f} s{torchrun}: {regime}, world {r.get('world_size')}, "
            f"torch {r.get('versions', {}).get('torch')}"
        )
        ui.print_table(None, ["", "result"], result_rows(r), max_width=ui.WIDTH, keep=1)
        for what, where in (("receipt", receipt), ("log", log)):
            if where:
                ui.print_text(f"  {what:<8}{where}")
    return 0 if res.ok else int(ExitCode.VERIFY)


def result_rows(r: Mapping[str, Any]) -> list[list[str]]:
    """The checks' verdicts, then what they measured: short cells, a table within ui.WIDTH."""
    par, ck, t, bw = (
        r.get("parity", {}),
        r.get("checkpoint", {}),
        r.get("timing", {}),
        r.get("allreduce"),
    )
    rt = r.get("routing", {})
    tol = par.get("tolerance", {})
    rows = [
        [name.replace("_", " "), "pass" if ok else "FAIL"]
        for name, ok in r.get("checks", {}).items()
    ]
    rows += [
        ["losses", " ".join(f"{v:.4f}" for v in r.get("losses", []))],
        [
            "vs reference",
            (
                f"loss {par.get('max_loss_diff', 0):.1e} (tol {tol.get('loss')}), grad norm rel"
                f" {par.get('max_grad_norm_rel_diff', 0):.1e}, weights"
                f" {par.get('max_weight_abs_diff', 0):.1e}"
            ),
        ],
        [
            "routing",
            (
                f"{rt.get('flips', 0)} of {rt.get('tokens_routed', 0)} top-k choices differ from"
                f" the reference's (widest gap {rt.get('max_flip_gap', 0):.1e}, near-tie tol"
                f" {rt.get('tolerance')})"
            ),
        ],
        [
            "checkpoint",
            "eval loss saved {}, perturbed {}, loaded {}".format(
                *(
                    _num(ck.get(k))
                    for k in ("eval_loss_saved", "eval_loss_perturbed", "eval_loss_loaded")
                )
            ),
        ],
        [
            "step time",
            (
                f"first {1e3 * t.get('first_step_seconds', 0):.1f} ms, steady"
                f" {1e3 * t.get('steady_step_seconds', 0):.1f} ms (max"
                f" {1e3 * t.get('steady_step_max_seconds', 0):.1f})"
            ),
        ],
        [
            "all-reduce",
            (
                f"busbw {bw['busbw_gbps']:.1f} GB/s ({bw['bytes'] / 2**20:.0f} MiB)"
                if bw
                else "not measured (one rank)"
            ),
        ],
    ]
    for rk in r.get("ranks", []):
        mem = ", ".join(f"{k} {v:.0f}" for k, v in rk.get("peak_memory", {}).items())
        rows.append(
            [f"rank {rk.get('rank')} peak", f"{mem} ({rk.get('host')}, {rk.get('device')})"]
        )
    return rows


def _num(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (int, float)) else str(value)
