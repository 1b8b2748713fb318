"""A competing load pinned to one GPU (``ENVBUILD_SMOKE_LOAD_GPUS``; standalone: no envbuild).

Runs bf16 matrix products back to back on the GPU ``CUDA_VISIBLE_DEVICES`` names (the CPU without
one) until it is stopped or ``--seconds`` pass, so a smoke worker sharing that GPU measures it slow
for real: the planted slow GPU of ``bench/gpu_smoke_all.sh`` and the tests. Prints
``ENVBUILD_LOAD ready`` once the products run.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> int:
    p = argparse.ArgumentParser(description="a competing matmul load")
    p.add_argument("--seconds", type=float, default=600.0)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    n = 8192 if cuda else 256
    x = torch.randn(
        n, n, device="cuda" if cuda else "cpu", dtype=torch.bfloat16 if cuda else torch.float32
    )
    end = time.monotonic() + args.seconds
    ready = False
    while time.monotonic() < end:
        for _ in range(20):
            x = (x @ x).clamp_(-1, 1)  # keeps the values finite
        if cuda:
            torch.cuda.synchronize()
        if not ready:
            print("ENVBUILD_LOAD ready", flush=True)
            ready = True
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
