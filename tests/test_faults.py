"""Fault injection with real processes: what provision, verify and smoke do when the world breaks.

Each test breaks one thing for real: an import that never returns (a ``sitecustomize`` that
sleeps, reached through the stack's ``[env]``), an installer killed with SIGKILL in the middle of
a step, a data root on a full file system (a small tmpfs), an index that accepts connections and
never answers, a download cut off half way. Each asserts the exit code, that the message names
what broke, that no traceback is shown, and where it applies that the next run converges.
No timed assertions: how fast a hang is stopped is measured in bench/, not here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, ScenarioIndex, installer_env, stack_toml
from support.index import BlackHole
from support.wheels import build_wheel

from envbuild.errors import ExitCode

pytestmark = pytest.mark.slow

HANG = "import time\ntime.sleep(3600)  # envbuild fault test: an import that never returns\n"


def _stack(
    tmp_path: Path,
    index: ScenarioIndex,
    steps: list[dict[str, object]],
    *,
    env: str = "",
    name: str = "stack.toml",
) -> Path:
    path = tmp_path / name
    path.write_text(stack_toml(steps, index=index) + env, encoding="utf-8")
    return path


def _hang_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "hang"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(HANG, encoding="utf-8")
    return folder


def _args(stack: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "provision",
        "--stack",
        str(stack),
        "--root",
        str(tmp_path / "data"),
        "--home",
        str(tmp_path / "home"),
        "--python",
        sys.executable,
        "--backend",
        "pip",
        *extra,
    ]


def _no_hang_left(folder: Path) -> None:
    """No process still runs with the hanging folder on its path (the whole group was stopped)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            env = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            assert not (str(folder).encode() in env and state != "Z"), f"pid {pid} still runs"


# ----------------------------------------------------------------------------- a silent hang


