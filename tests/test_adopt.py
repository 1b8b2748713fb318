"""Base-image adoption on CPU: torch 2.13.0+cpu already in an environment is the baseline.

provision --venv installs a small stack into that environment: torch is never installed or
touched (same RECORD bytes, same file), the baseline is recorded in the manifest, `verify`
passes, and a step that would reinstall torch stops with exit 6 naming torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, copy_venv, run_cli

pytestmark = pytest.mark.slow

STACK = """\
schema = 1
name = "adopt-cpu"
python = "3.11"

[layout]
min_free_gb = 0

[abi]
package = "torch"
version = "2.13.0+cpu"
local = "cpu"
adopt = true

[[step]]
name = "fla"
packages = ["fla-core==0.4.2", "einops==0.8.1"]
no_deps = true

[[step]]
name = "torch-users"
packages = ["torchmetrics==1.9.0"]
{culprit}
"""

CULPRIT = """
# force-reinstall resolves torchmetrics' dependencies again: torch is rewritten
[[step]]
name = "culprit"
packages = ["torchmetrics==1.9.0"]
reinstall = true
"""


def _torch_record(env: Path) -> tuple[bytes, int]:
    record = next((env / "lib").glob("python3*/site-packages/torch-*.dist-info/RECORD"))
    return record.read_bytes(), record.stat().st_ino


def _envbuild(*args: str | Path, home: Path) -> EnvbuildResult:
    argv = [*args, "--home", home] if args[0] == "provision" else list(args)
    # pip.conf: the sources these packages come from
    return run_cli(argv, home=None, pip_config=True, timeout=900)


@pytest.fixture
def adopted_env(torch_venv: Path, tmp_path: Path) -> Path:
    """A copy of the cached torch venv: the "base image environment" (never the cached one)."""
    return copy_venv(torch_venv, tmp_path / "base-env")


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_adopt_installs_around_torch(adopted_env: Path, tmp_path: Path, backend: str) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.format(culprit=""))
    before = _torch_record(adopted_env)
    root = tmp_path / "root"
    r = _envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        root,
        "--venv",
        adopted_env,
        "--backend",
        backend,
        home=tmp_path / "home",
    )
    assert r.rc == 0, r.stdout + r.stderr
    assert _torch_record(adopted_env) == before  # untouched: same bytes, same file
    manifest = json.loads((root / ".envbuild" / "manifest.json").read_text())
    assert manifest["baseline"]["version"] == "2.13.0+cpu"
    assert (root / ".envbuild" / "constraints.txt").read_text().count("torch==2.13.0+cpu") == 1
    assert not (root / "venv").exists()  # nothing was created beside the adopted environment
    site = next((adopted_env / "lib").glob("python3*/site-packages"))
    assert any(site.glob("torchmetrics-1.9.0.dist-info")) and any(
        site.glob("fla_core-0.4.2.dist-info")
    )
    v = _envbuild(
        "verify", "--stack", stack, "--root", root, "--venv", adopted_env, home=tmp_path / "home"
    )
    assert v.rc == 0, v.stdout + v.stderr
    assert "baseline from manifest" in v.stdout + v.stderr  # the baseline recorded before step 1
    # run again: nothing to do, torch still untouched
    again = _envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        root,
        "--venv",
        adopted_env,
        "--backend",
        backend,
        home=tmp_path / "home",
    )
    assert again.rc == 0 and "nothing to do" in again.stdout + again.stderr
    assert _torch_record(adopted_env) == before


def test_adopt_step_by_step_like_the_image(adopted_env: Path, tmp_path: Path) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.format(culprit=""))
    root = tmp_path / "root"
    before = _torch_record(adopted_env)
    early = _envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        root,
        "--venv",
        adopted_env,
        "--step",
        "torch-users",
        home=tmp_path / "home",
    )
    assert early.rc == 3 and "'fla' has not run" in early.stderr, early.stderr
    for step in ("fla", "torch-users"):
        r = _envbuild(
            "provision",
            "--stack",
            stack,
            "--root",
            root,
            "--venv",
            adopted_env,
            "--step",
            step,
            home=tmp_path / "home",
        )
        assert r.rc == 0, r.stdout + r.stderr
    assert _torch_record(adopted_env) == before


# make test-thorough: the guard's exit 6 on a replaced torch is shown by test_swap_scenarios
@pytest.mark.thorough
def test_a_step_that_reinstalls_adopted_torch_exits_6(adopted_env: Path, tmp_path: Path) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.format(culprit=CULPRIT))
    root = tmp_path / "root"
    r = _envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        root,
        "--venv",
        adopted_env,
        "--backend",
        "pip",
        home=tmp_path / "home",
    )
    assert r.rc == 6, r.stdout + r.stderr
    assert "ABI guard after step 3 ('culprit')" in r.stderr and "torch" in r.stderr
    assert "Traceback" not in r.stderr
    # the adopted environment is the user's: a violation never moves it aside
    assert adopted_env.is_dir() and not list(tmp_path.glob("base-env.untrusted-*"))


def test_adopt_spec_may_not_install_torch(tmp_path: Path) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(
        STACK.format(culprit='\n[[step]]\nname = "bad"\npackages = ["torch==2.13.0"]\n')
    )
    r = _envbuild("plan", "--stack", stack, home=tmp_path / "home")
    assert r.rc == 2 and "abi.adopt = true" in r.stderr, r.stderr


def test_adopt_without_torch_in_the_environment_exits_6(tmp_path: Path) -> None:
    env = tmp_path / "empty-env"
    subprocess.run(
        [shutil.which("python3.11") or sys.executable, "-m", "venv", "--without-pip", str(env)],
        check=True,
    )
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.format(culprit=""))
    r = _envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        tmp_path / "root",
        "--venv",
        env,
        home=tmp_path / "home",
    )
    assert r.rc == 6 and "torch is not installed in the environment" in r.stderr, r.stderr
