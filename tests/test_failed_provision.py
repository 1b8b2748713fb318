"""A provision that fails or is interrupted leaves the truth: a ``provision`` receipt whose
``payload.failure`` says which stage stopped it, the exit code and the paragraph envbuild printed,
and whose ``software`` is what was installed then; ``verify``, ``receipt list``, ``receipt show``
and ``receipt diff`` after it say so, and find the lock (or stack file) that is there. The same
root provisioned healthy afterwards: its receipt has no ``failure`` and the commands pass.

Real uv against the gate's local index (``support.gatelocks``), a planted sha256 in the lock; real
pip against the scenario index for a plain stack whose step cannot resolve.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import GateIndex, uv_platform_lock

from envbuild.errors import ConfigError, ExitCode
from envbuild.proof.receipt import (
    diff_receipts,
    failure,
    load_receipt,
    receipt_files,
    summary,
)

REST_WHEEL = r'trainer_utils-1\.0-py3-none-any\.whl", hash = "sha256:([0-9a-f]{64})"'


def _plant_rest_hash(lock: Path) -> str:
    """trainer-utils' wheel (the rest stage) pinned with a sha256 its bytes do not have; returns
    the lock's text as it was."""
    text = lock.read_text()
    m = re.search(REST_WHEEL, text)
    assert m is not None, text
    lock.write_text(text.replace(m.group(1), "0" * 64))
    return text


def _provision_receipts(data: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in receipt_files(data / "receipts", ("provision",))]


def _names(receipt: dict[str, Any]) -> set[str]:
    return {d["name"] for d in receipt["software"]["distributions"]}


def test_a_failed_lock_provision_leaves_the_truth(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index)
    healthy = _plant_rest_hash(lock)
    data = tmp_path / "data"
    res = run_envbuild("provision", "--lock", lock, "--root", data)
    assert res.rc == ExitCode.INSTALL, res.output
    assert "hash does not match the lock" in res.stderr and "Traceback" not in res.output

    [failed] = _provision_receipts(data)
    assert failed["schema"] == "envbuild.receipt/1" and failed["kind"] == "provision"
    failure = failed["payload"]["failure"]
    # found while preparing, before the venv was made: nothing installed, no venv (uv sync leaves
    # an empty one)
    assert (failure["stage"], failure["exit_code"], failure["error"]) == (
        "prepare",
        5,
        "InstallError",
    )
    assert failure["completed"] == [] and failure["interrupted"] is False
    assert failure["venv"]["state"] == "not-made" and not (data / "venv").exists()
    assert "hash does not match the lock" in failure["reason"] and failure["hint"]
    assert "Nothing was installed" in failure["hint"] and "No venv was made" in res.stderr
    assert not failed["software"].get("distributions")  # what is there now: nothing
    assert failed["payload"]["lock"]["lock_file"] == str(lock)

    # verify: there is no environment to verify; it says so, naming no lock that is not there
    res = run_envbuild("verify", "--root", data, "--json")
    assert res.rc == ExitCode.CONFIG and "no environment at" in res.stderr, res.output
    assert "not there any more" not in res.output and "Traceback" not in res.output

    res = run_envbuild("receipt", "list", "--root", data, "--json")
    assert res.rc == 0, res.output
    rows = {r["kind"]: r for r in json.loads(res.stdout)["receipts"]}
    assert rows["provision"]["ok"] is False
    assert rows["provision"]["stopped"] == "failed in prepare (exit 5)"
    res = run_envbuild("receipt", "list", "--root", data)
    assert res.rc == 0, res.output
    assert "FAILED" in res.stdout and "(failed in prepare (exit 5))" in res.stdout

    failed_file = receipt_files(data / "receipts", ("provision",))[0]
    res = run_envbuild("receipt", "show", failed_file)
    assert res.rc == 0, res.output
    assert "failed in prepare (exit 5)" in res.stdout and "steps done" in res.stdout
    assert "result: FAILED" in res.stdout

    # the lock fixed, the same command finishes the root: a healthy receipt, the commands pass
    lock.write_text(healthy)
    res = run_envbuild("provision", "--lock", lock, "--root", data, "--json")
    assert res.rc == 0, res.output
    assert "rest" in json.loads(res.stdout)["ran"]  # (another lock file's bytes: torch again too)
    finished = _provision_receipts(data)[0]
    assert "failure" not in finished["payload"] and "trainer-utils" in _names(finished)
    res = run_envbuild("verify", "--root", data, "--json")
    assert res.rc == 0, res.output
    assert json.loads(res.stdout)["unfinished"] is None
    res = run_envbuild("receipt", "list", "--root", data, "--json")
    rows = json.loads(res.stdout)["receipts"]
    newest_provision = next(r for r in rows if r["kind"] == "provision")
    assert newest_provision["ok"] is True and newest_provision["stopped"] is None
    res = run_envbuild("receipt", "show", receipt_files(data / "receipts", ("provision",))[0])
    assert res.rc == 0 and "outcome" not in res.stdout and "FAILED" not in res.stdout, res.output

    # receipt diff: the failed run against the finished one is drift (its outcome and the package)
    finished_file = receipt_files(data / "receipts", ("provision",))[0]
    res = run_envbuild("receipt", "diff", failed_file, finished_file, "--json")
    assert res.rc == ExitCode.DRIFT, res.output
    [compared] = json.loads(res.stdout)["receipts"]
    diffs = {(d["section"], d["key"]): d for d in compared["differences"]}
    outcome = diffs[("outcome", "provision")]
    assert (outcome["a"], outcome["b"]) == ("failed in prepare (exit 5)", "finished")
    assert outcome["drift"] is True
    assert diffs[("packages", "trainer-utils")]["a"] is None
    res = run_envbuild("receipt", "diff", finished_file, finished_file)
    assert res.rc == 0 and "identical" in res.stdout, res.output


