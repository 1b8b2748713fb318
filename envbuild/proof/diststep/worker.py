"""envbuild's distributed step: one torchrun worker (standalone: no envbuild import).

A small transformer (block 0 dense FFN, block 1 MoE) trained for a few AdamW steps, composed
the way the production lane is (after torchtitan v0.2.2), so a passing step has run the same
collectives:

* a 2-D mesh ``(dp, tp)`` and a second mesh ``(efsdp, ep)`` over the same ranks;
* tensor parallel + sequence parallel on attention and MLP projections, loss parallel;
* expert parallel: an all-to-all token dispatch and combine around the local experts;
* FSDP2 (``fully_shard``) over dp (experts over efsdp, with the dp divide factor).

Every rank also trains an unsharded copy on the global batch; the run checks that the loss is
finite and falls, matches that reference, that a DCP save / perturb / load restores the model
bit for bit, and it measures an all-reduce bus bandwidth, step times and peak memory.

Routing: the sharded model routes each token to the experts the reference chose for it at the
same step (the router's probabilities still weight them, so the gradients are the same formula).
A top-k choice on a near tie can flip under a reduction order that differs in the last bit, and
one flipped token sends a different gradient to two experts: the run would then diverge from
the reference for a reason that is not a fault. Each rank still counts where its own top-k
differs from the reference's and by how much its router preferred its own choice; the
``routing_matches_reference`` check passes only when every such flip is a near tie.

Heartbeats (``--heartbeat-dir``): every rank's thread rewrites ``rank-<R>.json`` each second with
its pid, the phase it is in and the last collective it entered, so the launcher can name a rank
that stopped answering (a stopped or wedged process writes nothing) and what the others wait on.
The local-rank-0 process of every node writes one JSON result to ``--out``; exit 0 = pass.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed._functional_collectives import all_to_all_single_autograd
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # torch 2.4 / 2.5 (newer torch re-exports them from here without __all__)
    from torch.distributed._composable.fsdp import (  # type: ignore[attr-defined]
        MixedPrecisionPolicy,
        fully_shard,
    )
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

BASELINE_KEYS = (
    "TORCH_NCCL_HIGH_PRIORITY",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "NCCL_MNNVL_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_DEBUG",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)


# ----------------------------------------------------------------------------- model


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1: the local head count under tensor parallel
        q, k, v = (
            w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Experts(nn.Module):
    """Stacked expert weights; input is tokens sorted by expert, with a count per expert."""

    def __init__(self, n: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(n, dim, hidden) / math.sqrt(dim))
        self.w2 = nn.Parameter(torch.randn(n, hidden, dim) / math.sqrt(hidden))

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        w1 = self.w1.to_local() if isinstance(self.w1, DTensor) else self.w1
        w2 = self.w2.to_local() if isinstance(self.w2, DTensor) else self.w2
        outs = [
            F.gelu(chunk @ w1[e]) @ w2[e] for e, chunk in enumerate(torch.split(x, counts.tolist()))
        ]
        return torch.cat(outs) if outs else x


class MoE(nn.Module):
    def __init__(self, dim: int, hidden: int, n_experts: int, top_k: int = 2) -> None:
        super().__init__()
        self.n_experts, self.top_k = n_experts, top_k
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.experts = Experts(n_experts, dim, hidden)
        # (tokens, top_k) experts to use instead of this top-k
        self.route: torch.Tensor | None = None
        self.last_expert: torch.Tensor | None = None
        self.flips = 0  # tokens whose own top-k set differs from ``route``
        self.flip_gap = 0.0  # the largest router preference for its own choice over ``route``

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weight, expert = torch.topk(probs, self.top_k, dim=-1)
        if self.route is not None:
            with torch.no_grad():
                differ = (expert.sort(-1).values != self.route.sort(-1).values).any(-1)
                if bool(differ.any()):
                    gap = weight.sum(-1) - probs.gather(-1, self.route).sum(-1)
                    self.flips += int(differ.sum())
                    self.flip_gap = max(self.flip_gap, float(gap[differ].max()))
            expert = self.route
            weight = probs.gather(-1, expert)
        self.last_expert = expert.detach()
        weight = (weight / weight.sum(-1, keepdim=True)).to(x.dtype)
        flat = expert.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = torch.arange(x.shape[0], device=x.device).repeat_interleave(self.top_k)[order]
        counts = torch.bincount(flat, minlength=self.n_experts)
        y = self.experts(x[token], counts) * weight.reshape(-1)[order, None]
        out = torch.zeros_like(x).index_add(0, token, y)
        return out.view(shape)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, n_experts: int, moe: bool) -> None:
        super().__init__()
        self.is_moe = moe
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.feed_forward = MoE(dim, hidden, n_experts) if moe else FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(
        self, vocab: int, dim: int, heads: int, hidden: int, n_experts: int, n_layers: int
    ) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            Block(dim, heads, hidden, n_experts, moe=i % 2 == 1) for i in range(n_layers)
        )
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


# ----------------------------------------------------------------------------- parallelism


class ExpertParallel(ParallelStyle):
    """Experts' weights Shard(0) on the ep mesh; all-to-all token dispatch in, combine out."""

    def _partition_fn(self, name: str, module: nn.Module, mesh: DeviceMesh) -> None:
        for pname, p in list(module.named_parameters(recurse=False)):
            module.register_parameter(pname, nn.Parameter(distribute_tensor(p, mesh, [Shard(0)])))

    def _dispatch(
        self, mod: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor], mesh: DeviceMesh
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, counts = inputs
        ep, group = mesh.size(), mesh.get_group()
        recv = torch.empty_like(counts)
        dist.all_to_all_single(recv, counts, group=group)
        n = counts.numel() // ep
        self.in_splits = counts.view(ep, n).sum(1).tolist()
        self.out_splits = recv.view(ep, n).sum(1).tolist()
        x = all_to_all_single_autograd(x, self.out_splits, self.in_splits, group)
        c = recv.view(ep, n)
        labels = torch.repeat_interleave(torch.arange(ep * n, device=x.device) % n, c.reshape(-1))
        self.perm = torch.argsort(labels, stable=True)  # rank-major -> expert-major
        return x[self.perm], c.sum(0)

    def _combine(self, mod: nn.Module, out: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
        inv = torch.empty_like(self.perm)
        inv[self.perm] = torch.arange(len(self.perm), device=self.perm.device)
        return all_to_all_single_autograd(
            out[inv], self.in_splits, self.out_splits, mesh.get_group()
        )

    def _apply(self, module: nn.Module, mesh: DeviceMesh) -> nn.Module:
        # torch types input_fn and output_fn as returning None; it uses what they return
        return distribute_module(
            module, mesh, self._partition_fn, input_fn=self._dispatch, output_fn=self._combine
        )  # type: ignore[arg-type]


def apply_tp_sp(model: Transformer, tp_mesh: DeviceMesh) -> None:
    parallelize_module(
        model,
        tp_mesh,
        {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(
                input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False
            ),
        },
    )
    for block in model.layers:
        plan = {
            "attention_norm": SequenceParallel(),
            "ffn_norm": SequenceParallel(),
            "attention": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            ),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        }
        # the MoE runs on this rank's sequence shard: every rank owns distinct tokens
        if block.is_moe:
            plan["feed_forward"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),), use_local_output=True
            )
            plan["feed_forward.router"] = SequenceParallel(sequence_dim=0, use_local_output=True)
        else:
            plan["feed_forward"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
            plan["feed_forward.w1"] = ColwiseParallel()
            plan["feed_forward.w3"] = ColwiseParallel()
            plan["feed_forward.w2"] = RowwiseParallel(output_layouts=Shard(1))
        parallelize_module(block, tp_mesh, plan)


def set_divide_factor(
    module: Any,
    factor: int,
    shard_size: int,
    gloo: bool,  # module: an FSDPModule
) -> None:
    """Expert grads sum over all dp ranks' tokens: divide by dp, not by the efsdp size: each rank's
    expert gradient already summed over the experts' data-parallel group."""
    if factor == shard_size:
        return  # FSDP's default average is right
    # gloo has no PREMUL_SUM; forcing SUM on a 1-rank group divides twice (2.13)
    if gloo and shard_size > 1:
        module.set_force_sum_reduction_for_comms(True)
    fn = (
        getattr(module, "set_gradient_divide_factor", None)
        or module.set_reduce_scatter_divide_factor
    )
    fn(float(factor))


# ----------------------------------------------------------------------------- heartbeats


class Heartbeat:
    """Rewrites ``<folder>/rank-<R>.json`` every ``interval`` s from a daemon thread: pid, phase,
    the last collective entered (and whether it returned). torch.distributed's collectives are
    wrapped to record their names; the thread runs while the main thread waits inside one (the
    bindings release the GIL), so only a stopped or wedged process goes quiet."""

    OPS = (
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter_tensor",
        "all_to_all_single",
        "broadcast",
        "barrier",
        "send",
        "recv",
        "gather",
        "scatter",
    )
    FUNCOL_OPS = (
        "all_reduce",
        "all_gather_tensor",
        "reduce_scatter_tensor",
        "all_to_all_single",
        "broadcast",
    )

    def __init__(self, folder: str | None, rank: int, interval: float = 1.0) -> None:
        self.path = os.path.join(folder, f"rank-{rank}.json") if folder else None
        self.state: dict[str, Any] = {
            "rank": rank,
            "pid": os.getpid(),
            "host": os.uname().nodename,
            "phase": "start",
            "op": None,
            "op_seq": 0,
            "in_op": False,
        }
        self.interval = interval
        # each phase, the time.time() it began and this process's CPU seconds by then: where the
        # run's seconds went (bench/bench_rerun.py). The first, from the process's start: the
        # interpreter and the imports of torch and torch.distributed.
        self.timeline: list[tuple[str, float, float]] = [
            ("imports", process_started(), 0.0),
            ("start", time.time(), time.process_time()),
        ]
        if self.path:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self.write()
            threading.Thread(target=self._loop, daemon=True, name="envbuild-heartbeat").start()
            for name in self.OPS:
                if hasattr(dist, name):
                    setattr(dist, name, self._wrap(name, getattr(dist, name)))
            # DTensor and the expert all-to-all issue functional collectives (async: "issued")
            import torch.distributed._functional_collectives as funcol

            for name in self.FUNCOL_OPS:
                if hasattr(funcol, name):
                    setattr(funcol, name, self._wrap(f"funcol.{name}", getattr(funcol, name)))
            global all_to_all_single_autograd
            all_to_all_single_autograd = self._wrap(
                "funcol.all_to_all_single_autograd", all_to_all_single_autograd
            )

    def phase(self, text: str) -> None:
        self.state["phase"] = text
        self.timeline.append((text, time.time(), time.process_time()))
        self.write()

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.state.update(op=name, op_seq=int(self.state["op_seq"]) + 1, in_op=True)
            try:
                return fn(*args, **kwargs)
            finally:
                self.state["in_op"] = False

        return wrapped

    def write(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({**self.state, "time": time.time()}, f)
            os.replace(tmp, self.path)
        except OSError:
            pass

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval)
            self.write()


# ----------------------------------------------------------------------------- helpers


def process_started() -> float:
    """When this process started (``time.time()`` scale, 10 ms ticks), from ``/proc``; now
    elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # field 22, starttime: ticks after boot
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.time() - (
            time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        )
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def grad_norm(params: list[nn.Parameter]) -> torch.Tensor:
    total = None
    for p in params:
        if p.grad is None:
            continue
        n = torch.linalg.vector_norm(p.grad.float())
        if isinstance(n, DTensor):
            n = n.full_tensor()
        total = n.pow(2) if total is None else total + n.pow(2)
    assert total is not None
    return total.sqrt()


def clip_(params: list[nn.Parameter], norm: torch.Tensor, max_norm: float) -> None:
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(coef.to(p.grad.dtype) if not isinstance(p.grad, DTensor) else coef.item())


def ce_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def peak_memory_mb(dev: torch.device) -> dict[str, float]:
    if dev.type == "cuda":
        return {
            "allocated_mb": torch.cuda.max_memory_allocated(dev) / 2**20,
            "reserved_mb": torch.cuda.max_memory_reserved(dev) / 2**20,
        }
    return {"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bus_bandwidth(
    dev: torch.device, world: int, mbytes: float, iters: int
) -> dict[str, float] | None:
    if world == 1 or mbytes <= 0:
        return None
    n = int(mbytes * 2**20) // 4
    buf = torch.randn(n, device=dev)
    for _ in range(2):
        dist.all_reduce(buf)
    sync(dev)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync(dev)
    seconds = (time.perf_counter() - t0) / iters
    t = torch.tensor([seconds], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank defines the collective's time
    seconds = float(t.item())
    algbw = n * 4 / seconds / 1e9
    return {
        "bytes": n * 4,
        "seconds": seconds,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world - 1) / world,
    }


# ----------------------------------------------------------------------------- the run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out", required=True, help="JSON result file (written by each node's local rank 0)"
    )
    p.add_argument("--ckpt-dir", required=True, help="DCP checkpoint folder, shared by all ranks")
    p.add_argument("--cpu", action="store_true", help="gloo on CPU even where GPUs exist")
    p.add_argument("--dp", type=int, default=0)
    p.add_argument("--tp", type=int, default=0)
    p.add_argument("--ep", type=int, default=0)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument(
        "--bf16", action="store_true", help="bf16 params (MixedPrecisionPolicy), looser parity"
    )
    p.add_argument(
        "--bw-mb",
        type=float,
        default=-1,
        help="all-reduce probe size in MiB (default 1024 GPU, 8 CPU)",
    )
    p.add_argument("--bw-iters", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=2, help="sequences per dp rank")
    p.add_argument(
        "--heartbeat-dir", help="write rank-<R>.json heartbeats here (the launcher reads them)"
    )
    return p.parse_args(argv)


def choose_layout(world: int, dp: int, tp: int, ep: int) -> tuple[int, int, int]:
    if not tp:
        tp = world // dp if dp else (2 if world % 2 == 0 else 1)
    if not dp:
        dp = world // tp
    if not ep:
        ep = world
    if dp * tp != world:
        raise SystemExit(f"dp x tp = {dp} x {tp} does not equal the world size {world}")
    if world % ep:
        raise SystemExit(f"ep = {ep} does not divide the world size {world}")
    return dp, tp, ep


@dataclass
class Rank:
    """Who and where this process is: its rank, its device, its process group's backend."""

    rank: int
    world: int
    local_rank: int
    dev: torch.device
    use_cuda: bool
    beat: Heartbeat
    t_start: float
    t_init: float = 0.0

    @property
    def backend(self) -> str:
        return "nccl" if self.use_cuda else "gloo"


def start(args: argparse.Namespace) -> Rank:
    """This rank's device and process group (NCCL on its GPU, else gloo on the CPU)."""
    # DTensor logs a warning per multi-dim redistribute (grad norms over two meshes): harmless here
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    t_start = time.perf_counter()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    beat = Heartbeat(args.heartbeat_dir, rank)
    beat.phase("init_process_group")
    use_cuda = torch.cuda.is_available() and not args.cpu
    if use_cuda:
        # before init_process_group: NCCL binds the communicator to the current device
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        dev = torch.device("cpu")
    me = Rank(rank, world, local_rank, dev, use_cuda, beat, t_start)
    dist.init_process_group(
        me.backend, timeout=timedelta(minutes=5), **({"device_id": dev} if use_cuda else {})
    )
    me.t_init = time.perf_counter() - t_start
    return me


@dataclass(frozen=True)
class Shape:
    """The mesh and the model's sizes for this world, and the tolerances of the comparison."""

    dp: int
    tp: int
    ep: int
    n_experts: int
    heads: int
    dim: int
    dtype_tol: dict[str, float]
    route_tol: float


def shape_of(args: argparse.Namespace, world: int) -> Shape:
    """The layout (``choose_layout``) and the model that fits it."""
    dp, tp, ep = choose_layout(world, args.dp, args.tp, args.ep)
    heads = 8 if 8 % tp == 0 else tp
    if args.seq % tp:
        raise SystemExit(f"--seq {args.seq} must divide by tp = {tp}")
    # bf16 params: the sharded run rounds at other points than the fp32 reference (reduction
    # order over TP/EP ranks); after 5 Adam steps weights drift by ~0.07 on 2x H200 (measured).
    dtype_tol = (
        {"loss": 5e-2, "grad_norm": 1e-1, "weights": 2e-1}
        if args.bf16
        else {"loss": 1e-4, "grad_norm": 1e-4, "weights": 2e-3}
    )
    return Shape(
        dp=dp,
        tp=tp,
        ep=ep,
        n_experts=8 if 8 % ep == 0 else 2 * ep,
        heads=heads,
        dim=max(args.dim, heads * 8),
        dtype_tol=dtype_tol,
        # A flipped top-k choice is a near tie when the router preferred its own experts by less
        # than this (summed probabilities): the rounding noise of the router's logits, ~1e-6 in
        # fp32 here.
        route_tol=1e-2 if args.bf16 else 1e-4,
    )


@dataclass
class Reference:
    """The unsharded model trained on the global batch: losses, grad norms, expert choices."""

    model: Transformer
    losses: list[float] = field(default_factory=list)
    norms: list[float] = field(default_factory=list)
    routes: list[list[torch.Tensor]] = field(default_factory=list)  # [step][moe] -> (B, S, k)


def reference_run(
    args: argparse.Namespace, ref: Transformer, x_all: torch.Tensor, y_all: torch.Tensor
) -> Reference:
    """``args.steps`` AdamW steps of the unsharded copy on the global batch."""
    out = Reference(ref)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    moes = [b.feed_forward for b in ref.layers if b.is_moe]
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = ce_loss(ref(x_all), y_all)
        out.routes.append([m.last_expert.view(x_all.shape[0], x_all.shape[1], -1) for m in moes])
        loss.backward()
        norm = grad_norm(list(ref.parameters()))
        clip_(list(ref.parameters()), norm, 1.0)
        opt.step()
        out.losses.append(float(loss.detach()))
        out.norms.append(float(norm))
    return out


@dataclass
class Sharded:
    """The model sharded TP/SP -> EP -> FSDP2, its optimizer, and this rank's part of the batch."""

    model: Transformer
    params: list[nn.Parameter]
    opt: torch.optim.Optimizer
    moes: list[MoE]
    dp: int
    dp_rank: int
    tp_rank: int
    batch: int
    s_local: int
    dp_group: Any
    x: torch.Tensor
    y: torch.Tensor

    def use_reference_routing(self, routes: list[torch.Tensor] | None) -> None:
        """This rank's tokens (its dp batch, its sequence shard) routed as the reference did
        (None: the model routes by itself)."""
        b, s = self.dp_rank * self.batch, self.tp_rank * self.s_local
        for m, route in zip(self.moes, routes or [None] * len(self.moes), strict=True):
            m.route = (
                None
                if route is None
                else route[b : b + self.batch, s : s + self.s_local].reshape(-1, route.shape[-1])
            )

    def global_loss(self, loss: torch.Tensor) -> float:
        value = loss.full_tensor() if isinstance(loss, DTensor) else loss
        value = value.detach().float().reshape(1).clone()
        dist.all_reduce(value, group=self.dp_group)
        return float(value.item()) / self.dp

    def eval_loss(self) -> float:
        with torch.no_grad(), loss_parallel():
            return self.global_loss(ce_loss(self.model(self.x), self.y))


def shard(
    args: argparse.Namespace,
    me: Rank,
    shape: Shape,
    model: Transformer,
    x_all: torch.Tensor,
    y_all: torch.Tensor,
) -> Sharded:
    """TP/SP on the dense mesh, EP on the sparse one, then FSDP2 bottom-up."""
    mdev = me.dev.type
    dense = init_device_mesh(mdev, (shape.dp, shape.tp), mesh_dim_names=("dp", "tp"))
    sparse = init_device_mesh(
        mdev, (me.world // shape.ep, shape.ep), mesh_dim_names=("efsdp", "ep")
    )
    apply_tp_sp(model, dense["tp"])
    moe_blocks = [b for b in model.layers if b.is_moe]
    for blk in moe_blocks:
        parallelize_module(blk.feed_forward.experts, sparse["ep"], ExpertParallel())
    mp = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if args.bf16 else torch.float32, reduce_dtype=torch.float32
    )
    for blk in model.layers:
        if blk.is_moe:
            fully_shard(blk.feed_forward.experts, mesh=sparse["efsdp"], mp_policy=mp)
            set_divide_factor(
                blk.feed_forward.experts, shape.dp, sparse["efsdp"].size(), me.backend == "gloo"
            )
        fully_shard(blk, mesh=dense["dp"], mp_policy=mp)
    fully_shard(model, mesh=dense["dp"], mp_policy=mp)
    expert_ids = {id(p) for b in moe_blocks for p in b.feed_forward.experts.parameters()}
    params = list(model.parameters())
    dense_params = [p for p in params if id(p) not in expert_ids]
    expert_params = [p for p in params if id(p) in expert_ids]
    groups = [{"params": dense_params}] + ([{"params": expert_params}] if expert_params else [])
    dp_rank = dense["dp"].get_local_rank()
    rows = slice(dp_rank * args.batch, (dp_rank + 1) * args.batch)
    return Sharded(
        model=model,
        params=params,
        opt=torch.optim.AdamW(groups, lr=1e-2),
        moes=[b.feed_forward for b in moe_blocks],
        dp=shape.dp,
        dp_rank=dp_rank,
        tp_rank=dense["tp"].get_local_rank(),
        batch=args.batch,
        s_local=args.seq // shape.tp,
        dp_group=dense["dp"].get_group(),
        x=x_all[rows],
        y=y_all[rows],
    )


@dataclass
class Trained:
    """What the sharded steps gave: global losses, grad norms, step times, peak memory."""

    losses: list[float]
    norms: list[float]
    step_times: list[float]
    peak: dict[str, float]


def train(args: argparse.Namespace, me: Rank, s: Sharded, ref: Reference) -> Trained:
    """The sharded steps, each routed as the reference's same step."""
    if me.dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(me.dev)
    losses, norms, step_times = [], [], []
    for step in range(args.steps):
        me.beat.phase(f"step {step + 1}/{args.steps}")
        s.use_reference_routing(ref.routes[step])
        sync(me.dev)
        t0 = time.perf_counter()
        s.opt.zero_grad(set_to_none=True)
        with loss_parallel():
            loss = ce_loss(s.model(s.x), s.y)
            loss.backward()
        norm = grad_norm(s.params)
        clip_(s.params, norm, 1.0)
        s.opt.step()
        sync(me.dev)
        step_times.append(time.perf_counter() - t0)
        losses.append(s.global_loss(loss))
        norms.append(float(norm))
    peak = peak_memory_mb(me.dev)
    s.use_reference_routing(None)  # from here on the model routes by itself
    return Trained(losses, norms, step_times, peak)


def routing_report(args: argparse.Namespace, me: Rank, s: Sharded, shape: Shape) -> dict[str, Any]:
    """Where the sharded routers' own top-k differed from the reference's, over every rank."""
    flips = torch.tensor([float(sum(m.flips for m in s.moes)), 0.0], device=me.dev)
    dist.all_reduce(flips)
    flip_gap = torch.tensor([max([m.flip_gap for m in s.moes] or [0.0])], device=me.dev)
    dist.all_reduce(flip_gap, op=dist.ReduceOp.MAX)
    return {
        "tokens_routed": args.steps * len(s.moes) * shape.dp * args.batch * args.seq,
        "flips": int(flips[0].item()),
        "max_flip_gap": float(flip_gap.item()),
        "tolerance": shape.route_tol,
        "note": (
            "the sharded run used the reference's expert choices; flips are where its own top-k "
            "differed, and by how much its router preferred its own choice"
        ),
    }


def parity(s: Sharded, ref: Reference, run: Trained, tol: dict[str, float]) -> dict[str, Any]:
    """The sharded run against the reference: losses, grad norms, final weights."""
    full = {}
    for name, p in s.model.named_parameters():
        full[name] = (p.full_tensor() if isinstance(p, DTensor) else p).detach()
    ref_params = dict(ref.model.named_parameters())
    weight_diff = max(
        float((full[n].float() - ref_params[n].detach().float()).abs().max()) for n in full
    )
    pairs = zip(run.norms, ref.norms, strict=True)
    return {
        "max_loss_diff": max(abs(a - b) for a, b in zip(run.losses, ref.losses, strict=True)),
        "max_grad_norm_rel_diff": max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs),
        "max_weight_abs_diff": weight_diff,
        "tolerance": tol,
    }


