"""Smoke checks with the real torch CPU build (the torch_venv fixture), through the CLI."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from envbuild.cli import main


def test_smoke_cpu(torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["smoke", "--venv", str(torch_venv), "--root", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code == 0, out
    by = {c["name"]: c for c in doc["checks"]}
    for name in ("matmul", "sdpa", "torch.compile"):
        assert by[name]["verdict"] == "pass", by[name]
        assert 0 <= by[name]["rel_err"] <= by[name]["tol"]
        assert by[name]["seconds"] > 0
    assert by["torch.compile"]["backend"] == "inductor, C++ (CPU)"
    assert by["sdpa"]["reference"].startswith("explicit softmax")
    for name in ("triton", "flash_attn", "causal_conv1d", "mamba_ssm.selective_scan", "fla", "flash_attn_4"):
        assert by[name]["verdict"] == "skip" and by[name]["reason"] == "no CUDA GPU visible to torch"
    assert doc["environment"]["torch"].startswith("2.13.0")
    receipt = json.loads(Path(doc["receipt"]).read_text())
    assert receipt["kind"] == "smoke" and receipt["payload"]["ok"] is True
    assert receipt["names"]["launch_regime"] == "single-process"
    assert (tmp_path / "logs" / "smoke.log").is_file()


@pytest.mark.slow
def test_smoke_fails_without_a_compiler(torch_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """No C++ compiler on PATH: inductor cannot build the kernel, the check fails, exit 7."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for var in ("CC", "CXX"):
        monkeypatch.delenv(var, raising=False)
    code = main(["smoke", "--venv", str(torch_venv), "--root", str(tmp_path), "--only", "torch.compile",
                 "--only", "sdpa", "--no-receipt"])
    out = capsys.readouterr().out
    assert code == 7, out
    assert "FAIL" in out and "FAILED" in out
    assert not (tmp_path / "receipts").exists()


def test_smoke_missing_venv_and_torchless_python(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["smoke", "--venv", str(tmp_path / "nope"), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3 and "no Python interpreter at" in err and "Traceback" not in err
    code = main(["smoke", "--python", sys.executable, "--root", str(tmp_path)])  # envbuild's venv: no torch
    err = capsys.readouterr().err
    assert code == 3 and "torch is not installed" in err and "Traceback" not in err


def test_checks_script_is_standalone() -> None:
    """The script runs inside the target venv: it must not import envbuild."""
    text = (Path(__file__).parents[1] / "envbuild" / "proof" / "smoke" / "checks.py").read_text()
    assert "import envbuild" not in text and "from envbuild" not in text
    assert os.path.basename(__file__)
