"""Launch the distributed step: ``torchrun`` from the target venv, one process per GPU.

The worker (``worker.py``) runs inside the venv's interpreter and never imports envbuild; this
side builds the torchrun command line and the environment (the NCCL/allocator baseline of
``layout.RUNTIME_BASELINE`` over the caller's environment), streams the output into a log, and
reads back the worker's JSON result. torchrun runs as ``python agent.py ARGS``: torchrun's own
``main`` as its console script calls it, ending without the interpreter's teardown (``agent.py``).

Single node: ``torchrun --standalone``. Several nodes: torchrun's c10d rendezvous
(``--nnodes N --rdzv-endpoint HOST:PORT --rdzv-id ID``), run once per node; every node's local
rank 0 writes the same gathered result, so each agent can report the whole run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from envbuild import events
from envbuild.errors import ConfigError, PreflightError, VerifyError
from envbuild.layout import RUNTIME_BASELINE, UNSET_IN_BASELINE
from envbuild.proof.diststep.watch import Watchdog, describe_hang, end_workers, read_beats
from envbuild.run import RunResult, run

WORKER = Path(__file__).resolve().parent / "worker.py"
# torchrun's main, without the interpreter's teardown
AGENT = Path(__file__).resolve().parent / "agent.py"
RESULT_MARK = "ENVBUILD_DIST_RESULT "
SEQ_LEN = 32  # the worker's default --seq: tensor parallel shards it, so tp must divide it


@dataclass(frozen=True, kw_only=True)
class DistOptions:
    nproc: int | None = None  # processes on this node; None: one per GPU, or 2 on CPU
    nnodes: int = 1
    rdzv_endpoint: str | None = None  # HOST:PORT of the c10d rendezvous (multi-node)
    rdzv_id: str = "envbuild-dist-step"
    dp: int = 0  # 0: chosen from the world size (tp = 2 when even, dp = world / tp, ep = world)
    tp: int = 0
    ep: int = 0
    steps: int = 5
    cpu: bool = False  # gloo on CPU even where GPUs exist
    bf16: bool = False
    bw_mb: float = -1.0  # all-reduce probe size; -1: 1024 MiB on GPU, 8 MiB on CPU
    timeout: float = 600.0
    stall_timeout: float = 60.0  # a rank silent this long (no heartbeat) stops the run
    ckpt_dir: Path | None = None  # must be shared by all nodes for multi-node runs
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if self.nproc is not None and not 1 <= self.nproc <= 64:
            raise ConfigError(f"--nproc {self.nproc}: give a process count between 1 and 64")
        if self.nnodes < 1:
            raise ConfigError(f"--nnodes {self.nnodes}: give at least 1")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ConfigError(
                f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT (the c10d rendezvous every"
                " node joins)",
                hint="Run the same command on each node with the same endpoint and --rdzv-id.",
            )
        if self.rdzv_endpoint and ":" not in self.rdzv_endpoint:
            raise ConfigError(f"--rdzv-endpoint {self.rdzv_endpoint!r}: write it as HOST:PORT")
        if self.steps < 2:
            raise ConfigError(f"--steps {self.steps}: at least 2 are needed to see the loss fall")
        for name in ("dp", "tp", "ep"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name} must be positive")
        if self.timeout <= 0 or self.stall_timeout <= 0:
            raise ConfigError("--timeout and --stall-timeout take a number of seconds above 0")


def plan_mesh(world: int, dp: int = 0, tp: int = 0, ep: int = 0) -> tuple[int, int, int]:
    """The worker's mesh for ``world`` ranks (0 = its default: tp 2 when the world is even, else 1;
    dp = world / tp; ep = world), checked before anything launches. Mirrors the worker's
    ``choose_layout`` (tests/test_dist_step.py holds the two to the same answers)."""
    given = " ".join(f"--{k} {v}" for k, v in (("dp", dp), ("tp", tp), ("ep", ep)) if v)
    where = f"{world} process(es) in all" + (f" with {given}" if given else "")
    if tp and world % tp:
        raise ConfigError(
            f"{where}: tp {tp} does not divide the world size {world}, so no dp x tp mesh "
            f"covers it. Give --tp one of {_divisors(world)} (dp is then world / tp)."
        )
    if dp and world % dp:
        raise ConfigError(
            f"{where}: dp {dp} does not divide the world size {world}. "
            f"Give --dp one of {_divisors(world)}."
        )
    tp = tp or (world // dp if dp else (2 if world % 2 == 0 else 1))
    dp = dp or world // tp
    if dp * tp != world:
        raise ConfigError(
            f"{where}: dp x tp = {dp} x {tp} = {dp * tp}, not the world size {world}. "
            f"Give dp and tp whose product is {world}, or one of them (the other follows)."
        )
    if SEQ_LEN % tp:
        raise ConfigError(
            f"{where}: tp {tp} must divide the model's sequence length {SEQ_LEN} "
            "(sequence parallel shards it). Give --tp one of "
            f"{[d for d in _divisors(world) if SEQ_LEN % d == 0]}."
        )
    ep = ep or world
    if world % ep:
        raise ConfigError(
            f"{where}: ep {ep} does not divide the world size {world}. "
            f"Give --ep one of {_divisors(world)}."
        )
    return dp, tp, ep


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class WorkerResult(TypedDict):
    """What the distributed step measured: rank 0's JSON (``worker.py``, which runs in the venv's
    interpreter and writes every key)."""

    ok: bool  # every check passed (the command's own `ok` also needs torchrun's exit 0)
    # each check's verdict: loss_finite, loss_decreasing, matches_reference, ...
    checks: dict[str, bool]
    backend: str  # the process group's backend: nccl or gloo
    world_size: int  # the ranks, all nodes together
    nnodes: int  # the nodes
    mesh: dict[str, int]  # the device mesh: dp, tp, ep, efsdp, experts
    # the toy model: vocab, dim, heads, layers, seq, batch_per_dp_rank, dtype
    model: dict[str, int | str]
    losses: list[float]  # the sharded run's loss per step
    reference_losses: list[float]  # the single-device reference's
    grad_norms: list[float]  # the sharded run's gradient norm per step
    reference_grad_norms: list[float]  # the reference's
    # against the reference: max_loss_diff, max_grad_norm_rel_diff, max_weight_abs_diff, and the
    # tolerance (a table of loss, grad_norm, weights)
    parity: dict[str, Any]
    # the MoE routing against the reference's top-k choices: tokens_routed, flips, max_flip_gap,
    # tolerance, note
    routing: dict[str, Any]
    # the checkpoint round trip: eval_loss_saved, eval_loss_perturbed, eval_loss_loaded,
    # save_seconds, load_seconds
    checkpoint: dict[str, float]
    # the all-reduce probe: bytes, seconds, algbw_gbps, busbw_gbps (null: one rank)
    allreduce: dict[str, float] | None
    # init_seconds, first_step_seconds, steady_step_seconds, steady_step_max_seconds
    timing: dict[str, float]
    # one table per rank: rank, local_rank, host, device, step_seconds, peak_memory (MiB), timeline
    ranks: list[dict[str, Any]]
    versions: dict[str, str | None]  # torch, cuda, nccl, python, as the workers saw them
    env: dict[str, str | None]  # the runtime baseline's variables, as the workers had them
    wall_seconds: float  # rank 0's time from start to result


@dataclass(frozen=True)
class DistResult:
    ok: bool
    returncode: int
    seconds: float
    argv: tuple[str, ...]
    log_file: Path | None
    result: WorkerResult  # the worker's JSON
    tail: str
    started: float = 0.0  # time.time() at torchrun's launch (the ranks' timelines start later)


def launch_env(
    base: Mapping[str, str], *, cpu: bool, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment the workers get: caller's env, the runtime baseline, then ``extra``."""
    env = dict(base)
    env.update(RUNTIME_BASELINE)
    for key in UNSET_IN_BASELINE:
        env.pop(key, None)
    if extra:
        env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    if cpu:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def torchrun_argv(
    python: Path,
    opts: DistOptions,
    nproc: int,
    out: Path,
    ckpt: Path,
    heartbeats: Path | None = None,
) -> list[str]:
    argv = [str(python), str(AGENT), "--nproc-per-node", str(nproc), "--max-restarts", "0"]
    if opts.nnodes == 1 and not opts.rdzv_endpoint:
        # one node: the workers reach the rendezvous store on the loopback address, not on the
        # host's name (torchrun's default, its FQDN): a host whose name does not resolve (a
        # container's random hostname) would leave them retrying until the rendezvous timeout
        argv += ["--standalone", "--local-addr", "127.0.0.1"]
    else:
        argv += [
            "--nnodes",
            str(opts.nnodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            str(opts.rdzv_endpoint),
            "--rdzv-id",
            opts.rdzv_id,
        ]
    argv += [
        str(WORKER),
        "--out",
        str(out),
        "--ckpt-dir",
        str(ckpt),
        "--steps",
        str(opts.steps),
        "--dp",
        str(opts.dp),
        "--tp",
        str(opts.tp),
        "--ep",
        str(opts.ep),
        "--bw-mb",
        str(opts.bw_mb),
    ]
    if opts.cpu:
        argv.append("--cpu")
    if opts.bf16:
        argv.append("--bf16")
    if heartbeats is not None:
        argv += ["--heartbeat-dir", str(heartbeats)]
    return argv


@dataclass(frozen=True)
class _Launch:
    """One torchrun launch: the interpreter, the options (``cpu`` decided), the processes on this
    node, the run's temporary folder (the result, the heartbeats) and the log."""

    python: Path
    opts: DistOptions
    nproc: int
    tmp: Path
    log_file: Path | None

    @property
    def out(self) -> Path:
        return self.tmp / "result.json"

    @property
    def beats(self) -> Path:
        return self.tmp / "heartbeats"

    @property
    def stall(self) -> float:
        return min(self.opts.stall_timeout, self.opts.timeout)

    @property
    def where(self) -> str:
        return f" Full log: {self.log_file}." if self.log_file else ""


def run_dist_step(
    python: Path,
    opts: DistOptions,
    *,
    gpu_count: int,
    workdir: Path | None = None,
    log_file: Path | None = None,
    base_env: Mapping[str, str] | None = None,
) -> DistResult:
    """Run the step; raises ``PreflightError`` when the interpreter or torch is missing and
    ``VerifyError`` when the workers died without a result. A result with failed checks is
    returned (``ok`` False) so the caller can show and record what failed."""
    opts.validate()
    if not python.exists():
        raise PreflightError(
            f"no Python interpreter at {python}: the venv is missing or incomplete",
            hint="Provision it first (envbuild provision), or point --venv at an existing venv.",
        )
    opts, nproc = _shape(opts, gpu_count)
    launch = _Launch(
        python, opts, nproc, Path(tempfile.mkdtemp(prefix="envbuild-dist-", dir=workdir)), log_file
    )
    ckpt = opts.ckpt_dir or launch.tmp / "ckpt"
    argv = torchrun_argv(python, opts, nproc, launch.out, ckpt, launch.beats)
    env = launch_env(
        base_env if base_env is not None else os.environ, cpu=opts.cpu, extra=opts.extra_env
    )
    events.emit(
        "step",
        f"dist-step: torchrun {nproc} process(es) x {opts.nnodes} node(s), "
        f"{'gloo on CPU' if opts.cpu else 'NCCL on GPU'}",
    )
    start, started = time.monotonic(), time.time()
    res, watchdog = _run_watched(launch, argv, env, start)
    result: WorkerResult | None = None  # none when it never got that far
    if launch.out.is_file():
        result = json.loads(launch.out.read_text(encoding="utf-8"))
    _clean(launch.tmp)
    if res.timed_out or res.cancelled:
        raise _hang_error(launch, res, watchdog)
    if not result:
        raise _no_result_error(launch, res)
    return DistResult(
        ok=bool(result.get("ok")) and res.returncode == 0,
        returncode=res.returncode,
        seconds=time.monotonic() - start,
        argv=res.argv,
        log_file=log_file,
        result=result,
        tail=res.tail,
        started=started,
    )


def _shape(opts: DistOptions, gpu_count: int) -> tuple[DistOptions, int]:
    """``opts`` with ``cpu`` decided (no GPU: gloo on CPU), and the processes on this node;
    ConfigError for more processes than GPUs or a mesh the world cannot hold, before launching."""
    cpu = opts.cpu or gpu_count == 0
    nproc = opts.nproc or (gpu_count if not cpu else 2)
    if not cpu and nproc > gpu_count:
        raise ConfigError(
            f"--nproc {nproc} is more than the {gpu_count} GPU(s) on this host",
            hint="Use at most one process per GPU, or --cpu for gloo processes.",
        )
    plan_mesh(nproc * opts.nnodes, opts.dp, opts.tp, opts.ep)  # refuse a bad mesh before launching
    return DistOptions(**{**opts.__dict__, "cpu": cpu}), nproc


def _on_line(line: str) -> None:
    """torchrun's output, line by line, as debug events (the result line without its mark)."""
    if line.startswith(RESULT_MARK):
        events.emit("debug", "dist-step: " + line[len(RESULT_MARK) :])
    else:
        events.emit("debug", line)


def _run_watched(
    launch: _Launch, argv: list[str], env: dict[str, str], start: float
) -> tuple[RunResult, Watchdog]:
    """torchrun under the watchdog, which stops it when a rank's heartbeat stalls or the deadline
    passes; every worker it leaves behind is ended after."""
    opts = launch.opts
    cancel = threading.Event()
    watchdog = Watchdog(
        launch.beats,
        marker=str(launch.out),
        stall_after=launch.stall,
        deadline=start + opts.timeout,
        cancel=cancel,
    )
    watchdog.start()
    try:
        res = run(
            argv,
            log_file=launch.log_file,
            env=env,
            timeout=opts.timeout,
            on_line=_on_line,
            cancel=cancel,
        )
    except FileNotFoundError as exc:
        raise PreflightError(f"cannot run {launch.python}") from exc
    finally:
        watchdog.stop()
        # torchrun, stopped, may leave its children behind
        end_workers(read_beats(launch.beats), str(launch.out))
    return res, watchdog


def _hang_error(launch: _Launch, res: RunResult, watchdog: Watchdog) -> VerifyError:
    """The run was stopped (its deadline, or a silent rank): where each rank was, and why."""
    opts = launch.opts
    why = (
        f"did not finish within --timeout {opts.timeout:g} s and was stopped"
        if res.timed_out
        else f"was stopped: a rank sent no heartbeat for --stall-timeout {launch.stall:g} s"
    )
    return VerifyError(
        describe_hang(
            watchdog.picture,
            seconds=res.seconds,
            why=why,
            expected_ranks=launch.nproc if opts.nnodes == 1 else None,
        )
        + launch.where,
        hint=(
            "A rank that stops answering is a dead or wedged process (killed, stopped, a GPU"
            " fault); the others wait for it in the named collective. Re-run with"
            " NCCL_DEBUG=INFO, or TORCH_NCCL_TRACE_BUFFER_SIZE=2000 for NCCL's flight recorder,"
            " to see more."
        ),
    )


def _no_result_error(launch: _Launch, res: RunResult) -> PreflightError | VerifyError:
    """The workers died before writing a result: torch missing (PreflightError), else the tail of
    torchrun's output (VerifyError)."""
    if "No module named 'torch'" in res.tail or "No module named torch" in res.tail:
        return PreflightError(
            f"torch is not installed in {launch.python}; dist-step needs the venv's torch"
        )
    return VerifyError(
        f"the distributed step failed (torchrun exit {res.returncode}) before writing a"
        f" result.{launch.where} Last lines:\n{res.tail}",
        hint=(
            "A failure at start-up is usually the rendezvous (check --rdzv-endpoint and that"
            " every node runs the command) or NCCL (re-run with NCCL_DEBUG=INFO)."
        ),
    )


def _clean(tmp: Path) -> None:
    """Remove the run's temporary folder (result, heartbeats, the default checkpoint folder);
    a --ckpt-dir of the user's lies outside it."""
    shutil.rmtree(tmp, ignore_errors=True)