def checkpoint_roundtrip(args: argparse.Namespace, s: Sharded) -> dict[str, float]:
    """DCP save, perturb (one more step), load: the eval loss must come back bit for bit."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    before = s.eval_loss()
    t0 = time.perf_counter()
    dcp.save(
        {"model": get_model_state_dict(s.model), "optim": get_optimizer_state_dict(s.model, s.opt)},
        checkpoint_id=args.ckpt_dir,
    )
    t_save = time.perf_counter() - t0
    s.opt.zero_grad(set_to_none=True)
    with loss_parallel():
        ce_loss(s.model(s.x), s.y).backward()
    s.opt.step()
    perturbed = s.eval_loss()
    t0 = time.perf_counter()
    sd = {"model": get_model_state_dict(s.model), "optim": get_optimizer_state_dict(s.model, s.opt)}
    dcp.load(sd, checkpoint_id=args.ckpt_dir)
    set_model_state_dict(s.model, sd["model"])
    set_optimizer_state_dict(s.model, s.opt, sd["optim"])
    t_load = time.perf_counter() - t0
    return {
        "eval_loss_saved": before,
        "eval_loss_perturbed": perturbed,
        "eval_loss_loaded": s.eval_loss(),
        "save_seconds": t_save,
        "load_seconds": t_load,
    }


def gather_ranks(me: Rank, run: Trained) -> list[Any]:
    """Every rank's own facts (host, device, step times, memory, timeline), on every rank."""
    mine = {
        "rank": me.rank,
        "local_rank": me.local_rank,
        "host": os.uname().nodename,
        "device": torch.cuda.get_device_name(me.dev) if me.use_cuda else "cpu",
        "gpu_uuid": (
            f"GPU-{torch.cuda.get_device_properties(me.dev).uuid}" if me.use_cuda else None
        ),
        "step_seconds": run.step_times,
        "peak_memory": run.peak,
        "timeline": me.beat.timeline,
    }
    everyone: list[Any] = [None] * me.world  # all_gather_object fills it with each rank's facts
    dist.all_gather_object(everyone, mine)
    return everyone


