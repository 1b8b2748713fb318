"""saxpy and rmsnorm on CUDA (float32, bfloat16, float16)."""

import torch

from envbuild_cuda_ext import _C  # noqa: F401  (registers torch.ops.envbuild_cuda_ext.*)


def saxpy(alpha: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """alpha * x + y"""
    return torch.ops.envbuild_cuda_ext.saxpy(x, y, float(alpha))


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(mean(x^2, -1) + eps) * weight, over the last dimension."""
    return torch.ops.envbuild_cuda_ext.rmsnorm(x, weight, float(eps))
