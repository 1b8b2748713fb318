"""``wheelhouse mirror --lock FILE`` then ``provision --lock FILE --offline --wheelhouse DIR``.

The lock is made by real ``uv lock`` against the gate's local index; the mirror downloads what
the chosen environment installs from the lock's own URLs; the offline provision runs in a network
namespace with no route at all (``unshare -rn``: not even loopback; where namespaces are not
allowed, the lock is pointed at a dead port instead) and must equal ``uv sync --frozen`` of the
same selection, compared with ``pip list --format json``. A wheelhouse file with other bytes, or
none, is refused before anything is made.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, Venv, installer_env
from support.gatelocks import GateIndex, uv_groups_lock
from support.index import UnreachablePort
from test_fromlock import pip_list, uv_sync


def _unshare_works() -> bool:
    try:
        return (
            subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _no_network(tmp_path: Path, lock: Path, *args: str | Path) -> EnvbuildResult:
    """``envbuild ARGS`` where nothing answers: in a network namespace with no route, or (where that
    is not allowed) with every URL of the lock pointing at a port nobody listens on."""
    argv = [sys.executable, "-m", "envbuild", *map(str, args)]
    env = installer_env(tmp_path / "home")
    if _unshare_works():
        out = subprocess.run(
            ["unshare", "-rn", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=600,
        )
        return EnvbuildResult(out.returncode, out.stdout, out.stderr)
    text = lock.read_text()
    with UnreachablePort() as dead:
        lock.write_text(re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{dead.port}", text))
        try:
            out = subprocess.run(
                argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600
            )
        finally:
            lock.write_text(text)
    return EnvbuildResult(out.returncode, out.stdout, out.stderr)


@pytest.mark.slow
def test_provision_offline_from_a_mirrored_wheelhouse_equals_uv_sync(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_groups_lock(tmp_path, gate_index)
    uv_sync(lock, tmp_path / "uv-venv", tmp_path / "home", "--extra", "cu128")
    wheelhouse = tmp_path / "wheelhouse"
    res = run_envbuild(
        "wheelhouse", "mirror", "--lock", lock, "--extra", "cu128", "--out", wheelhouse, "--json"
    )
    assert res.rc == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["environment"] == "linux x86_64, extra cu128" and doc["not_mirrored"] == []
    assert "torch-2.10.0+cu128-py3-none-any.whl" in doc["downloaded"]
    # the chosen environment's files only
    assert not any("+cpu" in f or "+cu130" in f for f in doc["downloaded"])
    listed = {
        a["filename"]: a["sha256"]
        for a in json.loads((wheelhouse / "wheelhouse.json").read_text())["artifacts"]
    }
    assert set(listed) == set(doc["downloaded"])
    # servable as an index, as envbuild's own mirror
    assert (wheelhouse / "simple" / "torch" / "index.html").is_file()

    args = (
        "provision",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--root",
        tmp_path / "data",
        "--offline",
        "--wheelhouse",
        wheelhouse,
    )
    res = _no_network(tmp_path, lock, *args)
    assert res.rc == 0, res.output
    assert pip_list(tmp_path / "data" / "venv") == pip_list(tmp_path / "uv-venv")
    plan = _no_network(
        tmp_path,
        lock,
        "plan",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--offline",
        "--wheelhouse",
        wheelhouse,
        "--json",
    )
    assert plan.rc == 0 and json.loads(plan.stdout)["selection"] == "extra cu128", plan.output
    again = _no_network(tmp_path, lock, *args, "--json")
    assert again.rc == 0, again.output
    assert json.loads(again.stdout)["ran"] == []

    # a byte changed after the mirror (same size): named with both hashes, before anything is made
    bad = tmp_path / "bad-wheelhouse"
    shutil.copytree(wheelhouse, bad)
    wheel = bad / next(f for f in listed if f.startswith("nvidia_nccl_cu12-"))
    data = bytearray(wheel.read_bytes())
    data[-10] ^= 0xFF
    wheel.write_bytes(bytes(data))
    res = _no_network(
        tmp_path,
        lock,
        "provision",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--root",
        tmp_path / "data2",
        "--offline",
        "--wheelhouse",
        bad,
    )
    assert res.rc == 5, res.output
    assert f"{wheel.name}: the lock pins sha256 {listed[wheel.name]}, the file has " in res.stderr
    assert not (tmp_path / "data2").exists() and "Traceback" not in res.output
    plan = _no_network(
        tmp_path, lock, "plan", "--lock", lock, "--extra", "cu128", "--offline", "--wheelhouse", bad
    )
    assert plan.rc == 5 and wheel.name in plan.stderr, plan.output

    wheel.unlink()  # not there at all
    res = _no_network(
        tmp_path,
        lock,
        "provision",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--root",
        tmp_path / "data2",
        "--offline",
        "--wheelhouse",
        bad,
    )
    assert res.rc == 5, res.output
    assert (
        "lacks 1 file(s)" in res.stderr
        and wheel.name in res.stderr
        and "wheelhouse mirror --lock" in res.stderr
    )
    assert not (tmp_path / "data2").exists()


def test_offline_lock_options_are_checked(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text("version = 1\n")
    res = run_envbuild("provision", "--lock", lock, "--offline", "--root", tmp_path / "data")
    assert res.rc == 2 and "--offline needs --wheelhouse DIR" in res.stderr, res.output
    res = run_envbuild(
        "provision",
        "--lock",
        lock,
        "--offline",
        "--wheelhouse",
        "http://127.0.0.1:9/wh",
        "--root",
        tmp_path / "data",
    )
    assert res.rc == 2 and "is not a folder" in res.stderr, res.output
    res = run_envbuild(
        "wheelhouse", "mirror", "--lock", lock, "--platform", "manylinux*", "--out", tmp_path / "wh"
    )
    assert res.rc == 2 and "--platform cannot be used with a lock file" in res.stderr, res.output
    assert not (tmp_path / "data").exists() and not (tmp_path / "wh").exists()


@pytest.mark.slow
def test_a_base_image_gets_only_what_it_lacks(
    gate_index: GateIndex,
    tmp_path: Path,
    make_venv: Callable[..., Venv],
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    """A base image's environment with the lock's torch and runtime: ``mirror --have`` (its ``pip
    freeze``) mirrors only what it lacks, and the offline provision into it keeps the rest (as on
    the GPU image: bench/gpu_fromlock.sh)."""
    lock = uv_groups_lock(tmp_path, gate_index)
    base = make_venv("base")
    base.pip(
        "install",
        "--index-url",
        gate_index.url("cu128"),
        "--extra-index-url",
        gate_index.url("pypi"),
        "torch==2.10.0+cu128",
        check=True,
    )
    freeze = tmp_path / "base-freeze.txt"
    freeze.write_text(base.pip("freeze", check=True).stdout)
    record = base.dists()["torch"].record.read_bytes()

    wheelhouse = tmp_path / "wheelhouse"
    res = run_envbuild(
        "wheelhouse",
        "mirror",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--have",
        freeze,
        "--out",
        wheelhouse,
        "--json",
    )
    assert res.rc == 0, res.output
    mirrored = json.loads(res.stdout)["downloaded"]
    assert mirrored and not any(f.startswith(("torch-", "nvidia_")) for f in mirrored), mirrored
    res = _no_network(
        tmp_path,
        lock,
        "provision",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--venv",
        base.path,
        "--root",
        tmp_path / "data",
        "--offline",
        "--wheelhouse",
        wheelhouse,
    )
    assert res.rc == 0, res.output
    assert base.dists()["torch"].record.read_bytes() == record
    assert {"trainer-utils", "nvidia-nccl-cu12"} <= set(base.dists())

    freeze.write_text("torch>=2\n")
    res = run_envbuild(
        "wheelhouse",
        "mirror",
        "--lock",
        lock,
        "--extra",
        "cu128",
        "--have",
        freeze,
        "--out",
        tmp_path / "wh2",
    )
    assert res.rc == 2 and "is not a `name==version` line" in res.stderr, res.output
    assert not (tmp_path / "wh2").exists()
