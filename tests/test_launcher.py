"""envbuild stays at hand in the environment it made: the venv's ``bin/envbuild`` launcher runs the
envbuild that provisioned it (never a copy installed into the stack), survives ``uv sync`` and a
re-provision, and never replaces a user's own ``envbuild`` there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult

import envbuild
from envbuild.installer import find_uv
from envbuild.layout import LAUNCHER_MARK, launcher_text


def _bare_shell(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a login-free bash whose PATH has no envbuild (only the system's folders)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300
    )


def test_the_launcher_is_one_shell_word_per_path_and_runs_envbuild(tmp_path: Path) -> None:
    """Paths with spaces and quotes reach the shell as one word each (read back by a real sh):
    the launcher runs this interpreter on the install folder it names, not on what the current
    folder or PYTHONPATH hold."""
    odd = tmp_path / "it's a folder"
    odd.mkdir()
    (odd / "envbuild").symlink_to(Path(envbuild.__file__).parent)
    launcher = tmp_path / "bin" / "envbuild"
    launcher.parent.mkdir()
    launcher.write_text(launcher_text(sys.executable, str(odd)))
    launcher.chmod(0o755)
    decoy = tmp_path / "cwd"
    (decoy / "envbuild").mkdir(parents=True)
    (decoy / "envbuild" / "__init__.py").write_text("raise SystemExit('the decoy was imported')\n")
    out = subprocess.run(
        ["sh", str(launcher), "--version"],
        cwd=decoy,
        env={**os.environ, "PYTHONPATH": str(decoy)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"envbuild {envbuild.__version__}"
    assert LAUNCHER_MARK in launcher.read_text()


@pytest.mark.slow
def test_after_activate_envbuild_is_the_one_that_made_the_venv(
    write_stack: Callable[..., Path], provision: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack = write_stack([{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    first = provision(stack)
    assert first.rc == 0, first.output
    venv = tmp_path / "data" / "venv"
    launcher = venv / "bin" / "envbuild"
    text = launcher.read_text()
    assert os.access(launcher, os.X_OK) and sys.executable in text
    # no envbuild distribution in the stack: the launcher is a file no installer records
    assert not list(venv.glob("lib/python3*/site-packages/envbuild*.dist-info"))

    activated = _bare_shell(
        tmp_path,
        f". {venv}/bin/activate && command -v envbuild && envbuild verify && envbuild receipt list",
    )
    assert activated.returncode == 0, activated.stdout + activated.stderr
    lines = activated.stdout.splitlines()
    assert lines[0] == str(launcher)
    assert f"root {tmp_path / 'data'} (from the active venv" in activated.stdout, lines
    assert "intact" in activated.stdout and "receipt(s) in" in activated.stdout

    # a re-provision writes it again where it went; a user's own envbuild there is never replaced
    launcher.unlink()
    again = provision(stack)
    assert again.rc == 0, again.output
    assert launcher.read_text() == text
    launcher.write_text("#!/bin/sh\necho mine\n")
    assert provision(stack).rc == 0
    assert launcher.read_text() == "#!/bin/sh\necho mine\n"
    launcher.write_text(text)

    # uv sync on that venv (exact: it removes every distribution its lock does not hold) leaves
    # the launcher alone, as it leaves any file no distribution records
    uv = find_uv()
    assert uv is not None
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0"\nrequires-python = ">=3.10"\ndependencies = []\n'
        "[tool.uv]\npackage = false\n"
    )
    uv_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "VIRTUAL_ENV"))
    }
    uv_env.update(UV_OFFLINE="1", UV_PROJECT_ENVIRONMENT=str(venv), UV_NO_CONFIG="1")
    for argv in (["lock"], ["sync", "--frozen", "--python", str(venv / "bin" / "python")]):
        done = subprocess.run(
            [uv, *argv], cwd=project, env=uv_env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
    assert "Uninstalled" in done.stderr  # it did sync: the stack's packages went
    assert launcher.read_text() == text

    shutil.rmtree(project)
