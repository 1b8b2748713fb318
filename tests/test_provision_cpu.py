"""End to end: the real `cpu` profile provisioned into a temp root with a temp $HOME.

Real interpreter, real venv, real pip/uv, the real torch CPU wheel. The README's command as
written: where the PyTorch CPU index does not answer, its locked files come by sha256 from the
sources pip is configured with, and a notice says so. Also: killed mid-step (SIGKILL) and run
again, it converges; run again when finished, it verifies and does nothing, with no network.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envbuild.errors import ExitCode

pytestmark = pytest.mark.slow


def envbuild(*args: str, env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuild", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        **kw,
    )


@pytest.fixture
def env(cpu_torch_index: str) -> dict[str, str]:
    return {**os.environ, "ENVBUILD_TORCH_INDEX": cpu_torch_index}


def manifest(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / ".envbuild" / "manifest.json").read_text())
    return data


def _unshare_works() -> bool:
    try:
        return (
            subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


# make test-thorough: the README walk (test_tour) provisions the cpu profile too
@pytest.mark.thorough
def test_provision_cpu_profile_end_to_end(
    tmp_path: Path, env: dict[str, str], cpu_torch_index: str
) -> None:
    root, home = tmp_path / "data", tmp_path / "home"
    # the README's command
    as_written = {k: v for k, v in env.items() if k != "ENVBUILD_TORCH_INDEX"}
    out = envbuild(
        "provision",
        "--profile",
        "cpu",
        "--root",
        str(root),
        "--home",
        str(home),
        "--json",
        env=as_written,
    )
    assert out.returncode == 0, out.stderr
    notices = [
        line
        for line in out.stderr.splitlines()
        if line.startswith("notice: https://download.pytorch.org")
    ]
    # the index, or one line and the mirror
    assert len(notices) == (0 if cpu_torch_index else 1), out.stderr
    result = json.loads(out.stdout)
    assert result["ran"] == ["bootstrap", "torch", "fla", "torch-users", "rest"]
    assert result["full_check"]["version"] == "2.13.0+cpu"
    # where the time went, and the receipt (its host facts and inventory gathered on threads)
    assert set(result["timings"]) == {"prepare", "venv", "steps", "import_check", "receipt"}
    assert abs(sum(result["timings"].values()) - result["seconds"]) < 1.0
    receipt = json.loads(Path(result["receipt"]).read_text())
    assert receipt["payload"]["timings"]["steps"] == result["timings"]["steps"]
    inventory = {d["name"]: d["version"] for d in receipt["software"]["distributions"]}
    assert inventory["torch"] == "2.13.0+cpu" and "torchmetrics" in inventory
    assert receipt["hardware"]["cpu_count"] == os.cpu_count()
    # layout and links
    assert os.readlink(home / "venv") == str(root / "venv")
    assert os.readlink(home / "data") == str(root / "data")
    assert (root / "cache" / "uv").is_dir() and (root / "logs" / "02-torch.log").is_file()
    activate = (root / "venv" / "bin" / "activate").read_text()
    assert str(root / ".envbuild" / "envbuild-env.sh") in activate
    assert (root / ".envbuild" / "constraints.txt").read_text().splitlines()[
        -1
    ] == "torch==2.13.0+cpu"
    # the manifest
    m = manifest(root)
    assert [s["status"] for s in m["steps"]] == ["ok"] * 5
    assert m["baseline"]["version"] == "2.13.0+cpu"
    # the guard ran after every step from the baseline on (its time per step: bench/README.md)
    assert all(isinstance(s["guard_seconds"], float) for s in m["steps"][1:])
    # the packages are really there, and the overlay is what activate gives a shell
    py = root / "venv" / "bin" / "python"
    check = subprocess.run(
        [str(py), "-c", "import torch, torchmetrics, fla; print(torch.__version__)"],
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "2.13.0+cpu", check.stderr
    shell = subprocess.run(
        ["bash", "-c", f". {root}/venv/bin/activate && echo $PIP_CONSTRAINT $PYTORCH_ALLOC_CONF"],
        capture_output=True,
        text=True,
    )
    assert shell.stdout.split() == [
        str(root / ".envbuild" / "constraints.txt"),
        "expandable_segments:True",
    ]
    # the guard's verdict, as its own command
    out = envbuild("verify", "--profile", "cpu", "--root", str(root), env=env)
    assert out.returncode == 0, out.stderr
    # a re-run verifies and changes nothing, from any source (its locked steps are the same steps)
    # and with no network at all
    record = (root / "venv" / "lib").glob("python3*/site-packages/torch-*.dist-info/RECORD")
    stat_before = next(record).stat()
    netns = ["unshare", "-rn"] if _unshare_works() else []
    for run_env in (as_written, env, {**env, "ENVBUILD_TORCH_INDEX": "http://torch.invalid/"}):
        out = subprocess.run(
            [
                *netns,
                sys.executable,
                "-m",
                "envbuild",
                "provision",
                "--profile",
                "cpu",
                "--root",
                str(root),
                "--home",
                str(home),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=run_env,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        again = json.loads(out.stdout)
        assert again["ran"] == [] and len(again["skipped"]) == 5
        assert "notice:" not in out.stderr
    stat_after = next(
        (root / "venv" / "lib").glob("python3*/site-packages/torch-*.dist-info/RECORD")
    ).stat()
    assert (stat_before.st_ino, stat_before.st_mtime_ns) == (
        stat_after.st_ino,
        stat_after.st_mtime_ns,
    )
    # something outside envbuild reinstalls torch: verify says so, with the ABI exit code
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", "torch==2.13.0"],
        check=True,
        capture_output=True,
    )
    out = envbuild("verify", "--profile", "cpu", "--root", str(root), env=env)
    assert out.returncode == ExitCode.ABI
    # uv wrote the original RECORD, pip the new one: "a different build"; same installer:
    # "reinstalled" (the guard names the installer that wrote the new RECORD: "replaced by pip by a
    # different build")
    assert re.search(
        r"torch 2\.13\.0\+cpu was (replaced (by \S+ )?by a different build|reinstalled)", out.stderr
    ), out.stderr
    assert "Traceback" not in out.stderr


def test_killed_mid_step_resumes_and_converges(tmp_path: Path, env: dict[str, str]) -> None:
    root, home = tmp_path / "data", tmp_path / "home"
    argv = [
        sys.executable,
        "-m",
        "envbuild",
        "provision",
        "--profile",
        "cpu",
        "--root",
        str(root),
        "--home",
        str(home),
        "--backend",
        "pip",
    ]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    killed_in = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            steps = {s["name"]: s["status"] for s in manifest(root)["steps"]}
        except (FileNotFoundError, json.JSONDecodeError):
            steps = {}
        if steps.get("torch") == "running":
            time.sleep(1.0)  # let pip get going
            os.kill(proc.pid, signal.SIGKILL)  # no cleanup at all: the worst case
            killed_in = "torch"
            break
        time.sleep(0.05)
    proc.wait()
    assert killed_in == "torch", "provision finished before it could be killed"
    assert {s["name"]: s["status"] for s in manifest(root)["steps"]}["torch"] == "running"
    # the orphaned pip may still be running: the resumed run waits for the data-root lock
    out = envbuild(*argv[3:], "--json", env=env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["skipped"] == ["bootstrap"]
    assert result["ran"] == ["torch", "fla", "torch-users", "rest"]
    assert [s["status"] for s in manifest(root)["steps"]] == ["ok"] * 5
    out = envbuild("verify", "--profile", "cpu", "--root", str(root), env=env)
    assert out.returncode == 0, out.stderr


def test_unreachable_index_and_no_other_source_fails_fast(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The torch index refuses and pip is configured with an (empty) index of its own only: no
    source serves the locked torch wheel, which the error names with its sha256, before anything
    is made; the refusal is the index's verdict (no deadline waited out for it)."""
    empty = tmp_path / "empty-index"
    empty.mkdir()
    env = {
        **env,
        "ENVBUILD_TORCH_INDEX": "http://127.0.0.1:9/simple",  # discard port: refused
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": empty.as_uri(),
    }
    out = envbuild(
        "provision",
        "--profile",
        "cpu",
        "--root",
        str(tmp_path / "d"),
        "--home",
        str(tmp_path / "h"),
        env=env,
    )
    assert out.returncode == ExitCode.PREFLIGHT, out.stderr
    lock = json.loads((Path(__file__).parents[1] / "lockfiles" / "cpu" / "lock.json").read_text())
    torch = next(p for s in lock["steps"] for p in s["packages"] if p["name"] == "torch")
    (wheel,) = torch["artifacts"]
    assert f"torch: torch==2.13.0+cpu: {wheel['filename']} (sha256 {wheel['sha256']})" in out.stderr
    assert "http://127.0.0.1:9/simple [the step's]: connection refused" in out.stderr
    assert f"{empty.as_uri()} [" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "d").exists()  # nothing was built


