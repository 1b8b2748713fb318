"""envbuild kernel smoke tests, run by the target venv's python (standalone: no envbuild import).

Every check computes a result with the kernel under test and a reference computed another way:
a float64 PyTorch formula on the same (already rounded) inputs wherever one exists (attention,
causal depthwise conv1d, the selective scan, the simple-GLA recurrence, matmul), never another
kernel of the same package. It reports the relative error ``||out - ref|| / ||ref||``, the
tolerance (derived from the arithmetic the kernel uses, written next to each check), the time
(first call, compile included, and a timed later call) and a verdict: pass / fail / skip (with
the reason: not installed, no GPU, unsupported GPU).

Planted wrong answers: ``ENVBUILD_SMOKE_PERTURB=name[,name...]`` (or ``all``) adds to the named
kernels' outputs an error of 3x the check's tolerance (in norm, random direction) before the
comparison, so each check can be shown to fail on a wrong result. The result says so
(``perturbed: true``); nothing else changes.

Usage: python checks.py --out result.json [--only NAME ...] [--import DIST ...] [--quick]
Prints one ``ENVBUILD_SMOKE {json}`` line per check; exit 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
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


# NVML's clock event ("throttle") reasons, by bit
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def nvml_sample() -> dict[str, Any] | None:
    """This GPU's SM clock (and its maximum), throttle reasons, temperature, power and compute
    processes, from NVML (nvidia-ml-py in the venv) or else ``nvidia-smi``; None without either."""
    uuid = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    try:
        import pynvml as nv

        nv.nvmlInit()
        h = (
            nv.nvmlDeviceGetHandleByUUID(uuid)
            if uuid.startswith(("GPU-", "MIG-"))
            else nv.nvmlDeviceGetHandleByIndex(0)
        )
        reasons = int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        return {
            "source": "nvml",
            "sm_clock_mhz": int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "sm_clock_max_mhz": int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            "throttle_reasons": [w for bit, w in THROTTLE_REASONS.items() if reasons & bit],
            "temperature_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "processes": len(nv.nvmlDeviceGetComputeRunningProcesses(h)),
        }
    except Exception:  # noqa: BLE001 - no NVML here: try nvidia-smi
        pass
    import subprocess

    query = "clocks.sm,clocks.max.sm,clocks_throttle_reasons.active,temperature.gpu,power.draw"
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "-i",
                uuid or "0",
                f"--query-gpu={query}",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        sm, sm_max, reasons, temp, power = (v.strip() for v in out.stdout.strip().split(","))
        bits = int(reasons, 16)
        return {
            "source": "nvidia-smi",
            "sm_clock_mhz": int(sm),
            "sm_clock_max_mhz": int(sm_max),
            "throttle_reasons": [w for bit, w in THROTTLE_REASONS.items() if bits & bit],
            "temperature_c": float(temp),
            "power_w": float(power),
        }
    except Exception:  # noqa: BLE001 - neither: the finding has no clocks
        return None


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
    except Exception as exc:  # noqa: BLE001 - an installed package that cannot import is a failure
        raise RuntimeError(
            f"{dist} {version} is installed but `import {module}` fails: {exc}"
        ) from exc
    return version


def datasheet_rate(name: str) -> float | None:
    for key in sorted(DATASHEET_BF16_TFLOPS, key=len, reverse=True):
        if key in name:
            return DATASHEET_BF16_TFLOPS[key]
    return None


def _has(dist: str) -> bool:
    return _dist_version(dist) is not None


def _dist_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


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


# ----------------------------------------------------------------------------- checks


def check_matmul(quick: bool) -> Result:
    d = dev()
    # bf16 operands, fp32 accumulation (K terms: ~sqrt(K) u_fp32, negligible), bf16 output: one
    # rounding, ~u_bf16/sqrt(3) = 2.3e-3 rms. 3 u_bf16 = 1.2e-2 leaves 5x.
    tol = 3 * U_BF16
    if d.type == "cuda":
        a, b = (
            torch.randn(2048, 2048, device=d, dtype=torch.bfloat16),
            torch.randn(2048, 2048, device=d, dtype=torch.bfloat16),
        )
        res = compare(
            "matmul", a @ b, a.double() @ b.double(), tol, dtype="bf16", reference="float64 matmul"
        )
        n = 4096 if quick else 8192
        x, y = (
            torch.randn(n, n, device=d, dtype=torch.bfloat16),
            torch.randn(n, n, device=d, dtype=torch.bfloat16),
        )
        settle_imports()
        sample: list[Any] = []
        ms = timed_ms(
            lambda: x @ y, 10 if quick else 50, during=lambda: sample.append(nvml_sample())
        )
        tflops = 2 * n**3 / (ms / 1e3) / 1e12
        sheet = datasheet_rate(torch.cuda.get_device_name())
        return {
            **res,
            "kernel_ms": ms,
            "tflops": tflops,
            "datasheet_tflops": sheet,
            "fraction_of_datasheet": tflops / sheet if sheet else None,
            "size": n,
            **({"nvml": sample[0]} if sample and sample[0] else {}),
        }
    # On CPU the check is the answer only: no throughput is measured (a CPU matmul's rate says
    # nothing about the stack, and a figure near 0 TFLOP/s would read as a measurement).
    a, b = torch.randn(512, 384), torch.randn(384, 256)
    ab, bb = a.bfloat16(), b.bfloat16()
    err_fp32 = rel_err(a @ b, a.double() @ b.double())
    return compare(
        "matmul",
        ab @ bb,
        ab.double() @ bb.double(),
        tol,
        dtype="bf16 (+fp32)",
        reference="float64 matmul",
        rel_err_fp32=err_fp32,
    )


def check_sdpa(quick: bool) -> Result:
    d = dev()
    if d.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (torch.randn(2, 8, 1024, 128, device=d, dtype=torch.bfloat16) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # as flash_attn below: bf16 P and bf16 output, fp32 softmax/accumulation: 3 u_bf16
        return compare(
            "sdpa",
            out,
            attention_ref(q, k, v, True),
            3 * U_BF16,
            dtype="bf16",
            backend="flash",
            reference="softmax(QK^T/sqrt(d))V, float64",
        )
    q, k, v = (torch.randn(2, 4, 128, 64) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # fp32 end to end: sums of <=128 terms (~sqrt(n) u_fp32 = 7e-7 rms) and exp: 1e-5 leaves >10x
    return compare(
        "sdpa",
        out,
        attention_ref(q, k, v, True),
        1e-5,
        dtype="fp32",
        backend="default (CPU)",
        reference="explicit softmax(QK^T)V in float64",
    )


def check_triton(quick: bool) -> Result:
    need_gpu()
    version = need("triton", "triton") if _has("triton") else need("pytorch-triton", "triton")
    import triton
    import triton.language as tl

    # a Triton kernel's arguments are pointers and scalars triton.jit types itself, not Python's
    @triton.jit
    def fma_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        z = tl.load(z_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * y + tl.sigmoid(z), mask=mask)

    n = 1 << 20 | 123
    x, y, z = (torch.randn(n, device="cuda") for _ in range(3))
    out = torch.empty_like(x)
    fma_kernel[(triton.cdiv(n, 1024),)](x, y, z, out, n, BLOCK=1024)
    ref = x.double() * y.double() + torch.sigmoid(z.double())
    # fp32: one FMA and a fast exp in sigmoid (a few ulp): 1e-5 = 168 u_fp32
    return compare(
        "triton",
        out,
        ref,
        1e-5,
        dtype="fp32",
        version=triton.__version__ or version,
        reference="torch, float64",
    )


def check_compile(quick: bool) -> Result:
    d = dev()

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w) * torch.sigmoid(x.sum(-1, keepdim=True)) + torch.sin(
            x[..., : w.shape[1]]
        )

    x, w = torch.randn(64, 96, device=d), torch.randn(96, 48, device=d)
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    out = compiled(x, w)
    backend = "triton (GPU)" if d.type == "cuda" else "C++ (CPU)"
    # fp32 (TF32 off, torch's default for matmul): K=96 sums and transcendental approximations
    # (a few ulp each): 1e-4 is ~100x the expected 1e-6.
    return compare(
        "torch.compile",
        out,
        f(x.double(), w.double()),
        1e-4,
        dtype="fp32",
        backend=f"inductor, {backend}",
        reference="eager, float64",
    )


def _attention_tflops(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any], quick: bool
) -> dict[str, Any]:
    """Forward TFLOP/s of a causal bf16 attention, (b, s, h, d) layout: 4 b h s^2 d / 2 FLOPs."""
    b, s, h, d = (2, 2048, 16, 128) if quick else (4, 4096, 16, 128)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ms = timed_ms(lambda: fn(q, k, v), 10 if quick else 30)
    tflops = 4 * b * h * s * s * d / 2 / (ms / 1e3) / 1e12
    sheet = datasheet_rate(torch.cuda.get_device_name())
    return {
        "kernel_ms": ms,
        "tflops": tflops,
        "datasheet_tflops": sheet,
        "fraction_of_datasheet": tflops / sheet if sheet else None,
        "timed_shape": [b, s, h, d],
    }


# Flash attention, bf16 in and out: S = QK^T in fp32 (exact products of bf16, fp32 sums), the
# softmax in fp32, P cast to bf16 for the PV product (one rounding per weight, averaged over the
# keys), fp32 accumulation, the output rounded to bf16 (~u_bf16/sqrt(3) = 2.3e-3 rms). Against a
# float64 reference on the same bf16 inputs the error is ~3e-3: 3 u_bf16 = 1.2e-2 leaves 4x.
ATTENTION_TOL = 3 * U_BF16


def check_flash_attn(quick: bool) -> Result:
    need_gpu()
    version = need("flash-attn", "flash_attn")
    from flash_attn import flash_attn_func

    q, k, v = (torch.randn(2, 512, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    ref = attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True).transpose(
        1, 2
    )
    res = compare(
        "flash_attn",
        out,
        ref,
        ATTENTION_TOL,
        dtype="bf16",
        version=version,
        reference="softmax(QK^T/sqrt(d))V, float64",
    )
    return {
        **res,
        **_attention_tflops(lambda q, k, v: flash_attn_func(q, k, v, causal=True), quick),
    }


def check_flash_attn_4(quick: bool) -> Result:
    need_gpu()
    major, _ = torch.cuda.get_device_capability()
    version = need("flash-attn-4", "flash_attn.cute")
    if major < 9:
        raise Skip(f"flash-attn-4 needs SM90 or newer; this GPU is SM{major}x")
    from flash_attn.cute import flash_attn_func

    def fa4(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = flash_attn_func(q, k, v, causal=True)
        return out[0] if isinstance(out, tuple) else out

    q, k, v = (torch.randn(2, 512, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = fa4(q, k, v)
    ref = attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True).transpose(
        1, 2
    )
    res = compare(
        "flash_attn_4",
        out,
        ref,
        ATTENTION_TOL,
        dtype="bf16",
        version=version,
        reference="softmax(QK^T/sqrt(d))V, float64",
    )
    return {**res, **_attention_tflops(fa4, quick)}


def check_causal_conv1d(quick: bool) -> Result:
    need_gpu()
    version = need("causal-conv1d", "causal_conv1d")
    from causal_conv1d import causal_conv1d_fn

    b, c, n, width = 2, 64, 512, 4
    x = torch.randn(b, c, n, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(c, width, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(c, device="cuda", dtype=torch.bfloat16)
    out = causal_conv1d_fn(x, weight, bias, activation="silu")
    # bf16 in, fp32 inside (4 FMAs + bias + silu: a few u_fp32), bf16 out: one rounding,
    # ~u_bf16/sqrt(3) = 2.3e-3 rms. 2 u_bf16 = 7.8e-3 leaves 3x.
    res = compare(
        "causal_conv1d",
        out,
        causal_conv1d_ref(x, weight, bias, silu=True),
        2 * U_BF16,
        dtype="bf16",
        version=version,
        reference="F.conv1d (depthwise, causal padding) + silu, float64",
    )
    return {
        **res,
        "kernel_ms": timed_ms(lambda: causal_conv1d_fn(x, weight, bias, activation="silu")),
    }


def check_mamba_scan(quick: bool) -> Result:
    need_gpu()
    version = need("mamba-ssm", "mamba_ssm")
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    b, dim, n, state = 2, 64, 256, 16
    u, delta = torch.randn(b, dim, n, device="cuda"), torch.rand(b, dim, n, device="cuda") * 0.5
    A = -torch.rand(dim, state, device="cuda") - 0.5
    B, C = torch.randn(b, state, n, device="cuda"), torch.randn(b, state, n, device="cuda")
    D, z = torch.randn(dim, device="cuda"), torch.randn(b, dim, n, device="cuda")

    def run() -> torch.Tensor:
        return selective_scan_fn(u, delta, A, B, C, D, z=z, delta_softplus=True)

    out = run()
    ref = selective_scan_ref64(u, delta, A, B, C, D, z, delta_softplus=True)
    # fp32 throughout, built with --use_fast_math: each of the L steps multiplies the state by
    # exp2f(delta*A*log2 e) (fast exp2: ~2 ulp) and adds delta*B*u (~2 ulp): <= 4 u_fp32 of new
    # relative error per step, so <= 4 L u_fp32 = 6e-5 after L=256 steps (the decay |exp(dA)|<1
    # damps older errors); 2x that bound: 8 L u_fp32 = 1.2e-4.
    tol = 8 * n * U_FP32
    res = compare(
        "mamba_ssm.selective_scan",
        out,
        ref,
        tol,
        dtype="fp32",
        version=version,
        reference="sequential selective-scan recurrence, float64",
    )
    return {**res, "kernel_ms": timed_ms(run)}


def fla_inputs() -> tuple[torch.Tensor, ...]:
    """The fla check's inputs: two 64-token chunks, so the inter-chunk state is exercised."""
    b, t, h, d = 1, 128, 2, 64
    q, k = torch.randn(b, t, h, d, device="cuda"), torch.randn(b, t, h, d, device="cuda")
    v = torch.randn(b, t, h, d, device="cuda")
    # log decays in (-inf, 0), mostly near 0
    g = F.logsigmoid(torch.randn(b, t, h, device="cuda") + 3.0)
    return q, k, v, g


