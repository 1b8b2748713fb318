"""What every smoke check shares: tolerances, the comparison with a float64 reference (and the
planted wrong answer), timing, and the float64 references themselves (standalone: no envbuild).

Every check computes a result with the kernel under test and a reference computed another way:
a float64 PyTorch formula on the same (already rounded) inputs wherever one exists (attention,
causal depthwise conv1d, the selective scan, the simple-GLA recurrence, matmul), never another
kernel of the same package. Planted wrong answers: ``ENVBUILD_SMOKE_PERTURB=name[,name...]`` (or
``all``) adds to the named kernels' outputs an error of 3x the check's tolerance (in norm, random
direction) before the comparison, so each check can be shown to fail on a wrong result.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

# Dense bf16 tensor-core rates (TFLOP/s, no sparsity) from NVIDIA's datasheets.
DATASHEET_BF16_TFLOPS = {
    "H200": 989.0,
    "H100 SXM": 989.0,
    "H100 80GB HBM3": 989.0,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "B100": 1750.0,
    "GB200": 2500.0,
    "A100": 312.0,
    "L40S": 362.0,
}

# Unit roundoff (half an ulp at 1.0) of the formats the kernels compute in. A rounding to one of
# these makes a relative error of at most u, about u/sqrt(3) rms over many values (uniform error).
# 8 significant bits: bf16 inputs, outputs, and operands cast to bf16 inside kernels
U_BF16 = 2.0**-8
U_TF32 = 2.0**-11  # 11 significant bits: fp32 operands of tl.dot / tensor cores on Ampere+ (TF32)
U_FP32 = 2.0**-24  # fp32 FMAs and accumulators

PERTURB_ENV = "ENVBUILD_SMOKE_PERTURB"
PERTURB_FACTOR = 3.0  # the planted error, in units of the check's tolerance

Result = dict[str, Any]


class Skip(Exception):
    pass


def dev() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().double(), ref.detach().double()
    return float(
        torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30)
    )


def perturbed(name: str) -> bool:
    wanted = {w.strip() for w in os.environ.get(PERTURB_ENV, "").split(",") if w.strip()}
    return "all" in wanted or name in wanted


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, tol: float, **extra: Any) -> Result:
    """The verdict's numbers: ``out`` vs the float64 ``ref``, with a planted error when asked."""
    res: Result = {"tol": tol, **extra}
    if perturbed(name):
        out = out.detach().double()
        noise = torch.randn(out.shape, dtype=torch.float64, device=out.device)
        scale = (
            PERTURB_FACTOR
            * tol
            * torch.linalg.vector_norm(ref.double())
            / torch.linalg.vector_norm(noise)
        )
        out = out + scale * noise
        res["perturbed"] = True
    res["rel_err"] = rel_err(out, ref)
    return res


def timed_ms(
    fn: Callable[[], Any], iters: int = 10, during: Callable[[], Any] | None = None
) -> float:
    """Mean milliseconds of ``fn`` after one warm-up call (CUDA events on a GPU); ``during`` is
    called once the timed calls are queued, while the GPU runs them (NVML's clocks then)."""
    fn()
    sync()
    if torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        if during is not None:
            during()
        sync()
        return float(start.elapsed_time(end)) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1e3 / iters