@pytest.mark.thorough  # make test-thorough: test_killed_mid_step_resumes_and_converges stays
def test_killed_while_creating_the_venv(tmp_path: Path, env: dict[str, str]) -> None:
    """A venv cut short is never trusted: the next run moves it aside (nothing is deleted) and
    converges."""
    root, home = tmp_path / "data", tmp_path / "home"
    argv = [
        sys.executable,
        "-m",
        "envbuild",
        "provision",
        "--profile",
        "cpu",
        "--root",
        str(root),
        "--home",
        str(home),
        "--backend",
        "pip",
    ]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (root / "venv" / "bin").is_dir():
        time.sleep(0.02)
    time.sleep(0.2)  # `python -m venv` is still populating it
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    try:
        recorded = manifest(root).get("venv")
    except FileNotFoundError:
        recorded = None
    cut_short = not recorded and any((root / "venv").iterdir())
    out = envbuild(*argv[3:-2], "--backend", "uv", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["full_check"]["version"] == "2.13.0+cpu"
    assert manifest(root)["venv"] == str(root / "venv")
    if cut_short:  # the usual case: killed inside `python -m venv`
        (aside,) = root.glob("venv.incomplete-*")
        assert (aside / "bin").is_dir()
        assert "was never recorded as complete" in out.stderr


def test_missing_interpreter_fails_before_anything_is_made(
    tmp_path: Path, env: dict[str, str]
) -> None:
    out = envbuild(
        "provision",
        "--profile",
        "cpu",
        "--root",
        str(tmp_path / "d"),
        "--home",
        str(tmp_path / "h"),
        "--python",
        str(tmp_path / "no-such-python"),
        env=env,
    )
    assert out.returncode == ExitCode.PREFLIGHT
    assert f"--python {tmp_path / 'no-such-python'}: no such interpreter" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "h").exists()  # no $HOME links for an environment that cannot be made