# fla's chunked kernels autotune on their first call over up to 48 Triton configurations each,
# which Triton's autotuner compiles one after another (30 to 50 s on H100 with a cold cache). The
# smoke run starts that many compiles up front in a few processes of their own, each running the
# same call with a slice of the configurations, into the same TRITON_CACHE_DIR, while the other
# checks run; the fla check then autotunes over every configuration from the cache, as the user's
# first training step will. The slices write no autotuning result (FLA_CACHE_RESULTS=0,
# TRITON_CACHE_AUTOTUNING=0): only the full autotune picks the configuration that is kept.
PRECOMPILE_ENV = "ENVBUILD_SMOKE_PRECOMPILE"  # "0": off; a number: that many processes
_FLA_PARTS: list[Any] = []


def start_fla_precompile() -> int:
    """Start the fla compile processes (see above); how many were started."""
    import importlib.util
    import subprocess

    wanted = os.environ.get(PRECOMPILE_ENV, "")
    if wanted == "0" or importlib.util.find_spec("fla") is None or not torch.cuda.is_available():
        return 0
    if os.path.exists(_fla_stamp()):
        return 0  # an earlier run compiled and autotuned this call into this cache
    if not _fla_lead(wait=False):
        return 0  # another GPU's worker compiles it into the shared cache: its fla check waits
    n = int(wanted) if wanted.isdigit() else min(8, (os.cpu_count() or 2) - 2)
    if n < 2:
        return 0
    env = {**os.environ, "FLA_CACHE_RESULTS": "0", "TRITON_CACHE_AUTOTUNING": "0"}
    for i in range(n):
        _FLA_PARTS.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--fla-part", str(i), str(n)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return n