def verdicts(
    run: Trained, par: dict[str, Any], routing: dict[str, Any], ckpt: dict[str, float]
) -> dict[str, bool]:
    """The run's checks, each true or false."""
    tol = par["tolerance"]
    losses = run.losses
    return {
        "loss_finite": all(math.isfinite(v) for v in losses),
        "loss_decreasing": losses[-1] < losses[0] if len(losses) > 1 else True,
        "matches_reference": (
            par["max_loss_diff"] <= tol["loss"]
            and par["max_grad_norm_rel_diff"] <= tol["grad_norm"]
            and par["max_weight_abs_diff"] <= tol["weights"]
        ),
        "routing_matches_reference": routing["max_flip_gap"] <= routing["tolerance"],
        "checkpoint_roundtrip_exact": (
            ckpt["eval_loss_loaded"] == ckpt["eval_loss_saved"]
            and ckpt["eval_loss_perturbed"] != ckpt["eval_loss_saved"]
        ),
    }


def write_result(args: argparse.Namespace, me: Rank, result: dict[str, Any]) -> None:
    """The JSON result (each node's local rank 0) and rank 0's one ``ENVBUILD_DIST_RESULT``
    line on stdout."""
    if me.local_rank == 0:
        tmp = f"{args.out}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
        os.replace(tmp, args.out)
    if me.rank == 0:
        said = {"ok": result["ok"], "checks": result["checks"], "losses": result["losses"]}
        print("ENVBUILD_DIST_RESULT " + json.dumps(said), flush=True)


