"""The GPUs smoke runs on, one worker process each, and the comparison that names a slow one.

``visible_gpus`` lists them (``envbuild.nvidia.visible_gpus``: index, UUID, PCI bus id, name;
``CUDA_VISIBLE_DEVICES`` narrows the list as it narrows CUDA's); ``select`` applies ``--gpus``.
Each worker sees its GPU alone (``CUDA_VISIBLE_DEVICES=<UUID>``: no ordering between CUDA's and
nvidia-smi's to get wrong) and runs every check there; the Triton and inductor caches are the data
root's, shared.

``slow_findings`` compares each timed check (a measured TFLOP/s: matmul, the attention kernels)
across the GPUs: one more than the margin below the median of its peers is slow. With one GPU,
the matmul is compared with the figure expected of that model (``EXPECTED_MATMUL_FRACTION`` of
its datasheet rate, which the checks report).

Planted faults, for the tests and ``bench/gpu_smoke_all.sh`` on any GPU host:

- ``ENVBUILD_SMOKE_PERTURB_GPUS=1[,2]``: only these GPUs' workers get ``ENVBUILD_SMOKE_PERTURB``
  (the checks it names, ``all`` when unset): their answers are wrong by 3x the tolerance;
- ``ENVBUILD_SMOKE_LOAD_GPUS=1``: a competing matmul loop (``load.py``) runs pinned to these GPUs
  while the workers run, so they are slow for real;
- ``ENVBUILD_SMOKE_FAKE_GPUS=N``: N stand-in "GPUs" (the CPU, one worker process each), so
  CPU-only CI covers the orchestration with real processes.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from envbuild import nvidia
from envbuild.errors import PreflightError
from envbuild.nvidia import GPU

PERTURB_GPUS_ENV = "ENVBUILD_SMOKE_PERTURB_GPUS"
LOAD_GPUS_ENV = "ENVBUILD_SMOKE_LOAD_GPUS"
FAKE_GPUS_ENV = "ENVBUILD_SMOKE_FAKE_GPUS"
PERTURB_ENV = "ENVBUILD_SMOKE_PERTURB"  # checks.py's: which checks' answers are perturbed
DEFAULT_SLOW_MARGIN = 0.10
# An 8192^3 bf16 matmul reaches 78-81% of the datasheet rate on healthy H100 and H200 here
# (device KINDS.md, bench/results-gpu-*): a lone GPU is compared with 75% of its datasheet.
EXPECTED_MATMUL_FRACTION = 0.75
PEERS = "median of its peers"

__all__ = [
    "DEFAULT_SLOW_MARGIN",
    "parse_gpu_list",
    "select",
    "slow_findings",
    "visible_gpus",
    "worker_env",
]


def visible_gpus(env: Mapping[str, str] | None = None) -> list[GPU]:
    """The GPUs this process may use (``nvidia.visible_gpus``); ``ENVBUILD_SMOKE_FAKE_GPUS=N``
    gives N stand-ins."""
    env = os.environ if env is None else env
    fake = env.get(FAKE_GPUS_ENV, "").strip()
    if fake.isdigit() and int(fake) > 0:
        return [
            GPU(i, f"FAKE-GPU-{i}", f"fake:{i:02x}", "CPU standing in for a GPU", fake=True)
            for i in range(int(fake))
        ]
    return nvidia.visible_gpus(env)


def parse_gpu_list(text: str) -> tuple[int, ...] | None:
    """``--gpus``: ``all`` (None) or comma-separated indices (``0,3``)."""
    text = text.strip()
    if text == "all":
        return None
    items = [t.strip() for t in text.split(",")]
    if not items or not all(t.isdigit() for t in items):
        raise ValueError(f"{text!r}: expected 'all' or GPU indices such as 0,3")
    return tuple(dict.fromkeys(int(t) for t in items))


def select(gpus: Sequence[GPU], wanted: tuple[int, ...] | None) -> list[GPU]:
    """The GPUs ``--gpus`` names (all when None); a usage error naming those not visible."""
    if wanted is None:
        return list(gpus)
    by_index = {g.index: g for g in gpus}
    missing = [i for i in wanted if i not in by_index]
    if missing:
        shown = ", ".join(str(g.index) for g in gpus) or "none"
        raise PreflightError(
            f"--gpus names GPU {', '.join(map(str, missing))}, which this process cannot see "
            f"(visible GPUs: {shown})",
            hint="Check nvidia-smi and CUDA_VISIBLE_DEVICES, or leave --gpus out for all of them.",
        )
    return [by_index[i] for i in wanted]


def _index_set(env: Mapping[str, str], name: str) -> set[int]:
    return {int(w) for w in env.get(name, "").split(",") if w.strip().isdigit()}


def worker_env(base: Mapping[str, str], gpu: GPU | None) -> dict[str, str]:
    """One worker's environment: its GPU alone, and a planted wrong answer only where asked."""
    env = dict(base)
    if gpu is None:
        return env
    env["CUDA_VISIBLE_DEVICES"] = "" if gpu.fake else gpu.uuid
    env["ENVBUILD_SMOKE_GPU"] = str(gpu.index)  # the worker's results name it
    planted = _index_set(base, PERTURB_GPUS_ENV)
    if planted:
        if gpu.index in planted:
            env[PERTURB_ENV] = base.get(PERTURB_ENV) or "all"
        else:
            env.pop(PERTURB_ENV, None)
    return env


