"""The distributed step: real torchrun, real gloo processes, the real torch CPU build."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.cli import main

REPO = Path(__file__).parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_process_gloo(torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dist-step", "--venv", str(torch_venv), "--root", str(tmp_path), "--steps", "3", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert doc["mesh"] == {"dp": 1, "tp": 2, "ep": 2, "efsdp": 1, "experts": 8}
    assert all(doc["checks"].values()), doc["checks"]
    assert doc["losses"][0] > doc["losses"][-1]
    assert doc["parity"]["max_loss_diff"] <= doc["parity"]["tolerance"]["loss"] == 1e-4
    ck = doc["checkpoint"]
    assert ck["eval_loss_loaded"] == ck["eval_loss_saved"] != ck["eval_loss_perturbed"]
    assert doc["allreduce"]["busbw_gbps"] > 0
    assert len(doc["timing"]) and doc["timing"]["first_step_seconds"] > 0
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["ranks"][0]["peak_memory"]["rss_mb"] > 0
    assert doc["env"]["TORCH_NCCL_HIGH_PRIORITY"] == "1" and doc["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] is None
    receipt = json.loads(Path(doc["receipt"]).read_text())
    assert receipt["kind"] == "dist-step"
    assert receipt["names"]["launch_regime"] == "torchrun-standalone 1x2 gloo dp1xtp2 ep2"
    assert any(d["name"] == "torch" for d in receipt["software"]["distributions"])


@pytest.mark.slow
@pytest.mark.parametrize("nproc,dp,tp,ep", [(1, 0, 0, 0), (2, 2, 1, 1), (3, 0, 0, 0), (4, 2, 2, 2)])
def test_layouts(torch_venv: Path, tmp_path: Path, nproc: int, dp: int, tp: int, ep: int) -> None:
    code = main(["dist-step", "--venv", str(torch_venv), "--root", str(tmp_path), "--steps", "2", "--no-receipt",
                 "--nproc", str(nproc), "--dp", str(dp), "--tp", str(tp), "--ep", str(ep)])
    assert code == 0


@pytest.mark.slow
def test_two_agents_c10d_rendezvous(torch_venv: Path, tmp_path: Path) -> None:
    """Multi-node as torchrun does it: two agents (one process each) join one c10d rendezvous."""
    endpoint = f"127.0.0.1:{_free_port()}"
    argv = [sys.executable, "-m", "envbuild", "dist-step", "--venv", str(torch_venv), "--steps", "2", "--nproc", "1",
            "--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", "t2", "--ckpt-dir", str(tmp_path / "ck"),
            "--json"]
    agents = [subprocess.Popen([*argv, "--root", str(tmp_path / f"node{i}")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO) for i in range(2)]
    outs = [a.communicate(timeout=300) for a in agents]
    for agent, (out, err) in zip(agents, outs, strict=True):
        assert agent.returncode == 0, err[-3000:]
        doc = json.loads(out)
        assert doc["ok"] and doc["world_size"] == 2 and doc["nnodes"] == 2
        assert doc["launch_regime"].startswith("torchrun-c10d 2x1 gloo")


def test_usage_errors(torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dist-step", "--venv", str(torch_venv), "--root", str(tmp_path), "--nnodes", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "--rdzv-endpoint" in err and "Traceback" not in err
    code = main(["dist-step", "--venv", str(tmp_path / "none"), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3 and "no Python interpreter" in err
    code = main(["dist-step", "--python", sys.executable, "--root", str(tmp_path), "--no-receipt"])
    err = capsys.readouterr().err
    assert code == 3 and "torch is not installed" in err and "Traceback" not in err
