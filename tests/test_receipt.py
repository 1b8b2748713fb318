"""Receipts: written from a real venv, shown, diffed (exit 10 on drift), secrets redacted."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from envbuild.cli import main
from envbuild.layout import Paths
from envbuild.proof.provenance import capture, machine_class
from envbuild.proof.receipt import ReceiptPayload, diff_receipts, load_receipt, write_receipt
from envbuild.spec import resolve_spec


@pytest.fixture
def receipt(torch_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVBUILD_HOST_LINEAGE", "fleet-a")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("PIP_INDEX_URL", "https://alice:pa55word@mirror.example/simple")
    spec = resolve_spec("cpu", None)
    paths = Paths(root=tmp_path / "root")
    # a payload cut to what is read, with a credential-bearing URL that must come out redacted
    payload = cast(
        ReceiptPayload, {"ok": True, "checks": [], "note": "https://bob:tok@x.example/y"}
    )
    return write_receipt(paths, "smoke", payload, spec=spec, python=torch_venv / "bin" / "python")


def test_write_receipt_contents(receipt: Path) -> None:
    text = receipt.read_text()
    for secret in ("hf_secret_value", "pa55word", "alice", "bob:tok"):
        assert secret not in text
    doc = json.loads(text)
    assert doc["schema"] == "envbuild.receipt/1" and doc["kind"] == "smoke"
    assert doc["names"] == {
        "host_lineage": "fleet-a",
        "profile": "cpu",
        "launch_regime": "single-process",
    }
    prov = doc["provenance"]
    assert (
        prov["envbuild_version"] and prov["hostname"] and prov["machine_class"].startswith("cpu-")
    )
    torch = {d["name"]: d for d in doc["software"]["distributions"]}["torch"]
    assert torch["version"].startswith("2.13.0") and len(torch["record_sha256"]) == 64
    assert doc["software"]["torch"]["version"].startswith("2.13.0")
    assert doc["env"]["overlay"]["TORCH_NCCL_HIGH_PRIORITY"] == "1"
    assert doc["env"]["in_force"]["HF_TOKEN"] == "***"
    assert doc["env"]["in_force"]["PIP_INDEX_URL"] == "https://***@mirror.example/simple"
    assert doc["payload"]["note"] == "https://***@x.example/y"
    assert len(doc["digest"]) == 64


def _variant(src: Path, dst: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    doc = json.loads(src.read_text())
    edit(doc)
    dst.write_text(json.dumps(doc))
    return dst


def test_diff_and_show(receipt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same = _variant(
        receipt, tmp_path / "same.json", lambda d: d["provenance"].update(hostname="other-host")
    )

    def drift(d: dict[str, Any]) -> None:
        pkgs = d["software"]["distributions"]
        torch = next(p for p in pkgs if p["name"] == "torch")
        torch["record_sha256"] = "0" * 64
        torch["content_sha256"] = "0" * 64  # its files changed, wherever the venv lives
        torch.update(modified=["torch/functional.py"], modified_count=1)
        numpy = next(p for p in pkgs if p["name"] == "numpy")
        numpy["version"] = "1.0.0"
        pkgs.append({"name": "triton", "version": "3.5.0", "record_sha256": "f" * 64})
        d["env"]["in_force"]["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        d["hardware"]["driver"] = "570.10"

    drifted = _variant(receipt, tmp_path / "drift.json", drift)

    assert main(["receipt", "diff", str(receipt), str(same)]) == 0
    out = capsys.readouterr().out
    assert "no drift" in out and "other-host" in out  # host name shown as information only

    assert main(["receipt", "diff", str(receipt), str(drifted)]) == 10
    out = capsys.readouterr().out
    for needle in (
        "torch (files)",
        "torch/functional.py",
        "numpy",
        "triton",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "driver",
        "570.10",
    ):
        assert needle in out

    assert (
        main(["receipt", "diff", "--against", str(receipt), str(same), str(drifted), "--json"])
        == 10
    )
    doc = json.loads(capsys.readouterr().out)
    assert [r["drift"] for r in doc["receipts"]] == [False, True]
    sections = {d["section"] for d in doc["receipts"][1]["differences"]}
    assert sections >= {"packages", "env", "hardware"}

    assert main(["receipt", "show", str(receipt)]) == 0
    out = capsys.readouterr().out
    assert "fleet-a / cpu / single-process" in out and "result: ok" in out
    # a folder: its newest receipt
    assert main(["receipt", "show", str(receipt.parent), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "smoke"


def test_bad_receipts_are_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["receipt", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not valid JSON" in err and "Traceback" not in err
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    assert main(["receipt", "diff", str(other), str(other)]) == 2
    assert "not an envbuild receipt" in capsys.readouterr().err
    assert main(["receipt", "diff", str(other)]) == 2
    assert "takes two receipts" in capsys.readouterr().err


def test_diff_is_symmetric_in_what_it_finds(receipt: Path) -> None:
    a = load_receipt(receipt)
    b = copy.deepcopy(a)
    b["software"]["distributions"] = [
        d for d in b["software"]["distributions"] if d["name"] != "numpy"
    ]
    [d1] = diff_receipts(a, b)
    [d2] = diff_receipts(b, a)
    assert d1.key == d2.key == "numpy" and d1.b is None and d2.a is None


def test_provenance_git_and_machine_class(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("a")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    prov = capture(gpu_names=[], cwd=repo, environ={})
    assert (
        prov.repo is not None and prov.repo.dirty is False and len(prov.repo.revision or "") == 40
    )
    (repo / "f.txt").write_text("b")
    prov = capture(gpu_names=[], cwd=repo, environ={"ENVBUILD_LAUNCH_REGIME": "srun"})
    assert prov.repo is not None and prov.repo.dirty is True and prov.repo.status == (" M f.txt",)
    assert prov.names["launch_regime"] == "srun"
    assert machine_class(["NVIDIA H200"] * 8, {}) == "8xH200"
    assert machine_class(["NVIDIA H100 80GB HBM3"], {}) == "1xH100"
    assert machine_class([], {"ENVBUILD_MACHINE_CLASS": "hgx-h200"}) == "hgx-h200"
