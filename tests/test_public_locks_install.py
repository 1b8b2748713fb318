"""``provision --lock`` installs public ML locks whose root or members are packages, for real.

Three projects committed under ``tests/data/publocks/`` (``SOURCE.txt`` names repository and
commit; the lock and pyprojects byte for byte, a stand-in module and README written here so the
packaged root or member builds): docling-project/docling e1cb2b2 (hatchling root ``docling-slim``
and two hatchling members, ``--all-packages``), TransformerLensOrg/TransformerLens 4cd36aa
(hatchling root), nvidia-cosmos/cosmos-reason2 a3b4a1d (virtual root, hatchling member). Each
selection installs torch from PyPI with its CUDA wheels (about 3 GB a lock).

For each: ``envbuild provision --lock`` into a new root, then ``uv sync --frozen`` with the same
selection into another venv (uv's cache pointed at the root's, so the files are not fetched
twice); the two environments must hold the same distributions at the same versions
(``uv pip list``), the packaged root and members among them, torch's stage first and guarded like
every other stage. A planted difference (one package removed from envbuild's venv) makes the
comparison fail, so the equality is not vacuous.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.fixtures import installer_env
from support.gatelocks import uv_bin, uv_pip_list

LOCKS = Path(__file__).resolve().parent / "data" / "publocks"

pytestmark = [pytest.mark.network, pytest.mark.slow]

# lock folder -> (uv sync's selection flags, the packaged projects that selection installs)
PACKAGED: dict[str, tuple[list[str], list[str]]] = {
    "docling": (
        ["--no-default-groups", "--all-packages"],
        ["docling-slim", "docling", "docling-client"],
    ),
    "transformer-lens": (["--no-default-groups"], ["transformer-lens"]),
    "cosmos-reason2": ([], ["cosmos-reason2-utils"]),
}
PYENV = {"PYENV_ROOT": os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")}


def interpreter(folder: Path) -> str:
    from envbuild.errors import EnvbuildError
    from envbuild.installer.python import find_interpreter

    pinned = folder / ".python-version"
    python = ".".join(pinned.read_text().split()[0].split(".")[:2]) if pinned.is_file() else "3.12"
    try:
        return str(find_interpreter(python, require_fit=False).executable)
    except EnvbuildError:
        pytest.skip(f"no Python {python} here (the lock's)")


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_public_packaged_lock_installs_what_uv_sync_installs(name: str, tmp_path: Path) -> None:
    argv, projects = PACKAGED[name]
    project = tmp_path / "project"
    import shutil

    shutil.copytree(LOCKS / name, project)
    exe = interpreter(project)
    root = tmp_path / "root"
    env = installer_env(tmp_path / "home", PYENV)
    ours = subprocess.run(
        [
            sys.executable,
            "-m",
            "envbuild",
            "provision",
            "--lock",
            str(project / "uv.lock"),
            "--root",
            str(root),
            "--python",
            exe,
            *argv,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert ours.returncode == 0, (name, ours.stdout[-2000:], ours.stderr[-4000:])
    steps = [ln for ln in (ours.stdout + ours.stderr).splitlines() if "step 1/" in ln]
    assert steps and " torch: " in steps[0], (name, steps[:1])
    manifest = json.loads((root / ".envbuild" / "manifest.json").read_text())
    unguarded = [
        s["name"]
        for s in manifest["steps"]
        if s.get("status") == "ok" and s.get("guard_seconds") is None
    ]
    assert not unguarded, (name, unguarded)

    uv_env = {
        **env,
        "UV_PROJECT_ENVIRONMENT": str(tmp_path / "uv-venv"),
        "UV_CACHE_DIR": str(root / "cache" / "uv"),
    }
    uv_env.pop("UV_NO_CONFIG")  # the project's own [tool.uv] settings, as a user's sync reads them
    theirs = subprocess.run(
        [uv_bin(), "sync", "--frozen", "--python", exe, *argv],
        cwd=project,
        env=uv_env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert theirs.returncode == 0, (name, theirs.stderr[-4000:])

    got, want = uv_pip_list(root / "venv", env), uv_pip_list(tmp_path / "uv-venv", env)
    assert "torch" in want and all(p in want for p in projects), (name, sorted(want))
    assert got == want, (
        name,
        {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)},
    )

    # the planted difference: one package fewer on envbuild's side is seen
    subprocess.run(
        [
            uv_bin(),
            "pip",
            "uninstall",
            "--python",
            str(root / "venv" / "bin" / "python"),
            projects[0],
        ],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert uv_pip_list(root / "venv", env) != want
