"""``provision --lock`` builds a packaged project, its workspace members and plain sdists as
``uv sync`` builds them: isolated, each build's ``build-system.requires`` resolved from the
project's indexes (not ``--no-index``), under its build constraints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.buildbackends import write_package
from support.fixtures import installer_env
from support.gatelocks import GateIndex, _run, uv_bin

from tests.support.buildbackends import BACKENDS  # noqa: F401


def _project(folder: Path, idx: GateIndex, backend: str, *, tool_uv: str = "") -> Path:
    folder.mkdir(parents=True)
    build = write_package(folder, "trainer", backend)
    (folder / "pyproject.toml").write_text(
        build + '[project]\nname = "trainer"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["torch==2.10.0", "filelock-like==3.0"]\n\n'
        f'[tool.uv]\n{tool_uv}\n[[tool.uv.index]]\nname = "pypi"\nurl = "{idx.pypi_url}"\ndefault = true\n')
    _run([uv_bin(), "lock", "--no-cache"], folder, folder.parent, project_config=True)
    return folder / "uv.lock"


def uv_pip_list(venv: Path) -> dict[str, str]:
    out = subprocess.run([uv_bin(), "pip", "list", "--python", str(venv / "bin" / "python"), "--format", "json"],
                         capture_output=True, text=True, check=True, env=installer_env())
    return {d["name"]: d["version"] for d in json.loads(out.stdout)}


def uv_sync(folder: Path, venv: Path, home: Path) -> dict[str, str]:
    env = installer_env(home, {"UV_PROJECT_ENVIRONMENT": str(venv)})
    env.pop("UV_NO_CONFIG")
    subprocess.run([uv_bin(), "sync", "--frozen", "--python", sys.executable], cwd=folder, env=env, check=True,
                   capture_output=True, timeout=300)
    return uv_pip_list(venv)


@pytest.mark.slow
def test_a_setuptools_project_provisions_as_uv_sync_installs_it(build_index: GateIndex, tmp_path: Path,
                                                                run_envbuild) -> None:  # type: ignore[no-untyped-def]
    lock = _project(tmp_path / "p", build_index, "setuptools")
    want = uv_sync(lock.parent, tmp_path / "uv-venv", tmp_path / "home")
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    assert uv_pip_list(tmp_path / "data" / "venv") == want
