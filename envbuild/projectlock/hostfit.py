"""``preflight --lock FILE``: the host against the lock's torch, before anything is downloaded.

The CUDA a torch build is for is in its local version tag (``+cu130`` -> 13.0), or, for a torch
without one (PyPI's Linux wheels), in the runtime wheels the lock installs with it (``cuda-toolkit
13.0.2``, ``nvidia-cuda-runtime-cu12 12.8.90``; the major alone from ``nvidia-*-cu13``); from it:

- the driver: NVIDIA's minimum Linux driver for that toolkit (the CUDA toolkit release notes'
  table). Below the minimum of the CUDA *major* (minor-version compatibility: 525.60.13 for 12.x,
  580.65.06 for 13.x) the torch cannot initialise CUDA: fail. Between that and the toolkit's own
  minimum it runs with reduced features (no PTX JIT of newer kernels): warn;
- the GPUs' compute capability against what that CUDA compiles for, where known: CUDA 13 dropped
  Maxwell, Pascal and Volta (below 7.5), and an architecture newer than the toolkit (Blackwell
  before 12.8) has no kernels in the wheel.

The host's other checks are ``envbuild.host.preflight``'s own (driver and GPUs as they are seen,
topology, NUMA, compilers, Python, disk, env), run on the stack the lock provisions. On a host
with no NVIDIA driver the driver and GPU checks say so and are skipped; the lock's CUDA build is
a warning there (it installs, as in an image build, and runs only where a GPU is).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from packaging.version import InvalidVersion, Version

from envbuild import nvidia
from envbuild.abitag import runtime_cuda
from envbuild.host.preflight import Check, HostFacts, PreflightReport, run_preflight
from envbuild.layout import Paths
from envbuild.projectlock.image import cuda_of
from envbuild.spec import Host, StackSpec

__all__ = ["DRIVER_MIN", "lock_preflight"]

# CUDA toolkit -> minimum Linux driver (CUDA toolkit release notes, "CUDA Toolkit and Corresponding
# Driver Versions")
DRIVER_MIN: dict[str, str] = {
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}
# CUDA major -> the minimum driver of minor-version compatibility (any 12.x / 13.x runs on it)
MAJOR_DRIVER_MIN: dict[str, str] = {"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}
# CUDA major -> the oldest compute capability its toolkit compiles for
OLDEST_ARCH: dict[str, str] = {"11": "3.5", "12": "5.0", "13": "7.5"}
# compute capability -> the first CUDA that compiles for it
FIRST_CUDA: dict[str, str] = {
    "8.9": "11.8",
    "9.0": "11.8",
    "10.0": "12.8",
    "12.0": "12.8",
    "10.3": "12.9",
    "12.1": "12.9",
    "11.0": "13.0",
}


def _v(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def gpu_capabilities() -> list[tuple[str, str]]:
    """``(name, compute capability)`` of each GPU (``nvidia-smi --query-gpu=name,compute_cap``); []
    without."""
    fields = ("name", "compute_cap")
    answer = nvidia.query(fields)
    rows = nvidia.parse_query(answer.output, fields) if answer.output else []
    return [(r["name"], r["compute_cap"]) for r in rows if r["name"] and r["compute_cap"]]


def check_lock_cuda(torch: str, cuda: str | None, facts: HostFacts) -> list[Check]:
    """The driver against the lock's CUDA (see the module docstring)."""
    if cuda is None:
        return [
            Check(
                "lock-cuda",
                "pass",
                "no CUDA",
                f"torch {torch}",
                "a CPU (or non-CUDA) build: no driver needed",
            )
        ]
    major = cuda.split(".")[0]
    floor, own = MAJOR_DRIVER_MIN.get(major), DRIVER_MIN.get(cuda)
    expected = f"driver >= {own or floor or '?'} (CUDA {cuda})"
    if facts.gpu_query is None:
        return [
            Check(
                "lock-cuda",
                "warn",
                "no NVIDIA driver",
                expected,
                f"{facts.gpu_error or 'no GPUs'}: torch {torch} installs here, and runs its CUDA"
                " kernels only on a host with a GPU and that driver",
            )
        ]
    drivers = sorted(
        {
            line.split(",")[2].strip()
            for line in facts.gpu_query.splitlines()
            if line.count(",") >= 2
        }
    )
    measured = ", ".join(drivers) or "unknown"
    low = min((_v(d) for d in drivers), default=Version("0"))
    if floor and low < _v(floor):
        return [
            Check(
                "lock-cuda",
                "fail",
                measured,
                expected,
                f"torch {torch} is built for CUDA {cuda}, which needs driver >= {floor} to start at"
                " all: upgrade the driver, or lock a torch for an older CUDA",
            )
        ]
    if own is None:
        return [
            Check(
                "lock-cuda",
                "warn",
                measured,
                expected,
                f"no known minimum driver for CUDA {cuda}; the CUDA {major}.x floor ({floor})"
                " holds",
            )
        ]
    if low < _v(own):
        return [
            Check(
                "lock-cuda",
                "warn",
                measured,
                expected,
                f"runs by CUDA minor-version compatibility (>= {floor}), without PTX JIT of newer"
                f" kernels; driver {own} is CUDA {cuda}'s own minimum",
            )
        ]
    return [Check("lock-cuda", "pass", measured, expected)]