def load_gpus(env: Mapping[str, str], gpus: Sequence[GPU]) -> list[GPU]:
    """The GPUs a planted competing load is pinned to (``ENVBUILD_SMOKE_LOAD_GPUS``)."""
    wanted = _index_set(env, LOAD_GPUS_ENV)
    return [g for g in gpus if g.index in wanted]


# ----------------------------------------------------------------------------- the slow GPU


def _rates(checks: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each passed timed check's TFLOP/s."""
    out = {}
    for c in checks:
        rate = c.get("tflops")
        if c.get("verdict") == "pass" and isinstance(rate, (int, float)) and rate > 0:
            out[str(c.get("name"))] = float(rate)
    return out


def slow_findings(
    per_gpu: Sequence[tuple[GPU, Sequence[Mapping[str, Any]]]], margin: float | None
) -> list[dict[str, Any]]:
    """Each (GPU, timed check) more than ``margin`` below the median of the other GPUs' figures;
    with one GPU, its matmul against ``EXPECTED_MATMUL_FRACTION`` of the datasheet rate.
    ``margin`` None: off."""
    if margin is None:
        return []
    rates = [(gpu, _rates(checks), checks) for gpu, checks in per_gpu]
    found: list[dict[str, Any]] = []
    if len(rates) == 1:
        gpu, mine, checks = rates[0]
        mm = next((c for c in checks if c.get("name") == "matmul"), {})
        sheet = mm.get("datasheet_tflops")
        if "matmul" in mine and isinstance(sheet, (int, float)) and sheet > 0:
            expected = EXPECTED_MATMUL_FRACTION * float(sheet)
            if mine["matmul"] < (1 - margin) * expected:
                found.append(
                    _finding(
                        gpu, "matmul", mine["matmul"], expected, "figure expected of its model", mm
                    )
                )
        return found
    for i, (gpu, mine, checks) in enumerate(rates):
        for name, rate in mine.items():
            peers = [r[name] for j, (_, r, _) in enumerate(rates) if j != i and name in r]
            if not peers:
                continue
            median = statistics.median(peers)
            if rate < (1 - margin) * median:
                check = next(c for c in checks if c.get("name") == name)
                found.append(_finding(gpu, name, rate, median, PEERS, check))
    return found


def _finding(
    gpu: GPU, check: str, rate: float, against: float, what: str, result: Mapping[str, Any]
) -> dict[str, Any]:
    below = 1 - rate / against
    # slower than its peers fails smoke; below the model's expected figure (an estimate) warns
    finding: dict[str, Any] = {
        **gpu.to_json(),
        "check": check,
        "tflops": rate,
        "compared_with": what,
        "reference_tflops": against,
        "below": below,
        "verdict": "fail" if what == PEERS else "warn",
    }
    nvml = result.get("nvml")
    if isinstance(nvml, Mapping):
        finding["nvml"] = dict(nvml)
    return finding


def describe_finding(f: Mapping[str, Any]) -> str:
    """A slow GPU in one line: which, how slow against what, and NVML's clocks and reasons."""
    text = (
        f"GPU {f['index']} ({f['uuid']}, PCI {f['bus_id']}) is slow: {f['check']} "
        f"{f['tflops']:.0f} TFLOP/s, {100 * f['below']:.0f}% below the {f['compared_with']} "
        f"{f['reference_tflops']:.0f}"
    )
    nvml = f.get("nvml")
    if isinstance(nvml, Mapping):
        parts = []
        if nvml.get("sm_clock_mhz") is not None:
            parts.append(
                f"SM clock {nvml['sm_clock_mhz']} of {nvml.get('sm_clock_max_mhz', '?')} MHz"
            )
        if nvml.get("throttle_reasons") is not None:
            parts.append("throttle reasons: " + (", ".join(nvml["throttle_reasons"]) or "none"))
        for key, unit in (("temperature_c", " C"), ("power_w", " W")):
            if nvml.get(key) is not None:
                parts.append(f"{key.split('_')[0]} {nvml[key]:.0f}{unit}")
        if nvml.get("processes") is not None:
            own = nvml.get("own_processes")
            parts.append(
                f"{nvml['processes']} compute processes on it"
                + (f" ({own} of them this smoke's)" if own else "")
            )
        if parts:
            text += " (" + "; ".join(parts) + ")"
    return text