_FLA_LEAD: list[Any] = []  # the lock file this worker holds while it compiles fla's kernels


def _fla_lead(wait: bool) -> bool:
    """Take the shared cache's fla lock: one worker of a multi-GPU smoke compiles and autotunes
    fla's kernels, the others wait for it and find them cached (N GPUs, one compile)."""
    import fcntl

    if _FLA_LEAD:
        return True
    path = _fla_stamp() + ".lock"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until the process ends
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        return False  # held elsewhere (or a read-only cache): not this worker's to do
    if wait:
        f.close()  # the leader is done (or gone): on with the cache as it is
    else:
        _FLA_LEAD.append(f)
    return True


def _fla_stamp() -> str:
    """A file in the Triton cache saying a full fla check ran into it, for these versions and GPU:
    a warm cache needs no compile processes (the cache and the stamp go away together)."""
    import hashlib

    versions = [_dist_version(d) for d in ("fla-core", "flash-linear-attention", "triton", "torch")]
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    key = hashlib.sha256(json.dumps([versions, gpu]).encode()).hexdigest()[:16]
    cache = os.environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".triton", "cache"
    )
    return os.path.join(cache, f"envbuild-fla-check-{key}")


def fla_part(i: int, n: int) -> int:
    """One compile process: fla's call with the i-th of n slices of each autotuner's
    configurations."""
    from fla.ops.simple_gla import chunk_simple_gla
    from triton.runtime.autotuner import Autotuner

    prune = Autotuner.prune_configs

    def sliced(self: Any, kwargs: dict[str, Any]) -> list[Any]:
        configs = prune(self, kwargs)
        return configs[i::n] or configs[:1]

    Autotuner.prune_configs = sliced  # type: ignore[method-assign]  # patched for this process only
    q, k, v, g = fla_inputs()
    chunk_simple_gla(q, k, v, g=g, scale=q.shape[-1] ** -0.5)
    torch.cuda.synchronize()
    return 0