def gpu_uuid() -> str:
    """The GPU's UUID (``GPU-...``): smoke's worker has it in ``CUDA_VISIBLE_DEVICES``, else
    torch's device 0 says it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith("GPU-"):
        return visible
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else ""


def need_gpu() -> None:
    if not torch.cuda.is_available():
        raise Skip("no CUDA GPU visible to torch")


def need(dist: str, module: str) -> str:
    try:
        version = md.version(dist)
    except md.PackageNotFoundError as exc:
        raise Skip(f"{dist} is not installed") from exc
    try:
        __import__(module)
    except Exception as exc:  # an installed package that cannot import is a failure
        raise RuntimeError(
            f"{dist} {version} is installed but `import {module}` fails: {exc}"
        ) from exc
    return version


def datasheet_rate(name: str) -> float | None:
    for key in sorted(DATASHEET_BF16_TFLOPS, key=len, reverse=True):
        if key in name:
            return DATASHEET_BF16_TFLOPS[key]
    return None


def has(dist: str) -> bool:
    return dist_version(dist) is not None


def dist_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------- imports ahead

PREIMPORT_ENV = "ENVBUILD_SMOKE_PREIMPORT"  # "0": off
PREIMPORT_MODULES = (
    "triton",
    "triton.language",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "torch._inductor.codecache",
)
_PREIMPORT: list[threading.Thread] = []


def settle_imports() -> None:
    """Wait for the import thread (before any timing: a thread holding the GIL delays the timed
    kernels' launches, and the GPU looked up to 75% slower than its peers on 4x H200)."""
    while _PREIMPORT:
        _PREIMPORT.pop().join()


def start_preimport(only: list[str], compile_here: bool = True) -> None:
    """On a GPU, import what the triton and torch.compile checks need (about a second) on a thread
    while the main thread starts CUDA and checks the matmul's answer; ``settle_imports`` waits for
    it before the timed products and before the next check, so nothing else imports meanwhile.
    ``compile_here`` False: the torch.compile check runs in another process (``smoke_part``)."""
    wanted = {"triton", "torch.compile"} if compile_here else {"triton"}
    if only:
        wanted &= set(only)
    if os.environ.get(PREIMPORT_ENV) == "0" or not wanted or not torch.cuda.is_available():
        return
    # torch.compile's in another process (smoke_part): triton's alone here
    modules = PREIMPORT_MODULES if "torch.compile" in wanted else PREIMPORT_MODULES[:2]

    def work() -> None:
        for module in modules:
            try:
                __import__(module)
            except Exception:  # noqa: BLE001 - the check that needs it reports the failure itself
                return
            if module == "triton":
                key = threading.Thread(target=_triton_key, name="envbuild-triton-key", daemon=True)
                key.start()
                _KEYS.append(key)

    thread = threading.Thread(target=work, name="envbuild-preimport", daemon=True)
    thread.start()
    _PREIMPORT.append(thread)


_KEYS: list[threading.Thread] = []


def _triton_key() -> None:
    """Triton's cache key (the hash of its compiler's sources and of ``libtriton.so``, hundreds
    of megabytes: a few tenths of a second that every process pays once, before its first kernel
    is found in the cache), computed while the other thread imports: file reads and hashlib's
    updates run without the GIL. The function caches its answer, which the triton and
    torch.compile checks then find."""
    for where in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            fn = getattr(__import__(where, fromlist=["triton_key"]), "triton_key", None)
        except Exception:  # noqa: BLE001 - another Triton: the check computes it itself
            continue
        if fn is not None:
            with contextlib.suppress(Exception):
                fn()
            return


def settle_keys() -> None:
    """Wait for the cache key's thread (before a check that compiles or loads a Triton kernel:
    two threads must not compute it at once)."""
    while _KEYS:
        _KEYS.pop().join()


# ----------------------------------------------------------------------------- float64 references
# Plain PyTorch, float64, straight from each operator's definition (tests/test_smoke.py checks
# each against a second formula on CPU).


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over (..., seq, dim), in float64."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def causal_conv1d_ref(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool
) -> torch.Tensor:
    """Depthwise causal conv: ``out[b,c,t] = bias[c] + sum_j weight[c,j] * x[b,c,t-(w-1)+j]`` (x<0 =
    0)."""
    width, n = weight.shape[-1], x.shape[-1]
    out = F.conv1d(
        x.double(),
        weight.double().unsqueeze(1),
        None if bias is None else bias.double(),
        padding=width - 1,
        groups=x.shape[1],
    )[..., :n]
    return F.silu(out) if silu else out


def selective_scan_ref64(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_softplus: bool,
) -> torch.Tensor:
    """Mamba's selective scan as a sequential float64 recurrence.

    u, delta, z: (b, d, L); A: (d, n); B, C: (b, n, L); D: (d,).
    x_t = exp(delta_t A) * x_{t-1} + delta_t B_t u_t;  y_t = <x_t, C_t> + D u_t;  y *= silu(z).
    """
    u, delta, A, B, C = u.double(), delta.double(), A.double(), B.double(), C.double()
    if delta_softplus:
        delta = F.softplus(delta)
    b, d, L = u.shape
    x = torch.zeros(b, d, A.shape[1], dtype=torch.float64, device=u.device)
    ys = []
    for t in range(L):
        dt = delta[:, :, t, None]  # (b, d, 1)
        x = torch.exp(dt * A) * x + dt * B[:, None, :, t] * u[:, :, t, None]
        ys.append((x * C[:, None, :, t]).sum(-1))
    y = torch.stack(ys, dim=-1)
    if D is not None:
        y = y + D.double()[:, None] * u
    if z is not None:
        y = y * F.silu(z.double())
    return y


def simple_gla_ref(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, scale: float
) -> torch.Tensor:
    """Simple GLA (head-wise gated linear attention) as its float64 recurrence, [B, T, H, D] layout.

    S_t = exp(g_t) S_{t-1} + k_t^T v_t  (S: dk x dv per head);  o_t = scale * q_t S_t.
    """
    q, k, v, g = q.double(), k.double(), v.double(), g.double()
    b, t, h, dk = q.shape
    state = torch.zeros(b, h, dk, v.shape[-1], dtype=torch.float64, device=q.device)
    outs = []
    for i in range(t):
        state = (
            torch.exp(g[:, i])[..., None, None] * state + k[:, i, :, :, None] * v[:, i, :, None, :]
        )
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, i], state))
    return torch.stack(outs, dim=1)
