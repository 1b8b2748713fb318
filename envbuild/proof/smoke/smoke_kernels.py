"""The kernel checks: matmul (with the GPU's TFLOP/s), attention (SDPA, flash-attn 2 and 4),
Triton, torch.compile, causal conv1d and mamba's selective scan (standalone: no envbuild).

Each returns its numbers (``compare``: the relative error against a float64 reference and the
tolerance, derived from the arithmetic the kernel uses, written next to each check) and raises
``Skip`` where it does not apply (not installed, no GPU, unsupported GPU). fla's check is
``smoke_fla``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from smoke_base import (
    U_BF16,
    U_FP32,
    Result,
    Skip,
    attention_ref,
    causal_conv1d_ref,
    compare,
    datasheet_rate,
    dev,
    gpu_uuid,
    has,
    need,
    need_gpu,
    rel_err,
    selective_scan_ref64,
    settle_imports,
    timed_ms,
)
from smoke_early import nvml_sample


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
        uuid = gpu_uuid()
        ms = timed_ms(
            lambda: x @ y, 10 if quick else 50, during=lambda: sample.append(nvml_sample(uuid))
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
    version = need("triton", "triton") if has("triton") else need("pytorch-triton", "triton")
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

    def fa2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return flash_attn_func(q, k, v, causal=True)

    return _check_causal_attention("flash_attn", fa2, version, quick)


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

    return _check_causal_attention("flash_attn_4", fa4, version, quick)


def _check_causal_attention(
    name: str,
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    version: str,
    quick: bool,
) -> Result:
    """A flash-attention kernel ``fn`` (causal, (batch, seq, heads, dim) layout) against the
    float64 softmax(QK^T/sqrt(d))V, then its TFLOP/s."""
    q, k, v = (torch.randn(2, 512, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = fn(q, k, v)
    ref = attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True).transpose(
        1, 2
    )
    res = compare(
        name,
        out,
        ref,
        ATTENTION_TOL,
        dtype="bf16",
        version=version,
        reference="softmax(QK^T/sqrt(d))V, float64",
    )
    return {**res, **_attention_tflops(fn, quick)}


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