def _wait_fla_parts() -> dict[str, Any]:
    if not _FLA_PARTS:
        return {}
    start, failed = time.perf_counter(), []
    import subprocess

    for proc in _FLA_PARTS:
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:  # a stuck compile process only costs the speed-up
            proc.kill()
            proc.wait()
            err = "timed out after 600 s"
        if proc.returncode != 0:
            failed.append((err or "").strip().splitlines()[-1:] or [f"exit {proc.returncode}"])
    out = {
        "precompile_processes": len(_FLA_PARTS),
        "precompile_wait_s": round(time.perf_counter() - start, 2),
    }
    if failed:
        out["precompile_failed"] = f"{len(failed)} of {len(_FLA_PARTS)}: {failed[0][0]}"
    _FLA_PARTS.clear()
    return out


def check_fla(quick: bool) -> Result:
    need_gpu()
    dist = "fla-core" if _has("fla-core") else "flash-linear-attention"
    version = need(dist, "fla")
    try:
        from fla.ops.simple_gla import chunk_simple_gla
    except ImportError as exc:
        raise Skip(f"fla {version} has no chunk_simple_gla: {exc}") from exc
    precompiled = _wait_fla_parts()
    if not os.path.exists(_fla_stamp()):
        _fla_lead(wait=True)  # another worker compiling: its kernels, cached, when it is done
    q, k, v, g = fla_inputs()
    scale = q.shape[-1] ** -0.5

    def run() -> torch.Tensor:
        return chunk_simple_gla(q, k, v, g=g, scale=scale)[0]

    out = run()
    ref = simple_gla_ref(q, k, v, g, scale)
    # fp32 inputs, but tl.dot rounds fp32 operands to TF32 on Hopper (u_tf32 = 4.9e-4) and the
    # chunked form chains four products (q k^T, its product with v, q S, and k^T v into the
    # state, stored in fp32 between chunks): ~u_tf32 rms each, measured 1.5e-3 (3 u_tf32) on
    # H200 against the recurrent kernel. 8 u_tf32 = 3.9e-3 (the four stages' worst case, 2x).
    res = compare(
        "fla",
        out,
        ref,
        8 * U_TF32,
        dtype="fp32 (TF32 tl.dot)",
        version=version,
        reference="simple-GLA recurrence S_t = exp(g_t) S_t-1 + k_t^T v_t, float64",
    )
    try:
        with open(_fla_stamp(), "w", encoding="utf-8") as f:
            f.write("fla's chunk_simple_gla compiled and autotuned here by envbuild smoke\n")
    except OSError:
        pass  # a read-only cache: the next run starts the compile processes again
    for f in _FLA_LEAD:  # the waiting workers go on
        f.close()
    _FLA_LEAD.clear()
    return {**res, "kernel_ms": timed_ms(run), **precompiled}


