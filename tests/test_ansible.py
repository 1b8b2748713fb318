"""The fleet playbook, run for real against localhost with a local connection on the `cpu` profile.

Builds envbuild's wheel, runs ansible/provision.yml (`-i localhost, -c local`): it installs
envbuild into its own venv, preflights, provisions, fetches the receipt and diffs it. A second
run against a reference receipt with a drifted package makes the play fail on the drift.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = REPO / "ansible" / "provision.yml"


def _ansible_playbook() -> str:
    exe = Path(sys.executable).parent / "ansible-playbook"
    if not exe.exists():  # not in the test extra's environment yet: install it (Ansible from PyPI)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "ansible-core"], check=True, timeout=600
        )
    return str(exe)


def _play(tmp_path: Path, wheel: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
    )
    extra_vars = {
        "ansible_python_interpreter": sys.executable,
        "envbuild_hosts": "localhost",
        "envbuild_profile": "cpu",
        "envbuild_root": str(tmp_path / "data"),
        "envbuild_home": str(tmp_path / "home"),
        "envbuild_python": sys.executable,
        "envbuild_tool_venv": str(tmp_path / "tool"),
        "envbuild_wheel": str(wheel),
        "envbuild_receipts_dir": str(tmp_path / "receipts"),
        "envbuild_controller_bin": str(tmp_path / "tool" / "bin" / "envbuild"),
        # pip's configured sources (cpu profile)
        "envbuild_environment": {"ENVBUILD_TORCH_INDEX": ""},
    }
    argv = [
        _ansible_playbook(),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(PLAYBOOK),
        "-e",
        json.dumps(extra_vars),
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1200)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src") / "envbuild"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(".venv", ".cache", ".git", ".gpu", "build", "*.egg-info"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        check=True,
        timeout=600,
    )
    return next(out.glob("envbuild-*.whl"))


@pytest.mark.thorough  # make test-thorough: a whole provision through ansible-playbook
def test_playbook_provisions_localhost_and_diffs_receipts(tmp_path: Path, wheel: Path) -> None:
    r = _play(tmp_path, wheel)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    receipt = tmp_path / "receipts" / "localhost.json"
    data = json.loads(receipt.read_text())
    assert data["kind"] == "provision"
    assert data["software"]["torch"]["version"] == "2.13.0+cpu"
    assert "no drift" in r.stdout
    assert (tmp_path / "tool" / "bin" / "envbuild").exists()
    assert (tmp_path / "home" / "venv").resolve() == (tmp_path / "data" / "venv").resolve()

    # a reference with a different package version: the same play now stops on the drift
    ref = json.loads(receipt.read_text())
    for dist in ref["software"]["distributions"]:
        if dist["name"] == "einops":
            dist["version"] = "0.8.0"
    (tmp_path / "reference.json").write_text(json.dumps(ref))
    again = _play(
        tmp_path, wheel, "-e", f"envbuild_reference_receipt={tmp_path / 'reference.json'}"
    )
    assert again.returncode != 0
    assert "receipts differ from the reference" in again.stdout, again.stdout[-6000:]
    assert "einops" in again.stdout
    provision_task = again.stdout.split("TASK [Provision]")[1].split("TASK [")[0]
    assert "ok: [localhost]" in provision_task  # the second run found everything done: not changed