def finish(args: argparse.Namespace, me: Rank, ok: bool) -> int:
    """The last barrier and the teardown; the exit status."""
    me.beat.phase("final barrier")
    dist.barrier()
    me.beat.phase("done")
    if me.rank == 0:
        shutil.rmtree(args.ckpt_dir, ignore_errors=True)
    code = 0 if ok else 1
    if me.backend == "gloo":
        # gloo's teardown with several sub-groups can abort ("terminate called without an active
        # exception") after all the work is done: leave without it, the result is written.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    dist.destroy_process_group()
    return code


def main(argv: list[str] | None = None) -> int:
    """One rank's run: the reference, the sharded steps, the comparison, the checkpoint round trip
    and the bandwidth probe; the result written, then the exit status (0: every check passed)."""
    args = parse_args(argv)
    me = start(args)
    me.beat.phase("reference (single process)")
    shape = shape_of(args, me.world)
    torch.manual_seed(args.seed)
    model = Transformer(256, shape.dim, shape.heads, 4 * shape.dim, shape.n_experts, 2).to(me.dev)
    ref_model = copy.deepcopy(model)
    g = torch.Generator().manual_seed(args.seed + 1)
    data = torch.randint(0, 256, (shape.dp * args.batch, args.seq + 1), generator=g).to(me.dev)
    x_all, y_all = data[:, :-1], data[:, 1:]
    ref = reference_run(args, ref_model, x_all, y_all)

    me.beat.phase("device mesh and sharding")
    sharded = shard(args, me, shape, model, x_all, y_all)
    run = train(args, me, sharded, ref)
    me.beat.phase("parity and routing")
    routing = routing_report(args, me, sharded, shape)
    par = parity(sharded, ref, run, shape.dtype_tol)
    me.beat.phase("checkpoint (DCP save, perturb, load)")
    ckpt = checkpoint_roundtrip(args, sharded)
    bw_mb = args.bw_mb if args.bw_mb >= 0 else (1024.0 if me.use_cuda else 8.0)
    me.beat.phase("all-reduce bandwidth probe")
    bw = bus_bandwidth(me.dev, me.world, bw_mb, args.bw_iters)
    me.beat.phase("gather results")
    everyone = gather_ranks(me, run)
    checks = verdicts(run, par, routing, ckpt)
    measured = {"parity": par, "routing": routing, "checkpoint": ckpt, "allreduce": bw}
    result = result_document(args, me, shape, ref, run, checks, measured, everyone)
    write_result(args, me, result)
    return finish(args, me, result["ok"])


