"""fla's check (``chunk_simple_gla`` against its float64 recurrence), and its compile: fla's
autotuned Triton kernels compiled once for all GPUs, in processes of their own (standalone: no
envbuild)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from smoke_base import (
    U_TF32,
    Result,
    Skip,
    compare,
    dist_version,
    has,
    need,
    need_gpu,
    simple_gla_ref,
    timed_ms,
)

# the script the compile processes run (``--fla-part I N``)
CHECKS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checks.py")


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
                [sys.executable, CHECKS_SCRIPT, "--fla-part", str(i), str(n)],
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

    versions = [dist_version(d) for d in ("fla-core", "flash-linear-attention", "triton", "torch")]
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
    dist = "fla-core" if has("fla-core") else "flash-linear-attention"
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