def test_hung_import_check_is_stopped_and_named(
    tmp_path: Path, scenario_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    hang = _hang_dir(tmp_path)
    good = _stack(tmp_path, scenario_index, [])
    assert run_envbuild(*_args(good, tmp_path)).rc == 0
    # the same environment, now with an overlay under which `import torch` never returns
    bad = _stack(
        tmp_path, scenario_index, [], env=f'\n[env]\nPYTHONPATH = "{hang}"\n', name="hang.toml"
    )
    out = run_envbuild(*_args(bad, tmp_path, "--import-timeout", "2"))
    assert out.rc == ExitCode.INSTALL, out.output
    assert "the import check hung" in out.stderr and "did not finish within 2 s" in out.stderr
    assert "`import torch`" in out.stderr and "Traceback" not in out.output
    _no_hang_left(hang)
    # verify: the same hang is a verify failure (exit 7), named the same way
    out = run_envbuild(
        "verify", "--stack", str(bad), "--root", str(tmp_path / "data"), "--timeout", "2"
    )
    assert out.rc == ExitCode.VERIFY, out.output
    assert "did not finish within 2 s" in out.stderr and "Traceback" not in out.output
    _no_hang_left(hang)


def test_hung_smoke_is_stopped_and_named(
    tmp_path: Path, scenario_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    hang = _hang_dir(tmp_path)
    stack = _stack(tmp_path, scenario_index, [], env=f'\n[env]\nPYTHONPATH = "{hang}"\n')
    out = run_envbuild(
        "smoke",
        "--stack",
        str(stack),
        "--root",
        str(tmp_path / "data"),
        "--python",
        sys.executable,
        "--timeout",
        "2",
        "--no-receipt",
    )
    assert out.rc == ExitCode.VERIFY, out.output
    assert "the smoke checks" in out.stderr and "did not finish within 2 s" in out.stderr
    assert (
        "crashed" not in out.stderr
        and "exit -15" not in out.stderr
        and "Traceback" not in out.output
    )
    _no_hang_left(hang)


# ----------------------------------------------------------------------------- a killed installer


def _pids_of(needle: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                cmd = (
                    Path(f"/proc/{pid}/cmdline")
                    .read_bytes()
                    .replace(b"\0", b" ")
                    .decode(errors="replace")
                )
                if needle in cmd and " install " in cmd:
                    out.append(int(pid))
    return out


def test_killed_installer_fails_the_step_and_the_next_run_converges(
    tmp_path: Path, private_scenario_index: ScenarioIndex
) -> None:
    index = private_scenario_index
    stack = _stack(tmp_path, index, [{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    index.server.fail("/pypi/files/einops_like-*", "stall", times=1, seconds=60)  # pip waits here
    env = installer_env(tmp_path / "home")
    proc = subprocess.Popen(
        [sys.executable, "-m", "envbuild", *_args(stack, tmp_path)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    venv = str(tmp_path / "data" / "venv")
    killed: list[int] = []
    deadline = time.monotonic() + 240
    while not killed and proc.poll() is None and time.monotonic() < deadline:
        if any(r.path.startswith("/pypi/files/einops_like") for r in index.server.requested()):
            for pid in _pids_of(venv):
                os.kill(pid, signal.SIGKILL)  # the installer, mid-download: no cleanup at all
                killed.append(pid)
        time.sleep(0.1)
    stdout, stderr = proc.communicate(timeout=120)
    assert killed, "the installer was never seen running"
    assert proc.returncode == ExitCode.INSTALL, stderr
    assert (
        "step 2 ('helpers')" in stderr
        and "killed by SIGKILL" in stderr
        and "Traceback" not in stderr
    )
    manifest = json.loads((tmp_path / "data" / ".envbuild" / "manifest.json").read_text())
    assert {s["name"]: s["status"] for s in manifest["steps"]} == {
        "torch": "ok",
        "helpers": "failed",
    }
    index.server.clear_faults()
    again = subprocess.run(
        [sys.executable, "-m", "envbuild", *_args(stack, tmp_path), "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["skipped"] == ["torch"] and result["ran"] == ["helpers"]


# ----------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MB tmpfs (root only); else a loopback ext2 image (root too); else skip, saying why."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full-disk test needs a small file system: mounting one needs root")
    tried = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if tried.returncode != 0:
        image = tmp_path / "small.img"
        with image.open("wb") as f:
            f.truncate(48 << 20)
        made = subprocess.run(["mkfs.ext2", "-q", "-F", str(image)], capture_output=True, text=True)
        tried = (
            subprocess.run(
                ["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True
            )
            if made.returncode == 0
            else made
        )
        if tried.returncode != 0:
            pytest.skip(
                "cannot mount a small file system here (tmpfs, then loopback):"
                f" {tried.stderr.strip()}"
            )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_is_reported_and_nothing_is_lost(
    tmp_path: Path,
    private_scenario_index: ScenarioIndex,
    small_disk: Path,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    index = private_scenario_index
    # 40 MB that does not compress: more than the small disk has left once the venv is made
    blob = os.urandom(30 << 20).hex()[: 40 << 20]
    build_wheel(
        index.wheels.pypi,
        "bigblob",
        "1.0",
        files={"bigblob/__init__.py": "", "bigblob/blob.txt": blob},
    )
    stack = _stack(tmp_path, index, [{"name": "big", "packages": ["bigblob==1.0"]}])
    out = run_envbuild(
        "provision",
        "--stack",
        str(stack),
        "--root",
        str(small_disk / "data"),
        "--home",
        str(tmp_path / "home"),
        "--python",
        sys.executable,
        "--backend",
        "pip",
    )
    assert out.rc in (ExitCode.INSTALL, ExitCode.PREFLIGHT), out.output
    assert "disk is full" in out.stderr and "Traceback" not in out.output
    # what was recorded before the disk filled is still readable: the next run knows where it
    # stopped
    manifest = json.loads((small_disk / "data" / ".envbuild" / "manifest.json").read_text())
    assert {s["name"]: s["status"] for s in manifest["steps"]}["torch"] == "ok"


# ----------------------------------------------------------------------------- a silent index


def test_index_that_never_answers_fails_fast_and_is_named(
    tmp_path: Path, scenario_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    with BlackHole() as hole:
        stack = _stack(
            tmp_path,
            scenario_index,
            [{"name": "helpers", "packages": ["einops-like==0.8.1"], "index_url": hole.url}],
        )
        # a short overall deadline (default 30 s of retries): a black hole is named when it runs out
        out = run_envbuild(*_args(stack, tmp_path), env={"ENVBUILD_NET_DEADLINE": "5"})
    assert out.rc == ExitCode.PREFLIGHT, out.output
    assert f"{hole.url} (accepted the connection but sent no answer within" in out.stderr
    assert "Traceback" not in out.output
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_download_that_stalls_is_stopped_by_the_step_timeout(
    tmp_path: Path,
    private_scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    index = private_scenario_index
    stack = _stack(tmp_path, index, [{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    index.server.fail("/pypi/files/einops_like-*", "stall", seconds=120)
    out = run_envbuild(*_args(stack, tmp_path, "--step-timeout", "5"))
    assert out.rc == ExitCode.INSTALL, out.output
    assert "step 2 ('helpers')" in out.stderr and "did not finish within 5 s" in out.stderr
    assert "Traceback" not in out.output


# ----------------------------------------------------------------------------- a truncated download


def test_truncated_download_fails_the_step_and_the_next_run_converges(
    tmp_path: Path,
    private_scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    index = private_scenario_index
    stack = _stack(tmp_path, index, [{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    # every attempt: half the file, then close
    index.server.fail("/pypi/files/einops_like-*", "drop")
    out = run_envbuild(*_args(stack, tmp_path))
    assert out.rc == ExitCode.INSTALL, out.output
    assert "step 2 ('helpers')" in out.stderr and "Traceback" not in out.output
    assert "cut short" in out.stderr or "could not be reached" in out.stderr, out.stderr
    index.server.clear_faults()
    again = run_envbuild(*_args(stack, tmp_path))
    assert again.rc == 0, again.output
