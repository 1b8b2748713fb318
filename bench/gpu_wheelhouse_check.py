"""Run the wheelhouse-built kernels against PyTorch references; print relative errors.

Called by bench/gpu_wheelhouse.sh after installing the wheels; exits 1 on any failure.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from envbuild.wheelhouse import provenance_mismatch, read_provenance


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def main() -> int:
    import envbuild_cuda_ext as ext

    try:  # not built when WHEELHOUSE_SPECS names only our own extension
        import causal_conv1d
        from causal_conv1d import causal_conv1d_fn
    except ImportError:
        causal_conv1d = None

    torch.manual_seed(0)
    dev = "cuda"
    results: list[tuple[str, float, float]] = []
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 1e-2)):
        x = torch.randn(1 << 20, device=dev, dtype=dtype)
        y = torch.randn_like(x)
        results.append(
            (
                f"envbuild_cuda_ext.saxpy {dtype}",
                rel(ext.saxpy(1.5, x, y), 1.5 * x.float() + y.float()),
                tol,
            )
        )
        h = torch.randn(64, 4096, device=dev, dtype=dtype)
        w = torch.randn(4096, device=dev, dtype=dtype)
        ref = h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
        results.append(
            (f"envbuild_cuda_ext.rmsnorm {dtype}", rel(ext.rmsnorm(h, w, 1e-6), ref), tol)
        )

        if causal_conv1d is None:
            continue
        b, d, length, width = 2, 256, 1024, 4
        xc = torch.randn(b, d, length, device=dev, dtype=dtype)
        wc = torch.randn(d, width, device=dev, dtype=dtype)
        bc = torch.randn(d, device=dev, dtype=dtype)
        out = causal_conv1d_fn(xc, wc, bc, activation="silu")
        ref = F.silu(
            F.conv1d(xc.float(), wc.float().unsqueeze(1), bc.float(), padding=width - 1, groups=d)[
                ..., :length
            ]
        )
        results.append((f"causal_conv1d_fn(silu) {dtype}", rel(out, ref), tol))
    ok = True
    for name, err, tol in results:
        good = err < tol
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {name:<42} rel_err={err:.3e} (tol {tol:g})")

    dists = ["envbuild-cuda-ext"]
    if causal_conv1d is not None:
        print(f"causal_conv1d from {Path(causal_conv1d.__file__).parent}")
        dists.insert(0, "causal-conv1d")
    for dist in dists:
        d = md.distribution(dist)
        prov = read_provenance(Path(str(d._path)))  # type: ignore[attr-defined]
        requires = d.requires or []
        mismatch = provenance_mismatch(prov, torch.__version__, torch.version.git_version)
        print(
            f"{dist} {d.version}: Requires-Dist={requires} built against torch "
            f"{prov and prov['torch']['version']} arch_list={prov and prov['arch_list']} "
            f"nvcc={prov and prov['compiler']['nvcc']} -> ABI check: {mismatch or 'ok'}"
        )
        ok &= prov is not None and mismatch is None and not requires
    print("ALL OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
