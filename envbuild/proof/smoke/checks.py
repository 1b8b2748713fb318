"""envbuild kernel smoke tests, run by the target venv's python (standalone: no envbuild import).

Every check computes a result with the kernel under test and a reference computed another way
(another backend, a higher precision, a plain-PyTorch formula) on fresh random inputs, and
reports the relative error ``||out - ref|| / ||ref||``, the time and a verdict:
pass / fail / skip (with the reason: not installed, no GPU, unsupported GPU).

Usage: python checks.py --out result.json [--only NAME ...] [--quick]
Prints one ``ENVBUILD_SMOKE {json}`` line per check; exit 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import math
import os
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
    "H200": 989.0, "H100 SXM": 989.0, "H100 80GB HBM3": 989.0, "H100 NVL": 835.0, "H100 PCIe": 756.0,
    "GH200": 989.0, "B200": 2250.0, "B100": 1750.0, "GB200": 2500.0, "A100": 312.0, "L40S": 362.0,
}

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
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def need_gpu() -> None:
    if not torch.cuda.is_available():
        raise Skip("no CUDA GPU visible to torch")


def need(dist: str, module: str) -> str:
    try:
        version = md.version(dist)
    except md.PackageNotFoundError:
        raise Skip(f"{dist} is not installed") from None
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001 - an installed package that cannot import is a failure
        raise RuntimeError(f"{dist} {version} is installed but `import {module}` fails: {exc}") from exc
    return version


def datasheet_rate(name: str) -> float | None:
    for key in sorted(DATASHEET_BF16_TFLOPS, key=len, reverse=True):
        if key in name:
            return DATASHEET_BF16_TFLOPS[key]
    return None


# ----------------------------------------------------------------------------- checks


def check_matmul(quick: bool) -> Result:
    d = dev()
    if d.type == "cuda":
        a, b = torch.randn(2048, 2048, device=d, dtype=torch.bfloat16), torch.randn(2048, 2048, device=d, dtype=torch.bfloat16)
        ref = a.double() @ b.double()
        err = rel_err(a @ b, ref)
        n = 4096 if quick else 8192
        x, y = torch.randn(n, n, device=d, dtype=torch.bfloat16), torch.randn(n, n, device=d, dtype=torch.bfloat16)
        for _ in range(3):
            x @ y
        sync()
        iters = 10 if quick else 50
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            x @ y
        end.record()
        sync()
        seconds = start.elapsed_time(end) / 1e3 / iters
        tflops = 2 * n**3 / seconds / 1e12
        name = torch.cuda.get_device_name()
        sheet = datasheet_rate(name)
        return {"dtype": "bf16", "tol": 1e-2, "rel_err": err, "tflops": tflops, "datasheet_tflops": sheet,
                "fraction_of_datasheet": tflops / sheet if sheet else None, "size": n,
                "reference": "float64 matmul"}
    a, b = torch.randn(512, 384), torch.randn(384, 256)
    err = rel_err(a @ b, a.double() @ b.double())
    ab, bb = a.bfloat16(), b.bfloat16()
    err_bf16 = rel_err(ab @ bb, ab.double() @ bb.double())
    t0 = time.perf_counter()
    n = 1024
    x, y = torch.randn(n, n), torch.randn(n, n)
    x @ y
    gflops = 2 * n**3 / (time.perf_counter() - t0) / 1e9
    return {"dtype": "fp32 (+bf16)", "tol": 1e-2, "rel_err": max(err, err_bf16), "rel_err_fp32": err,
            "rel_err_bf16": err_bf16, "tflops": gflops / 1e3, "reference": "float64 matmul"}


def _attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def check_sdpa(quick: bool) -> Result:
    d = dev()
    if d.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q, k, v = (torch.randn(2, 8, 1024, 128, device=d, dtype=torch.bfloat16) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        return {"dtype": "bf16", "tol": 2e-2, "rel_err": rel_err(out, ref),
                "backend": "flash", "reference": "math backend, fp32"}
    q, k, v = (torch.randn(2, 4, 128, 64) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return {"dtype": "fp32", "tol": 1e-5, "rel_err": rel_err(out, _attention_ref(q, k, v, True)),
            "backend": "default (CPU)", "reference": "explicit softmax(QK^T)V in float64"}


def check_triton(quick: bool) -> Result:
    need_gpu()
    version = need("triton", "triton") if _has("triton") else need("pytorch-triton", "triton")
    import triton
    import triton.language as tl

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
    return {"dtype": "fp32", "tol": 1e-5, "rel_err": rel_err(out, ref), "version": triton.__version__ or version,
            "reference": "torch, float64"}


def _has(dist: str) -> bool:
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


def check_compile(quick: bool) -> Result:
    d = dev()

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w) * torch.sigmoid(x.sum(-1, keepdim=True)) + torch.sin(x[..., : w.shape[1]])

    x, w = torch.randn(64, 96, device=d), torch.randn(96, 48, device=d)
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    out = compiled(x, w)
    ref = f(x.double(), w.double())
    backend = "triton (GPU)" if d.type == "cuda" else "C++ (CPU)"
    return {"dtype": "fp32", "tol": 1e-4, "rel_err": rel_err(out, ref), "backend": f"inductor, {backend}",
            "reference": "eager, float64"}


def check_flash_attn(quick: bool) -> Result:
    need_gpu()
    version = need("flash-attn", "flash_attn")
    from flash_attn import flash_attn_func
    q, k, v = (torch.randn(2, 512, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    ref = _attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True).transpose(1, 2)
    return {"dtype": "bf16", "tol": 2e-2, "rel_err": rel_err(out, ref), "version": version,
            "reference": "explicit attention, float64"}


def check_flash_attn_4(quick: bool) -> Result:
    need_gpu()
    major, _ = torch.cuda.get_device_capability()
    version = need("flash-attn-4", "flash_attn.cute")
    if major < 9:
        raise Skip(f"flash-attn-4 needs SM90 or newer; this GPU is SM{major}x")
    from flash_attn.cute import flash_attn_func
    q, k, v = (torch.randn(2, 512, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    out = out[0] if isinstance(out, tuple) else out
    ref = _attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True).transpose(1, 2)
    return {"dtype": "bf16", "tol": 2e-2, "rel_err": rel_err(out, ref), "version": version,
            "reference": "explicit attention, float64"}


def check_causal_conv1d(quick: bool) -> Result:
    need_gpu()
    version = need("causal-conv1d", "causal_conv1d")
    from causal_conv1d import causal_conv1d_fn
    b, c, n, width = 2, 64, 512, 4
    x = torch.randn(b, c, n, device="cuda")
    weight, bias = torch.randn(c, width, device="cuda"), torch.randn(c, device="cuda")
    out = causal_conv1d_fn(x, weight, bias, activation="silu")
    xd = x.double()
    ref = F.silu(F.conv1d(xd, weight.double().unsqueeze(1), bias.double(), padding=width - 1, groups=c)[..., :n])
    return {"dtype": "fp32", "tol": 1e-4, "rel_err": rel_err(out, ref), "version": version,
            "reference": "F.conv1d (depthwise, causal padding) + silu, float64"}


def check_mamba_scan(quick: bool) -> Result:
    need_gpu()
    version = need("mamba-ssm", "mamba_ssm")
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref
    b, dim, n, state = 2, 64, 256, 16
    u, delta = torch.randn(b, dim, n, device="cuda"), torch.rand(b, dim, n, device="cuda") * 0.5
    A = -torch.rand(dim, state, device="cuda") - 0.5
    B, C = torch.randn(b, state, n, device="cuda"), torch.randn(b, state, n, device="cuda")
    D, z = torch.randn(dim, device="cuda"), torch.randn(b, dim, n, device="cuda")
    out = selective_scan_fn(u, delta, A, B, C, D, z=z, delta_softplus=True)
    ref = selective_scan_ref(u.double(), delta.double(), A.double(), B.double(), C.double(), D.double(),
                             z=z.double(), delta_softplus=True)
    return {"dtype": "fp32", "tol": 1e-3, "rel_err": rel_err(out, ref), "version": version,
            "reference": "mamba_ssm selective_scan_ref (sequential PyTorch), float64"}


def check_fla(quick: bool) -> Result:
    need_gpu()
    dist = "fla-core" if _has("fla-core") else "flash-linear-attention"
    version = need(dist, "fla")
    try:
        from fla.ops.simple_gla import chunk_simple_gla, fused_recurrent_simple_gla
    except ImportError as exc:
        raise Skip(f"fla {version} has no simple_gla chunk/recurrent pair: {exc}") from None
    b, t, h, d = 2, 256, 4, 64
    q, k = torch.randn(b, t, h, d, device="cuda") * 0.1, torch.randn(b, t, h, d, device="cuda") * 0.1
    v = torch.randn(b, t, h, d, device="cuda")
    g = -torch.rand(b, t, h, device="cuda") * 0.1
    out = chunk_simple_gla(q, k, v, g=g)[0]
    ref = fused_recurrent_simple_gla(q, k, v, g=g)[0]
    return {"dtype": "fp32", "tol": 1e-3, "rel_err": rel_err(out, ref), "version": version,
            "reference": "fla fused_recurrent_simple_gla (the recurrent form of the chunked kernel)"}


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


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__,
                            "cuda": torch.version.cuda, "git_version": getattr(torch.version, "git_version", None),
                            "cuda_available": torch.cuda.is_available()}
    if torch.backends.cudnn.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["device"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        info["device_count"] = torch.cuda.device_count()
        info["memory_gb"] = torch.cuda.get_device_properties(0).total_memory / 1e9
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
        res["verdict"] = "pass" if ok else "fail"
        if not ok:
            res["reason"] = f"relative error {err:.3g} above the tolerance {tol:g}"
    except Skip as exc:
        res = {"verdict": "skip", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a crashing kernel is a failed check, not a crashed run
        res = {"verdict": "fail", "reason": f"{type(exc).__name__}: {exc}".strip()[:2000],
               "traceback": traceback.format_exc()[-4000:]}
    res["name"] = name
    res["seconds"] = time.perf_counter() - t0
    if torch.cuda.is_available():
        res["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="envbuild kernel smoke tests")
    p.add_argument("--out", required=True)
    p.add_argument("--only", action="append", default=[], help="run only this check (repeatable)")
    p.add_argument("--quick", action="store_true", help="smaller matmul benchmark")
    args = p.parse_args(argv)
    unknown = [n for n in args.only if n not in CHECKS]
    if unknown:
        print(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="envbuild-inductor-"))
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # one small graph: no worker pool
    t0 = time.perf_counter()
    results = []
    for name, fn in CHECKS.items():
        if args.only and name not in args.only:
            continue
        res = run_one(name, fn, args.quick)
        results.append(res)
        print("ENVBUILD_SMOKE " + json.dumps({k: v for k, v in res.items() if k != "traceback"}), flush=True)
    doc = {"environment": environment(), "checks": results, "seconds": time.perf_counter() - t0,
           "ok": not any(r["verdict"] == "fail" for r in results)}
    tmp = f"{args.out}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, args.out)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
