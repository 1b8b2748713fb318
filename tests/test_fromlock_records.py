"""How ``provision --lock`` records what it installs, compared at the dist-info with what the
installer itself records for the same source, installed for real.

- The pip backend: an index file is recorded as ``pip install`` from that index records it (no
  ``direct_url.json``), through envbuild's own pip reading the stage's ``pylock.toml``, or, where
  that pip reads none, as ``name==version`` lines from the index; ``uv sync --frozen --dry-run``
  then finds nothing to do.
- A git pin: as ``uv sync`` records that git source (the ref the lock asked for), built isolated or,
  when its build needs torch, from the wheel the builds stage made.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import GateIndex, dist_infos, uv_bin, uv_sync_dry_run
from test_fromlock import torch_project_lock

pytestmark = pytest.mark.slow

# a venv's seed packages: pip's (python -m venv) has them, uv sync leaves them
SEEDS = ("pip-", "setuptools-", "wheel-")


def _exported(lock: Path, tmp: Path) -> Path:
    """The lock's pins as uv exports them (``name==version --hash`` lines, URL lines by URL)."""
    out = tmp / "exported.txt"
    env = installer_env(tmp / "home")
    env.pop("UV_NO_CONFIG")
    subprocess.run(
        [uv_bin(), "export", "--frozen", "--format", "requirements.txt", "-o", str(out)],
        cwd=lock.parent,
        env=env,
        check=True,
        capture_output=True,
    )
    return out


def _pips_own(venv: Path, requirements: Path, idx: GateIndex, home: Path) -> None:
    """What pip itself installs from the index: a venv of its own (``python -m venv``), the pins
    installed by its pip with ``--require-hashes`` from the lock's indexes."""
    env = installer_env(home)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--require-hashes"]
        + ["--index-url", idx.pypi_url, "--extra-index-url", idx.url("cu128")]
        + ["-r", str(requirements)],
        check=True,
        capture_output=True,
        env=env,
    )


def _without_seeds(infos: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    return {k: v for k, v in infos.items() if not k.startswith(SEEDS)}


@pytest.mark.parametrize("reads_pylock", [True, False], ids=["pip-26", "old-pip"])
def test_the_pip_backend_records_index_files_as_pip_installs_them(
    reads_pylock: bool,
    gate_index: GateIndex,
    tmp_path: Path,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    """torch from one index and einops-like from another, trainer-utils by URL: ``--backend pip``
    installs the dist-infos pip itself installs from those indexes (the URL one with its
    ``direct_url.json``, the others without), with envbuild's own pip reading the stage's
    pylock.toml, and, where that pip reads none (``ENVBUILD_PIP_PYLOCK=0`` stands for a pip before
    26.1), with ``name==version`` lines from each index; uv sync finds nothing to do."""
    url = gate_index.server.file_url("pypi", "trainer_utils-1.0-py3-none-any.whl")
    deps = ["torch==2.10.0", "einops-like==0.8.1", f"trainer-utils @ {url}"]
    lock = torch_project_lock(tmp_path, gate_index, "pip-records", deps, "")
    env = {} if reads_pylock else {"ENVBUILD_PIP_PYLOCK": "0"}
    res = run_envbuild(
        "provision", "--lock", lock, "--root", tmp_path / "data", "--backend", "pip", env=env
    )
    assert res.rc == 0, res.output
    venv = tmp_path / "data" / "venv"
    steps = tmp_path / "data" / ".envbuild" / "steps"
    assert any(steps.glob("pylock.*.toml")) == reads_pylock
    assert any(steps.glob("*.index*.txt")) != reads_pylock
    _pips_own(tmp_path / "pip-venv", _exported(lock, tmp_path), gate_index, tmp_path / "home")
    ours, theirs = dist_infos(venv), dist_infos(tmp_path / "pip-venv")
    assert _without_seeds(ours) == _without_seeds(theirs)
    assert "direct_url.json" in ours["trainer_utils-1.0.dist-info"]
    assert "direct_url.json" not in ours["einops_like-0.8.1.dist-info"]
    said = uv_sync_dry_run(lock.parent, venv, (), tmp_path / "home")
    assert "Would make no changes" in said, said
