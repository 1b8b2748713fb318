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
from lockhelpers import lock_env, make_git_repo, step_file
from support.fixtures import EnvbuildResult, Venv

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_locked_git_step_installs(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    provision: Callable[..., EnvbuildResult],
    provisioned_venv: Venv,
    tmp_path: Path,
    backend: str,
) -> None:
    repo = make_git_repo(tmp_path)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    stack = write_stack(
        [
            {"name": "helpers", "packages": ["einops-like==0.8.1"]},
            {
                "name": "fla",
                "packages": [
                    f"gitpkg-like @ git+file://localhost{repo}@HEAD",
                    "fla-core-like==0.4.2",
                ],
                "no_deps": True,
            },
        ]
    )
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    text = step_file(stack.parent, "fla").read_text()
    # both kinds in one file
    assert f"gitpkg-like @ git+file://localhost{repo}@{sha}" in text and "--hash=sha256:" in text

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
        assert (
            "git+file://" in parts[0].read_text() and "fla-core-like==0.4.2" in parts[1].read_text()
        )