CHECKS: dict[str, Callable[[bool], Result]] = {
    "matmul": check_matmul,
    "sdpa": check_sdpa,
    "triton": check_triton,
    "torch.compile": check_compile,
    "flash_attn": check_flash_attn,
    "causal_conv1d": check_causal_conv1d,
    "mamba_ssm.selective_scan": check_mamba_scan,
    "fla": check_fla,
    "flash_attn_4": check_flash_attn_4,
}


def top_modules(dist: str) -> list[str]:
    """The importable top-level modules of an installed distribution (top_level.txt, else its
    files)."""
    d = md.distribution(dist)
    names = (d.read_text("top_level.txt") or "").split()
    if not names:
        for f in d.files or ():
            top = f.parts[0] if f.parts else ""
            outside = top.endswith((".dist-info", ".data")) or top in (
                "",
                "..",
                "bin",
                "__pycache__",
            )
            if not outside and (len(f.parts) > 1 or top.endswith((".py", ".so"))):
                names.append(top.split(".")[0])
    return sorted({n for n in names if n.isidentifier() and not n.startswith("_")})


def check_import(dist: str) -> Callable[[bool], Result]:
    """``import`` of each top-level module of ``dist``: a package the lock installed must be there
    and load against this torch (an extension built for another one fails here: undefined symbol).
    """

    def run(quick: bool) -> Result:
        try:
            version = md.version(dist)
        except md.PackageNotFoundError as exc:
            raise ImportError(f"{dist} is not installed, and the lock installs it") from exc
        modules = top_modules(dist)
        if not modules:
            raise ImportError(f"{dist} {version} is installed but has no importable module")
        for module in modules:
            try:
                __import__(module)
            except Exception as exc:  # noqa: BLE001 - the import error is the finding
                raise ImportError(
                    f"{dist} {version}: `import {module}` fails ({type(exc).__name__}): {exc}"
                ) from exc
        return {"imported": True, "version": version, "modules": modules}

    return run


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.backends.cudnn.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["device"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        info["device_count"] = torch.cuda.device_count()
        props = torch.cuda.get_device_properties(0)
        info["memory_gb"] = props.total_memory / 1e9
        if getattr(props, "uuid", None) is not None:
            info["uuid"] = f"GPU-{props.uuid}"
    if os.environ.get("ENVBUILD_SMOKE_GPU"):
        info["gpu_index"] = int(os.environ["ENVBUILD_SMOKE_GPU"])  # nvidia-smi's, set by smoke
    return info


def run_one(name: str, fn: Callable[[bool], Result], quick: bool) -> Result:
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))  # fresh inputs every run
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        res = fn(quick)
        sync()
        tol = res.get("tol", 1e-3)
        err = res.get("rel_err")
        ok = err is not None and math.isfinite(err) and err <= tol
        if res.get("imported"):  # an import check has no answer to compare: it passed by importing
            ok, res = True, {k: v for k, v in res.items() if k != "imported"}
        res["verdict"] = "pass" if ok else "fail"
        if not ok:
            res["reason"] = f"relative error {err:.3g} above the tolerance {tol:.3g}" + (
                f" (a planted error of {PERTURB_FACTOR:g}x the tolerance, {PERTURB_ENV})"
                if res.get("perturbed")
                else ""
            )
    except Skip as exc:
        res = {"verdict": "skip", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a crashing kernel is a failed check, not a crashed run
        res = {
            "verdict": "fail",
            "reason": f"{type(exc).__name__}: {exc}".strip()[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
    res["name"] = name
    res["seconds"] = time.perf_counter() - t0
    if torch.cuda.is_available():
        res["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return res


PREIMPORT_ENV = "ENVBUILD_SMOKE_PREIMPORT"  # "0": off
PREIMPORT_MODULES = (
    "triton",
    "triton.language",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "torch._inductor.codecache",
)


_PREIMPORT: list[Any] = []


def settle_imports() -> None:
    """Wait for the import thread (before any timing: a thread holding the GIL delays the timed
    kernels' launches, and the GPU looked up to 75% slower than its peers on 4x H200)."""
    while _PREIMPORT:
        _PREIMPORT.pop().join()


def start_preimport(only: list[str]) -> None:
    """On a GPU, import what the triton and torch.compile checks need (about a second) on a thread
    while the matmul check starts CUDA and checks its answer; ``settle_imports`` waits for it
    before the timed products and before the next check, so nothing else imports meanwhile."""
    import threading

    wanted = not only or bool({"triton", "torch.compile"} & set(only))
    if os.environ.get(PREIMPORT_ENV) == "0" or not wanted or not torch.cuda.is_available():
        return

    def work() -> None:
        for module in PREIMPORT_MODULES:
            try:
                __import__(module)
            except Exception:  # noqa: BLE001 - the check that needs it reports the failure itself
                return

    thread = threading.Thread(target=work, name="envbuild-preimport", daemon=True)
    thread.start()
    _PREIMPORT.append(thread)


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


def main(argv: list[str] | None = None) -> int:
    # each phase, the time.time() it began and this process's CPU seconds by then: where the run's
    # seconds went (bench/bench_rerun.py); the first is the interpreter and `import torch`
    timeline: list[tuple[str, float, float]] = [
        ("imports", process_started(), 0.0),
        ("start", time.time(), time.process_time()),
    ]
    p = argparse.ArgumentParser(description="envbuild kernel smoke tests")
    p.add_argument("--out")
    p.add_argument("--fla-part", nargs=2, type=int, metavar=("I", "N"), help=argparse.SUPPRESS)
    p.add_argument("--only", action="append", default=[], help="run only this check (repeatable)")
    p.add_argument("--quick", action="store_true", help="smaller matmul and attention benchmarks")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="DIST",
        help="also import every top-level module of this distribution (repeatable)",
    )
    args = p.parse_args(argv)
    if args.fla_part:
        return fla_part(*args.fla_part)
    if not args.out:
        p.error("--out is required")
    unknown = [n for n in args.only if n not in CHECKS]
    if unknown:
        print(
            f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}", file=sys.stderr
        )
        return 2
    own_cache = None
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        own_cache = tempfile.mkdtemp(prefix="envbuild-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = own_cache
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # one small graph: no worker pool
    t0 = time.perf_counter()
    results = []
    if not args.only or "fla" in args.only:
        start_fla_precompile()
    start_preimport(args.only)
    try:
        for name, fn in CHECKS.items():
            if args.only and name not in args.only:
                continue
            if name != "matmul":
                settle_imports()  # only the matmul's start overlaps them: one importer at once
            timeline.append((name, time.time(), time.process_time()))
            res = run_one(name, fn, args.quick)
            results.append(res)
            print(
                "ENVBUILD_SMOKE " + json.dumps({k: v for k, v in res.items() if k != "traceback"}),
                flush=True,
            )
        for dist in args.imports:
            timeline.append((f"import {dist}", time.time(), time.process_time()))
            res = run_one(f"import {dist}", check_import(dist), args.quick)
            results.append(res)
            print(
                "ENVBUILD_SMOKE " + json.dumps({k: v for k, v in res.items() if k != "traceback"}),
                flush=True,
            )
    finally:
        # the fla check did not run (or not to its end): no compile outlives the run
        for proc in _FLA_PARTS:
            proc.kill()
        if own_cache is not None:
            shutil.rmtree(own_cache, ignore_errors=True)
    timeline.append(("result", time.time(), time.process_time()))
    doc = {
        "environment": environment(),
        "checks": results,
        "seconds": time.perf_counter() - t0,
        "ok": not any(r["verdict"] == "fail" for r in results),
        "timeline": timeline,
    }
    tmp = f"{args.out}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, args.out)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    code = main()
    # The result is written and flushed: leave without the interpreter's teardown, which frees
    # torch's, dynamo's and inductor's objects one by one (over a CPU second; bench/README.md).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
