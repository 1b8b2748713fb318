"""``provision --lock`` builds a packaged project, its workspace members and plain sdists as
``uv sync`` builds them: isolated, each build's ``build-system.requires`` resolved from the
project's indexes (not ``--no-index``), under its build constraints; the installed set is uv's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.buildbackends import write_package
from support.fixtures import installer_env
from support.gatelocks import GateIndex, _run, uv_bin


def _project(folder: Path, idx: GateIndex, backend: str, *, deps: tuple[str, ...] = (),
             tool_uv: str = "", member: str | None = None) -> Path:
    """A packaged project ``trainer`` built by ``backend`` (and a workspace member ``helper`` built
    by ``member``), locked by real ``uv lock`` against the stand-in index."""
    folder.mkdir(parents=True)
    build = write_package(folder, "trainer", backend)
    all_deps = ["torch==2.10.0", "filelock-like==3.0", *deps]
    sources = ""
    if member is not None:
        helper = folder / "packages" / "helper"
        helper.mkdir(parents=True)
        (helper / "pyproject.toml").write_text(
            write_package(helper, "helper", member) + '[project]\nname = "helper"\nversion = "0.2.0"\ndescription = "A helper."\n'
            'requires-python = ">=3.10"\ndependencies = ["einops-like==0.8.1"]\n')
        all_deps.append("helper")
        sources = ('[tool.uv.workspace]\nmembers = ["packages/helper"]\n\n'
                   '[tool.uv.sources]\nhelper = { workspace = true }\n\n')
    (folder / "pyproject.toml").write_text(
        build + '[project]\nname = "trainer"\nversion = "0.1.0"\ndescription = "A trainer."\nrequires-python = ">=3.10"\n'
        f"dependencies = {json.dumps(all_deps)}\n\n[tool.uv]\n{tool_uv}\n\n{sources}"
        f'[[tool.uv.index]]\nname = "pypi"\nurl = "{idx.pypi_url}"\ndefault = true\n')
    _run([uv_bin(), "lock", "--no-cache"], folder, folder.parent, project_config=True)
    return folder / "uv.lock"


def uv_pip_list(venv: Path) -> dict[str, str]:
    """{name: version} of ``venv``, as ``uv pip list`` says."""
    out = subprocess.run([uv_bin(), "pip", "list", "--python", str(venv / "bin" / "python"), "--format", "json"],
                         capture_output=True, text=True, check=True, env=installer_env())
    return {d["name"]: d["version"] for d in json.loads(out.stdout)}


def uv_sync(folder: Path, venv: Path, home: Path, *argv: str) -> dict[str, str]:
    """What real ``uv sync --frozen ARGV`` installs into a fresh ``venv``."""
    env = installer_env(home, {"UV_PROJECT_ENVIRONMENT": str(venv)})
    env.pop("UV_NO_CONFIG")
    out = subprocess.run([uv_bin(), "sync", "--frozen", "--python", sys.executable, *argv], cwd=folder, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return uv_pip_list(venv)


@pytest.mark.slow
def test_packaged_root_member_and_sdist_install_as_uv_sync_installs_them(
        build_index: GateIndex, tmp_path: Path, run_envbuild) -> None:  # type: ignore[no-untyped-def]
    """A setuptools root, a hatchling workspace member and an sdist-only dependency (setuptools):
    each backend comes from the project's index, the build constraints of the project hold, and
    the venv holds what uv sync's holds. ``--backend pip`` on that root (made bare by the uv
    backend) is refused before anything runs (exit 2), the venv unchanged."""
    lock = _project(tmp_path / "p", build_index, "setuptools", deps=("sdist-only==1.0",), member="hatchling",
                    tool_uv='build-constraint-dependencies = ["setuptools>=61"]')
    want = uv_sync(lock.parent, tmp_path / "uv-venv", tmp_path / "home")
    assert {"trainer", "helper", "sdist-only", "torch"} <= set(want)
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    venv = tmp_path / "data" / "venv"
    assert uv_pip_list(venv) == want
    pip = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data", "--backend", "pip")
    assert pip.rc == 2, pip.output
    assert "has no pip" in pip.stderr and "--backend uv" in pip.stderr and "Traceback" not in pip.output
    assert uv_pip_list(venv) == want


@pytest.mark.slow
def test_build_constraints_bind_the_build_requirements(build_index: GateIndex, tmp_path: Path,
                                                       run_envbuild) -> None:  # type: ignore[no-untyped-def]
    """``--build-constraints FILE`` and ``[tool.uv] build-constraint-dependencies`` constrain the
    backend: one no index serves stops the project stage (exit 5) with a hint a lock user can act
    on; one that is served builds."""
    lock = _project(tmp_path / "p", build_index, "flit-core")
    bad = tmp_path / "bad.txt"
    bad.write_text("flit-core<1  # no such flit-core\n")
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data", "--build-constraints", bad)
    assert res.rc == 5, res.output
    assert "could not get its build requirements" in res.stderr and "build-constraint-dependencies" in res.stderr
    assert "Traceback" not in res.output
    good = tmp_path / "good.txt"
    good.write_text("flit-core>=3.4\n")
    ok = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data", "--build-constraints", good)
    assert ok.rc == 0, ok.output
    assert "trainer" in uv_pip_list(tmp_path / "data" / "venv")
    pinned = _project(tmp_path / "q", build_index, "pdm-backend",
                      tool_uv='build-constraint-dependencies = ["pdm-backend<0.1"]')
    no = run_envbuild("provision", "--lock", pinned, "--root", tmp_path / "data2")
    assert no.rc == 5 and "could not get its build requirements" in no.stderr, no.output