def test_a_failed_plain_provision_names_its_stack_file(
    tmp_path: Path, write_stack: Callable[..., Path], run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A stack file's step that cannot resolve: the receipt says so, and verify and receipt find the
    stack file that is there (not "provisioned from scenario, which is not there any more")."""
    stack = write_stack([{"name": "rest", "packages": ["no-such-project-anywhere==1.0"]}])
    data = tmp_path / "data"
    res = run_envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        data,
        "--home",
        tmp_path / "home",
        "--python",
        sys.executable,
        "--backend",
        "uv",
    )
    assert res.rc == ExitCode.INSTALL, res.output
    [failed] = _provision_receipts(data)
    failure = failed["payload"]["failure"]
    assert (failure["stage"], failure["exit_code"], failure["completed"]) == ("rest", 5, ["torch"])
    for argv in (("receipt", "list"), ("receipt", "show"), ("verify",)):
        res = run_envbuild(*argv, "--root", data)
        assert "not there any more" not in res.output and "Traceback" not in res.output, res.output
        assert res.rc == (ExitCode.VERIFY if argv == ("verify",) else 0), res.output
    assert "failed in rest (exit 5)" in res.stderr  # verify's


@pytest.mark.slow
def test_an_interrupted_lock_provision_leaves_a_receipt_saying_so(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    """SIGTERM while the rest stage downloads: exit 130 and a receipt: interrupted while preparing,
    no venv made."""
    lock = uv_platform_lock(tmp_path, gate_index)
    gate_index.server.clear_requests()  # uv lock read trainer-utils' wheel too
    gate_index.server.fail("*trainer_utils-*", "stall", times=1, seconds=60)
    data = tmp_path / "data"
    try:
        argv = [
            sys.executable,
            "-m",
            "envbuild",
            "provision",
            "--lock",
            str(lock),
            "--root",
            str(data),
        ]
        proc = subprocess.Popen(
            argv,
            env=installer_env(tmp_path / "home"),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            if any("trainer_utils-" in r.path for r in gate_index.server.requested()):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.1)
        _, stderr = proc.communicate(timeout=120)
    finally:
        gate_index.server.clear_faults()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    [stopped] = _provision_receipts(data)
    failure = stopped["payload"]["failure"]
    assert failure["interrupted"] is True and failure["exit_code"] == 130
    # stopped while preparing (the downloads of every stage run before anything installs)
    assert failure["stage"] == "prepare" and failure["completed"] == []
    assert failure["venv"]["state"] == "not-made" and not (data / "venv").exists()
    assert "Traceback" not in stderr


def _failed_doc() -> dict[str, Any]:
    """A provision receipt's sections as ``write_receipt`` writes them (the few the readers read),
    its run stopped in the rest stage."""
    return {
        "schema": "envbuild.receipt/1",
        "kind": "provision",
        "created": "2026-01-01T00:00:00Z",
        "names": {},
        "provenance": {"hostname": "h"},
        "hardware": {"gpus": []},
        "spec": None,
        "software": {"distributions": [{"name": "torch", "version": "2.10.0"}]},
        "env": {"overlay": {}, "in_force": {}},
        "digest": "0",
        "payload": {
            "ran": [],
            "failure": {
                "stage": "rest",
                "exit_code": 5,
                "error": "InstallError",
                "reason": "why",
                "hint": None,
                "interrupted": False,
                "completed": ["torch"],
            },
        },
    }


def test_the_outcome_is_drift_only_where_it_differs(tmp_path: Path) -> None:
    """Two runs that stopped in the same stage with the same exit code do not differ in outcome;
    a run that stopped and one that finished do, as drift."""
    paths = []
    for name, doc in (("a", _failed_doc()), ("b", _failed_doc())):
        paths.append(tmp_path / f"provision-{name}.json")
        paths[-1].write_text(json.dumps(doc))
    finished = _failed_doc()
    del finished["payload"]["failure"]
    paths.append(tmp_path / "provision-finished.json")
    paths[-1].write_text(json.dumps(finished))
    a, b, done = (load_receipt(p) for p in paths)
    assert diff_receipts(a, b) == []
    [outcome] = diff_receipts(a, done)
    assert (outcome.section, outcome.a, outcome.b, outcome.drift) == (
        "outcome",
        "failed in rest (exit 5)",
        "finished",
        True,
    )
    assert failure(done) is None and summary(done).get("outcome") is None
    shown = summary(a)
    assert shown["outcome"] == "failed in rest (exit 5)" and shown["steps done"] == "torch"


def test_a_damaged_failure_section_is_named(tmp_path: Path) -> None:
    """The readers rely on ``payload.failure``'s types: a receipt edited into another shape is a
    usage error naming the key; the same receipt as written loads."""
    lock_free = _failed_doc()
    good = tmp_path / "provision-good.json"
    good.write_text(json.dumps(lock_free))
    assert load_receipt(good)["payload"]["failure"]["stage"] == "rest"  # type: ignore[typeddict-item]
    lock_free["payload"]["failure"]["exit_code"] = "five"
    bad = tmp_path / "provision-bad.json"
    bad.write_text(json.dumps(lock_free))
    with pytest.raises(ConfigError, match=r"payload\.failure\.exit_code: must be a number"):
        load_receipt(bad)
    del lock_free["software"]
    bad.write_text(json.dumps(lock_free))
    with pytest.raises(ConfigError, match=r"software: must be a table, not missing"):
        load_receipt(bad)


@pytest.mark.slow
def test_backend_pip_on_a_venv_uv_made_is_refused_before_anything_runs(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A root uv provisioned has a venv without pip: ``--backend pip`` is refused (exit 2) with
    nothing run or written; the same root with the backend that made it re-verifies (exit 0)."""
    lock = uv_platform_lock(tmp_path, gate_index)
    data = tmp_path / "data"
    res = run_envbuild("provision", "--lock", lock, "--root", data, "--backend", "uv")
    assert res.rc == 0, res.output
    manifest = (data / ".envbuild" / "manifest.json").read_text()
    receipts = sorted(p.name for p in (data / "receipts").iterdir())
    res = run_envbuild("provision", "--lock", lock, "--root", data, "--backend", "pip")
    assert res.rc == ExitCode.CONFIG, res.output
    assert "--backend pip: the venv at" in res.stderr and "has no pip" in res.stderr
    assert "--backend uv" in res.stderr and "Traceback" not in res.output
    assert (data / ".envbuild" / "manifest.json").read_text() == manifest
    assert sorted(p.name for p in (data / "receipts").iterdir()) == receipts
    res = run_envbuild("provision", "--lock", lock, "--root", data, "--backend", "uv")
    assert res.rc == 0 and "nothing to do" in res.output, res.output
