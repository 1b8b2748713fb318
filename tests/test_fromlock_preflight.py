"""``preflight --lock FILE``: the host against the lock's torch, before any download.

Real uv.locks (the gate's conflicting cpu/cu128/cu130 extras); the host is this one (no NVIDIA
driver: said, and the lock's CUDA build a warning) or one whose ``nvidia-smi`` is a script on PATH
answering as an H200 or V100 node with a given driver.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult
from support.gatelocks import GateIndex, uv_groups_lock


def _nvidia_smi(folder: Path, name: str, driver: str, cap: str) -> str:
    """A PATH whose nvidia-smi answers for one GPU ``name`` (compute capability ``cap``) on
    ``driver``."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"""#!/bin/sh
case "$*" in
  *compute_cap*) echo "{name}, {cap}" ;;
  *--query-gpu*) echo "0, {name}, {driver}, 143771, 00000000:18:00.0" ;;
  topo*) printf '\\tGPU0\\nGPU0\\t X \\n' ;;
esac
""")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def _checks(res: EnvbuildResult) -> dict[str, dict[str, str]]:
    doc = json.loads(res.stdout)
    return {c["name"]: c for c in doc["checks"]}


def test_preflight_lock_on_a_host_without_a_gpu(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    if any((Path(p) / "nvidia-smi").exists() for p in os.environ["PATH"].split(os.pathsep)):
        pytest.skip("this host has nvidia-smi")
    lock = uv_groups_lock(tmp_path, gate_index)
    res = run_envbuild(
        "preflight", "--lock", lock, "--extra", "cu130", "--root", tmp_path / "data", "--json"
    )
    assert res.rc == 0, res.output
    checks = _checks(res)
    cuda = checks["lock-cuda"]
    assert cuda["verdict"] == "warn" and cuda["expected"] == "driver >= 580.65.06 (CUDA 13.0)"
    assert (
        "no NVIDIA driver on this host" in cuda["detail"]
        and "torch 2.10.0+cu130 installs here" in cuda["detail"]
    )
    assert checks["lock-arch"]["verdict"] == "skip" and checks["driver"]["verdict"] == "skip"
    assert checks["lock-hosts"]["verdict"] == "pass" and "index" not in checks
    assert json.loads(res.stdout)["verdict"] == "warn" and not (tmp_path / "data").exists()
    cpu = run_envbuild(
        "preflight", "--lock", lock, "--extra", "cpu", "--root", tmp_path / "data", "--json"
    )
    assert cpu.rc == 0, cpu.output
    assert _checks(cpu)["lock-cuda"]["detail"] == "a CPU (or non-CUDA) build: no driver needed"
    text = run_envbuild(
        "preflight", "--lock", lock, "--extra", "cu130", "--root", tmp_path / "data"
    )
    assert text.rc == 0 and "lock-cuda" in text.stdout and "verdict: warn" in text.stdout, (
        text.output
    )


def test_preflight_lock_checks_the_driver_and_the_gpu_architecture(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_groups_lock(tmp_path, gate_index)
    h200_570 = {"PATH": _nvidia_smi(tmp_path / "h200", "NVIDIA H200", "570.86.15", "9.0")}
    res = run_envbuild(
        "preflight",
        "--lock",
        lock,
        "--extra",
        "cu130",
        "--root",
        tmp_path / "data",
        "--json",
        env=h200_570,
    )
    assert res.rc == 3, res.output
    checks = _checks(res)
    assert (
        checks["lock-cuda"]["verdict"] == "fail"
        and "needs driver >= 580.65.06" in checks["lock-cuda"]["detail"]
    )
    assert checks["driver"]["verdict"] == "fail" and checks["lock-arch"]["verdict"] == "pass"

    res = run_envbuild(
        "preflight",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--root",
        tmp_path / "data",
        "--json",
        env=h200_570,
    )
    assert res.rc == 0, res.output
    assert (
        _checks(res)["lock-cuda"]["verdict"] == "pass"
        and _checks(res)["lock-cuda"]["measured"] == "570.86.15"
    )

    v100 = {"PATH": _nvidia_smi(tmp_path / "v100", "Tesla V100-SXM2-32GB", "580.95.05", "7.0")}
    res = run_envbuild(
        "preflight",
        "--lock",
        lock,
        "--extra",
        "cu130",
        "--root",
        tmp_path / "data",
        "--json",
        env=v100,
    )
    assert res.rc == 3, res.output
    arch = _checks(res)["lock-arch"]
    assert arch["verdict"] == "fail" and "compute capability 7.0: CUDA 13.0" in arch["detail"]


def test_preflight_lock_reads_the_cuda_of_a_torch_without_a_local_tag(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """PyPI's torch 2.11.0 (no ``+cu130``) with the cuda-toolkit 13.0.2 its lock installs: a CUDA
    13.0 build (the real uv.lock the GPU proof provisions, bench/stacks/fromlock-gpu)."""
    lock = Path(__file__).parents[1] / "bench" / "stacks" / "fromlock-gpu" / "uv.lock"
    args = (
        "preflight",
        "--lock",
        lock,
        "--environment",
        "linux-x86_64",
        "--skip",
        "index",
        "--skip",
        "python",
        "--root",
        tmp_path / "data",
        "--json",
    )
    h200 = {"PATH": _nvidia_smi(tmp_path / "h200", "NVIDIA H200", "580.159.04", "9.0")}
    res = run_envbuild(*args, env=h200)
    assert res.rc == 0, res.output
    cuda = _checks(res)["lock-cuda"]
    assert cuda["verdict"] == "pass" and cuda["expected"] == "driver >= 580.65.06 (CUDA 13.0)", cuda
    old = {"PATH": _nvidia_smi(tmp_path / "old", "NVIDIA H200", "570.86.15", "9.0")}
    res = run_envbuild(*args, env=old)
    assert res.rc == 3, res.output
    assert "torch 2.11.0 is built for CUDA 13.0" in _checks(res)["lock-cuda"]["detail"]
