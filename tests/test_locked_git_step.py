"""A locked step that mixes a git requirement with hash-pinned ones installs with both backends.

The seed stack's fla step is ``flash-linear-attention @ git+...`` beside ``fla-core==0.4.2``,
``--no-deps``. The lock pins the git line to a commit (a VCS checkout has no hash) and the other
line with ``--hash``; pip's hash-checking mode is all-or-nothing and refuses the VCS line, so the
pip backend installs such a file in runs of the same kind, in the file's order. uv's
``--verify-hashes`` checks the hashes that are there and takes the file whole.

Real git (a ``file://`` repository with an in-tree PEP 517 backend: no build dependency to
download), real pip-compile, pip and uv against the test index.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from lockhelpers import lock_env, step_file
from support.fixtures import EnvbuildResult, Venv, installer_env

pytestmark = pytest.mark.slow

_BACKEND = '''
"""A PEP 517 backend with no dependencies: the package folder into a wheel."""
import base64, hashlib, os, zipfile

NAME, VERSION = "gitpkg_like", "0.1"
DIST = f"{NAME}-{VERSION}.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {f"{NAME}/__init__.py": open(os.path.join(NAME, "__init__.py"), "rb").read(),
             f"{DIST}/METADATA": b"Metadata-Version: 2.1\\nName: gitpkg-like\\nVersion: 0.1\\n\\n",
             f"{DIST}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    rows = []
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{rel},sha256={digest},{len(data)}")
        zf.writestr(f"{DIST}/RECORD", "\\n".join(rows + [f"{DIST}/RECORD,,"]) + "\\n")
    return name
'''


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "gitpkg"
    (repo / "gitpkg_like").mkdir(parents=True)
    (repo / "gitpkg_like" / "__init__.py").write_text("FROM_GIT = True\n")
    (repo / "backend.py").write_text(_BACKEND)
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "gitpkg-like"\nversion = "0.1"\n')
    env = {**installer_env(tmp_path / "home"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    return repo


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_locked_git_step_installs(write_stack: Callable[..., Path], run_envbuild: Callable[..., EnvbuildResult],
                                  provision: Callable[..., EnvbuildResult], provisioned_venv: Venv,
                                  tmp_path: Path, backend: str) -> None:
    repo = _repo(tmp_path)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    stack = write_stack([
        {"name": "helpers", "packages": ["einops-like==0.8.1"]},
        {"name": "fla", "packages": [f"gitpkg-like @ git+file://localhost{repo}@HEAD", "fla-core-like==0.4.2"],
         "no_deps": True},
    ])
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    text = step_file(stack.parent, "fla").read_text()
    assert f"gitpkg-like @ git+file://localhost{repo}@{sha}" in text and "--hash=sha256:" in text  # both kinds in one file

    result = provision(stack, "--backend", backend)
    assert result.rc == 0, result.stderr
    dists = provisioned_venv.dists()
    assert dists["gitpkg-like"].version == "0.1" and dists["fla-core-like"].version == "0.4.2"
    assert provisioned_venv.read("gitpkg_like/__init__.py") == "FROM_GIT = True\n"
    log = (tmp_path / "data" / "logs" / "03-fla.log").read_text()
    if backend == "pip":
        # two pip runs in the step's order: the git checkout (no hash mode), then the hashed line
        # under --require-hashes, so the package listed last is installed last
        commands = [line for line in log.splitlines() if line.startswith("$ ")]
        assert len(commands) == 2, log
        assert "--require-hashes" not in commands[0] and "--require-hashes" in commands[1]
        parts = sorted((tmp_path / "data" / ".envbuild" / "steps").glob("03-fla.part*.txt"))
        assert "git+file://" in parts[0].read_text() and "fla-core-like==0.4.2" in parts[1].read_text()
