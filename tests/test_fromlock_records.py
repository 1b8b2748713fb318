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
from lockhelpers import make_git_repo
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import (
    PROJECT,
    GateIndex,
    _folder,
    _toml_list,
    _uv_indexes,
    _uv_lock,
    dist_infos,
    uv_bin,
    uv_sync_dry_run,
)
from support.wheels import build_sdist
from test_fromlock import torch_project_lock, uv_sync

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


def _git(repo: Path, env: dict[str, str], *argv: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *argv], check=True, env=env, capture_output=True, text=True
    ).stdout.strip()


def _git_lock(tmp: Path, idx: GateIndex) -> Path:
    """uv.lock of torch, gitpkg-like from a git repository's branch ``main`` (built isolated) and a
    flash-attn-like package from another's tag ``v2.8.3``, named in ``no-build-isolation-package``
    (built against torch, in the builds stage): both by ``file://``, as uv locks them."""
    import tarfile

    gitpkg = make_git_repo(tmp)
    sdist = build_sdist(
        tmp / "git-sdist", "flash-attn", "2.8.3", requires=["torch", "einops-like"], probe=["torch"]
    )
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "git-src", filter="data")
    [repo] = (tmp / "git-src").iterdir()
    env = {
        **installer_env(tmp / "home"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"], ["tag", "v2.8.3"]):
        _git(repo, env, *argv)
    folder = _folder(tmp, "git-records")
    deps = ["torch==2.10.0", "trainer-utils==1.0", "flash-attn", "gitpkg-like"]
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = {_toml_list(deps)}

[tool.uv]
package = false
no-build-isolation-package = ["flash-attn"]

[tool.uv.sources]
torch = [{{ index = "cu128", marker = "sys_platform == 'linux'" }}]
flash-attn = {{ git = "{repo.as_uri()}", tag = "v2.8.3" }}
gitpkg-like = {{ git = "{gitpkg.as_uri()}", branch = "main" }}

{_uv_indexes(idx, ["cu128"])}""")
    return _uv_lock(folder, tmp)


def test_git_pins_are_recorded_as_uv_sync_records_them(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A git pin built isolated and one built against torch in the builds stage (installed from the
    wheel it built) are both recorded as uv sync records those git sources: the same
    ``direct_url.json`` bytes (the ref the lock asked for), the RECORD row its hash and size, and
    uv sync finds nothing to rebuild. Planted: the builds wheel's URL record, as installed, is one
    uv sync would rebuild."""
    lock = _git_lock(tmp_path, gate_index)
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    theirs = tmp_path / "uv-venv"
    uv_sync(lock, theirs, tmp_path / "home", "--no-install-package", "flash-attn")
    uv_sync(lock, theirs, tmp_path / "home")
    venv = tmp_path / "data" / "venv"
    ours, uvs = dist_infos(venv), dist_infos(theirs)
    assert ours["gitpkg_like-0.1.dist-info"] == uvs["gitpkg_like-0.1.dist-info"]
    # the wheel built against torch: its build provenance is envbuild's, uv's build settings
    # (uv_build.json) uv's own; every other file and record the same
    info = "flash_attn-2.8.3.dist-info"
    mine, uv_own = dict(ours[info]), dict(uvs[info])
    files = (mine.pop("files"), uv_own.pop("files"))
    assert isinstance(files[0], list) and isinstance(files[1], list)
    assert set(files[0]) ^ set(files[1]) == {"envbuild_provenance.json", "uv_build.json"}
    assert uv_own.pop("uv_build.json") == "{}"
    assert mine == uv_own
    assert '"requested_revision":"v2.8.3"' in str(mine["direct_url.json"])
    _record_holds(venv, info)
    said = uv_sync_dry_run(lock.parent, venv, (), tmp_path / "home")
    assert "Would make no changes" in said, said
    # planted: the wheel's URL record, as the installer wrote it: uv sync would build the pin again
    [wheel] = (tmp_path / "data" / ".envbuild" / "builds").glob("flash_attn-*.whl")
    subprocess.run(
        [uv_bin(), "pip", "install", "--python", str(venv / "bin" / "python"), "--no-deps"]
        + ["--reinstall", str(wheel)],
        check=True,
        capture_output=True,
        env=installer_env(tmp_path / "home"),
    )
    said = uv_sync_dry_run(lock.parent, venv, (), tmp_path / "home")
    assert "Would make no changes" not in said and "flash-attn" in said, said


def _record_holds(venv: Path, info: str) -> None:
    """Every file a dist-info's RECORD lists has the hash and size it names."""
    import base64
    import csv
    import hashlib

    site = next(venv.glob("lib/python3*/site-packages"))
    rows = list(csv.reader((site / info / "RECORD").read_text().splitlines()))
    assert rows
    for path, digest, size in rows:
        if not digest:
            continue
        data = (site / path).read_bytes()
        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, size) == (f"sha256={want}", str(len(data))), path


def test_the_git_record_written_is_pips_own(tmp_path: Path) -> None:
    """The record the pip backend gives a wheel built from a git pin is the bytes pip itself writes
    installing that pin (``name @ git+URL@COMMIT``, the line the stage holds)."""
    from envbuild.installer.records import direct_url
    from envbuild.spec.stagefile import noted_git

    repo = make_git_repo(tmp_path)
    env = installer_env(tmp_path / "home")
    commit = _git(repo, env, "rev-parse", "HEAD")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
        + ["--no-deps", "--no-build-isolation", f"gitpkg-like @ git+{repo.as_uri()}@{commit}"],
        check=True,
        capture_output=True,
        env=env,
    )
    [info] = venv.glob("lib/python3*/site-packages/gitpkg_like-0.1.dist-info")
    git = noted_git([f"git: {repo.as_uri()}?branch=main#{commit}"])
    assert git is not None and git.requested_revision == "main"
    assert direct_url(git, "pip") == (info / "direct_url.json").read_bytes()


def test_the_pip_that_reads_pylock_is_envbuilds_own_where_it_runs_on_the_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """envbuild's own pip installs a stage's pylock.toml where it is 26.1 or newer and runs on the
    venv's Python; a Python it does not support (3.9 for pip 26) and ``ENVBUILD_PIP_PYLOCK=0`` get
    the lines from the index instead."""
    from importlib.metadata import version

    from packaging.version import Version

    from envbuild.installer.pip import PIP_READS_PYLOCK, pylock_pip

    python = tmp_path / "venv" / "bin" / "python"
    new_enough = Version(version("pip")).release[:2] >= PIP_READS_PYLOCK
    got = pylock_pip(python, f"{sys.version_info[0]}.{sys.version_info[1]}")
    assert (got is not None) == new_enough
    if got is not None:
        assert got == (sys.executable, "-m", "pip", "--python", str(python))
    assert pylock_pip(python, "3.9") is None
    monkeypatch.setenv("ENVBUILD_PIP_PYLOCK", "0")
    assert pylock_pip(python, f"{sys.version_info[0]}.{sys.version_info[1]}") is None