def check_lock_arch(torch: str, cuda: str | None, gpus: list[tuple[str, str]]) -> list[Check]:
    """Each GPU's compute capability against what the lock's CUDA compiles for (where known)."""
    if cuda is None or not gpus:
        return [
            Check(
                "lock-arch",
                "skip",
                "no GPU" if not gpus else "no CUDA",
                f"torch {torch}",
                "nothing to compare" if gpus else "no NVIDIA GPU visible (nvidia-smi)",
            )
        ]
    oldest = OLDEST_ARCH.get(cuda.split(".")[0])
    measured = ", ".join(sorted({f"{n} ({c})" for n, c in gpus}))
    expected = f"compute capability >= {oldest}" if oldest else "any"
    for name, cap in gpus:
        if oldest and _v(cap) < _v(oldest):
            return [
                Check(
                    "lock-arch",
                    "fail",
                    measured,
                    expected,
                    f"{name} is compute capability {cap}: CUDA {cuda} (torch {torch}) compiles for"
                    f" {oldest} and newer only; lock a torch for an older CUDA",
                )
            ]
        first = FIRST_CUDA.get(cap)
        if first and _v(cuda) < _v(first):
            return [
                Check(
                    "lock-arch",
                    "fail",
                    measured,
                    f"CUDA >= {first} for compute capability {cap}",
                    f"{name} (compute capability {cap}) needs CUDA {first} or newer; torch {torch}"
                    f" is built for CUDA {cuda} and has no kernels for it",
                )
            ]
    return [Check("lock-arch", "pass", measured, expected)]


# the runtime wheels whose version is the CUDA release itself (nvidia-cuda-runtime-cu12 12.8.90 ->
# 12.8)
_CUDA_RELEASE = re.compile(r"(?:cuda-toolkit|nvidia-cuda-runtime(?:-cu\d\d)?)", re.ASCII)


def runtime_cuda_release(runtime: Iterable[tuple[str, str | None]]) -> str | None:
    """The CUDA of a torch without a local tag (PyPI's Linux wheels), from the runtime wheels the
    lock installs with it: ``cuda-toolkit 13.0.2`` or ``nvidia-cuda-runtime-cu12 12.8.90`` ->
    ``13.0`` / ``12.8``; else the major alone (``nvidia-cudnn-cu13`` -> ``13``); None without."""
    for name, version in runtime:
        if version and _CUDA_RELEASE.fullmatch(name) and (m := re.match(r"(\d+)\.(\d+)", version)):
            return f"{int(m.group(1))}.{int(m.group(2))}"
    found = runtime_cuda(runtime)
    return str(found[0]) if found else None


def lock_preflight(
    spec: StackSpec,
    paths: Paths,
    *,
    checks: list[str],
    index_timeout: float,
    python: str | None,
    builds: bool = False,
    runtime: Iterable[tuple[str, str | None]] = (),
) -> tuple[StackSpec, PreflightReport]:
    """The host's checks on the lock's stack, with the lock's CUDA as its driver minimum (and as the
    nvcc it needs when ``builds``: a stage compiles extensions against torch), then the lock's own
    checks (driver against the CUDA, GPU architecture). The CUDA is torch's local tag's, else that
    of the runtime wheels the lock installs with it (``runtime``: name, version)."""
    cuda = cuda_of(spec.abi.version) or runtime_cuda_release(runtime)
    floor = MAJOR_DRIVER_MIN.get(cuda.split(".")[0]) if cuda else None
    spec = replace(
        spec,
        abi=replace(spec.abi, cuda=cuda),
        host=Host(driver_min=floor, cuda_toolkit=cuda if builds else None),
    )
    facts = HostFacts.gather()
    report = run_preflight(
        spec, paths, checks=checks, facts=facts, index_timeout=index_timeout, python=python
    )
    gpus = gpu_capabilities() if facts.gpu_query is not None else []
    extra = [
        *check_lock_cuda(spec.abi.version, cuda, facts),
        *check_lock_arch(spec.abi.version, cuda, gpus),
    ]
    return spec, PreflightReport((*extra, *report.checks))