def result_document(
    args: argparse.Namespace,
    me: Rank,
    shape: Shape,
    ref: Reference,
    run: Trained,
    checks: dict[str, bool],
    measured: dict[str, Any],
    ranks: list[Any],
) -> dict[str, Any]:
    """The one JSON result: the verdict and its checks, the layout, the losses against the
    reference's, ``measured`` (parity, routing, checkpoint, all-reduce), timings, every rank's
    facts, versions and the NCCL/allocator environment."""
    steady = run.step_times[1:] or run.step_times
    return {
        "ok": all(checks.values()),
        "checks": checks,
        "backend": me.backend,
        "world_size": me.world,
        "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", 1)),
        "mesh": {
            "dp": shape.dp,
            "tp": shape.tp,
            "ep": shape.ep,
            "efsdp": me.world // shape.ep,
            "experts": shape.n_experts,
        },
        "model": {
            "vocab": 256,
            "dim": shape.dim,
            "heads": shape.heads,
            "layers": 2,
            "seq": args.seq,
            "batch_per_dp_rank": args.batch,
            "dtype": "bf16" if args.bf16 else "fp32",
        },
        "losses": run.losses,
        "reference_losses": ref.losses,
        "grad_norms": run.norms,
        "reference_grad_norms": ref.norms,
        **measured,
        "timing": {
            "init_seconds": me.t_init,
            "first_step_seconds": run.step_times[0],
            "steady_step_seconds": sum(steady) / len(steady),
            "steady_step_max_seconds": max(steady),
        },
        "ranks": ranks,
        "versions": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if me.use_cuda else None,
            "python": sys.version.split()[0],
        },
        "env": {k: os.environ.get(k) for k in BASELINE_KEYS},
        "wall_seconds": time.perf_counter() - me.t_start,
    }


if __name__ == "__main__":
    sys.exit(main())
