"""``provision --lock`` / ``plan --lock``: one environment of a tool-made lock, installed in stages
(torch first, the guard after each), equal to what the locker's own install gives.

Every lock is made by the real tool (``uv lock``, ``pip lock``) against the gate's local index
(``support.gatelocks``); the locker's install is the real one (``uv sync --frozen``, ``uv pip
sync pylock.toml``); the two environments are compared with ``pip list --format json``.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.backend import BACKEND
from support.fixtures import EnvbuildResult, Venv, installer_env
from support.gatelocks import (
    PROJECT,
    GateIndex,
    _folder,
    _toml_list,
    _uv_indexes,
    _uv_lock,
    pip_lock,
    uv_bin,
    uv_groups_lock,
    uv_platform_lock,
)
from support.index import UnreachablePort
from support.wheels import build_sdist

HEALTHY = "flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE"
MISMATCHED = "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE"


def uv_sdist_lock(tmp: Path, idx: GateIndex, torch: str = "2.10.0") -> Path:
    """uv.lock of ``torch==TORCH`` (+cu128 on Linux), trainer-utils and a flash-attn-like sdist by
    URL whose build imports torch (it records the torch it saw in ``flash_attn/_build_env.json``),
    named in ``[tool.uv] no-build-isolation-package`` as projects do for flash-attn. The sdist's
    bytes are reproducible: every such lock pins the same sha256."""
    sdist = build_sdist(
        tmp / "sdists", "flash-attn", "2.8.3", requires=["torch", "einops-like"], probe=["torch"]
    )
    idx.server.add_repo("sdists", sdist.parent)
    deps = [
        f"torch=={torch}",
        "trainer-utils==1.0",
        f"flash-attn @ {idx.server.file_url('sdists', sdist.name)}",
    ]
    return torch_project_lock(
        tmp, idx, "uv-sdist", deps, 'no-build-isolation-package = ["flash-attn"]'
    )


def torch_project_lock(
    tmp: Path, idx: GateIndex, name: str, deps: list[str], uv_settings: str
) -> Path:
    """uv.lock of a virtual project of ``deps`` (torch from the cu128 stand-in on Linux) with the
    ``[tool.uv]`` lines ``uv_settings``, by real ``uv lock``."""
    folder = _folder(tmp, name)
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = {_toml_list(deps)}

[tool.uv]
package = false
{uv_settings}

[tool.uv.sources]
torch = [{{ index = "cu128", marker = "sys_platform == 'linux'" }}]

{_uv_indexes(idx, ["cu128"])}""")
    return _uv_lock(folder, tmp)


def uv_project_lock(tmp: Path, idx: GateIndex) -> Path:
    """uv.lock of a packaged project (``trainer``: torch, trainer-utils), which uv sync installs
    editable."""
    folder = _folder(tmp, "uv-project")
    (folder / "trainer").mkdir()
    (folder / "trainer" / "__init__.py").write_text("VALUE = 1\n")
    (folder / "_backend").mkdir()
    # uv builds the project offline
    (folder / "_backend" / "editable_backend.py").write_text(BACKEND)
    (folder / "pyproject.toml").write_text(f"""[build-system]
requires = []
build-backend = "editable_backend"
backend-path = ["_backend"]

[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = {_toml_list(["torch==2.10.0", "trainer-utils==1.0"])}

[tool.uv.sources]
torch = [{{ index = "cu128", marker = "sys_platform == 'linux'" }}]

{_uv_indexes(idx, ["cu128"])}""")
    return _uv_lock(folder, tmp)


def pip_list(venv: Path) -> list[dict[str, str]]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv), "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=installer_env(),
    )
    return sorted(json.loads(out.stdout), key=lambda d: d["name"].lower())


def uv_sync(lock: Path, venv: Path, home: Path, *args: str) -> None:
    env = installer_env(home, {"UV_PROJECT_ENVIRONMENT": str(venv)})
    env.pop("UV_NO_CONFIG")  # the project's own [tool.uv] is part of what uv sync reads
    subprocess.run(
        [uv_bin(), "sync", "--frozen", "--no-cache", "--python", sys.executable, *args],
        cwd=lock.parent,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )


def lock_json(
    run_envbuild: Callable[..., EnvbuildResult], lock: Path, *args: str
) -> dict[str, Any]:
    res = run_envbuild("plan", "--lock", lock, "--json", *args)
    assert res.rc == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def stages_of(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {s["name"]: [p["name"] for p in s["packages"]] for s in doc["stages"]}


# ----------------------------------------------------------------------------- plan --lock


def test_plan_lock_names_each_stage_and_why(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index, extension=HEALTHY)
    doc = lock_json(run_envbuild, lock)
    assert doc["environment"] == "linux x86_64" and doc["torch"] == "2.10.0+cu128"
    assert stages_of(doc) == {
        "torch": ["filelock-like", "nvidia-cuda-runtime-cu12", "nvidia-nccl-cu12", "torch"],
        "extensions": ["einops-like", "flash-attn"],
        "rest": ["trainer-utils"],
    }
    why = {p["name"]: p["why"] for s in doc["stages"] for p in s["packages"]}
    assert why["nvidia-nccl-cu12"] == "torch depends on it"
    assert (
        "+cu12torch2.10cxx11abitrue" in why["flash-attn"]
        and why["einops-like"] == "flash-attn depends on it"
    )
    assert doc["lock_sha256"] and doc["left_out"] == [
        {
            "name": "trainer",
            "why": (
                "the project is virtual (package = false): "
                "the locker installs only its dependencies"
            ),
        }
    ]
    text = run_envbuild("plan", "--lock", lock)
    assert text.rc == 0 and "stage 2/3 extensions" in text.stdout and "gate: ok" in text.stdout
    # a lock named relative to the folder it is run in: what a receipt and the venv's record keep
    # of it is its absolute path, so verify and receipt find it from any folder
    rel = run_envbuild("plan", "--lock", lock.name, "--json", cwd=lock.parent)
    assert rel.rc == 0, rel.output
    assert json.loads(rel.stdout)["lock_file"] == str(lock)


def test_plan_lock_refuses_a_lock_the_gate_fails_unless_accepted(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index, extension=MISMATCHED)
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 8, res.output
    assert "fails envbuild's gate in linux x86_64" in res.stderr and "[extension-abi]" in res.stderr
    # the hint: a mismatched extension alone can be built from source
    assert "--rebuild-mismatched" in res.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made
    accept = tmp_path / "accept.toml"
    accept.write_text(
        '[[accept]]\nrule = "extension-abi"\npackage = "flash-attn"\n'
        'reason = "rebuilt from source in the image"\n'
    )
    res = run_envbuild("plan", "--lock", lock, "--accept", accept)
    assert res.rc == 0, res.output
    assert "accepted: rebuilt from source in the image" in res.stdout


@dataclass(frozen=True)
class _StandIn(GateIndex):
    """The gate index with another PyPI stand-in repo (the PyPI wheels and what a test adds)."""

    pypi: str = "pypi"

    @property
    def pypi_url(self) -> str:
        return self.url(self.pypi)


def pypi_with_sdist(tmp: Path, idx: GateIndex) -> tuple[_StandIn, Path]:
    """A PyPI stand-in that also serves flash-attn 2.8.3's sdist (its build imports torch, as the
    real one's does), as PyPI serves the sdist of each release whose wheels are on GitHub."""
    folder = tmp / "pypi-with-sdist"
    folder.mkdir()
    for wheel in (idx.root / "pypi").iterdir():
        (folder / wheel.name).symlink_to(wheel)
    sdist = build_sdist(
        folder, "flash-attn", "2.8.3", requires=["torch", "einops-like"], probe=["torch"]
    )
    repo = f"pypi-{tmp.name}"[:60]
    idx.server.add_repo(repo, folder)
    return _StandIn(idx.server, idx.root, pypi=repo), sdist


def test_rebuild_mismatched_plans_the_sdist_from_the_lock_index(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """The lock's flash-attn wheel is built for torch 2.9 beside 2.10.0+cu128: with
    --rebuild-mismatched plan --lock puts it in the builds stage, from the sdist of 2.8.3 its index
    serves (pinned by the page's sha256, said not to come from the lock); without the flag it is
    refused."""
    standin, sdist = pypi_with_sdist(tmp_path, gate_index)
    lock = uv_platform_lock(tmp_path, standin, extension=MISMATCHED)
    res = run_envbuild("plan", "--lock", lock)
    assert res.rc == 8 and "--rebuild-mismatched" in res.stderr, res.output

    doc = lock_json(run_envbuild, lock, "--rebuild-mismatched")
    assert stages_of(doc) == {
        "torch": ["filelock-like", "nvidia-cuda-runtime-cu12", "nvidia-nccl-cu12", "torch"],
        "extensions": ["einops-like"],
        "rest": ["trainer-utils"],
        "builds": ["flash-attn"],
    }
    [placed] = [p for s in doc["stages"] for p in s["packages"] if p["name"] == "flash-attn"]
    host = f"127.0.0.1:{gate_index.server.port}"
    assert (
        placed["why"]
        == "rebuilt (--rebuild-mismatched): the lock's wheel is built for torch 2.9, locked with"
        f" torch 2.10.0+cu128; its sdist from {host} (not in the lock: pinned by the sha256 its"
        " index page gives) is built against that torch"
    )
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert placed["version"] == "2.8.3" and placed["file"] == sdist.name and placed["sha256"] == sha
    assert placed["rebuilt"] == {
        "lock_version": "2.8.3+cu12torch2.9cxx11abitrue",
        "version": "2.8.3",
        "sdist": sdist.name,
        "url": standin.server.file_url(standin.pypi, sdist.name),
        "sha256": sha,
        "origin": "index",
        "where": host,
        "in_lock": False,
    }
    assert doc["builds"] == {
        "flash-attn": "no built wheel in cache for this key: compiles from the sdist"
    }
    text = run_envbuild("plan", "--lock", lock, "--rebuild-mismatched")
    assert text.rc == 0 and "stage 4/4 builds" in text.stdout, text.output
    assert (
        "gate: ok (flash-attn [extension-abi] rebuilt from its sdist: --rebuild-mismatched)"
        in text.stdout
    )

    dockerfile = tmp_path / "docker" / "lock.Dockerfile"
    res = run_envbuild("docker", "--lock", lock, "-o", dockerfile, "--context", tmp_path)
    assert res.rc == 8 and not dockerfile.exists(), res.output
    res = run_envbuild(
        "docker", "--lock", lock, "--rebuild-mismatched", "-o", dockerfile, "--context", tmp_path
    )
    assert res.rc == 0, res.output
    [builds] = [
        s
        for s in json.loads((tmp_path / "docker" / "lock.stages" / "04-builds.json").read_text())[
            "stages"
        ]
        if s["name"] == "builds"
    ]
    assert builds["packages"] == ["flash-attn==2.8.3"]
    assert builds["lines"] == [f"flash-attn @ {placed['rebuilt']['url']} --hash=sha256:{sha}"]


@pytest.mark.slow
def test_rebuild_mismatched_installs_the_sdist_built_against_the_locks_torch(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """provision --lock --rebuild-mismatched builds flash-attn 2.8.3 from its index's sdist against
    the installed 2.10.0+cu128 (its build saw that torch; its provenance names the sdist and its
    sha256), the guard passes after every stage, and the receipt says the sdist is not from the
    lock. Offline, the sdist comes from the wheelhouse `wheelhouse mirror --lock
    --rebuild-mismatched` made, and the index is not asked."""
    standin, sdist = pypi_with_sdist(tmp_path, gate_index)
    lock = uv_platform_lock(tmp_path, standin, extension=MISMATCHED)
    compiles = tmp_path / "compiles.log"
    env = {"TINY_BACKEND_BUILDS": str(compiles)}
    res = run_envbuild(
        "provision", "--lock", lock, "--rebuild-mismatched", "--root", tmp_path / "one", env=env
    )
    assert res.rc == 0, res.output
    assert "==> step 4/4 builds: flash-attn==2.8.3" in res.output and "ok step builds" in res.output
    assert compiles.read_text().splitlines() == ["flash-attn 2.8.3"]
    venv = Venv(tmp_path / "one" / "venv", home=tmp_path / "home")
    assert json.loads(venv.read("flash_attn/_build_env.json")) == {"torch": "2.10.0+cu128"}
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    url = gate_index.server.file_url(standin.pypi, sdist.name)
    provenance = json.loads(venv.read("flash_attn-2.8.3.dist-info/envbuild_provenance.json"))
    assert provenance["source"]["location"] == url and provenance["source"]["sha256"] == sha
    assert provenance["torch"]["version"] == "2.10.0+cu128"
    assert {"name": "flash-attn", "version": "2.8.3"} in pip_list(tmp_path / "one" / "venv")
    receipt = json.loads(
        Path(
            json.loads(
                run_envbuild(
                    "provision",
                    "--lock",
                    lock,
                    "--rebuild-mismatched",
                    "--root",
                    tmp_path / "one",
                    "--json",
                ).stdout
            )["receipt"]
        ).read_text()
    )
    rebuilt = receipt["payload"]["lock"]["rebuilt"]["flash-attn"]
    assert rebuilt["in_lock"] is False and rebuilt["url"] == url and rebuilt["sha256"] == sha
    assert rebuilt["lock_version"] == "2.8.3+cu12torch2.9cxx11abitrue"

    wheelhouse = tmp_path / "wheelhouse"
    res = run_envbuild(
        "wheelhouse", "mirror", "--lock", lock, "--rebuild-mismatched", "--out", wheelhouse
    )
    assert res.rc == 0 and (wheelhouse / sdist.name).is_file(), res.output
    page = f"/{standin.pypi}/simple/flash-attn/"
    asked = len(gate_index.server.requested(page))
    assert asked > 0  # online, the sdist was found on its project page
    res = run_envbuild(
        "provision",
        "--lock",
        lock,
        "--rebuild-mismatched",
        "--offline",
        "--wheelhouse",
        wheelhouse,
        "--root",
        tmp_path / "two",
        env=env,
    )
    assert res.rc == 0, res.output
    assert (
        "from the build cache (no compile)" in res.output
        and len(compiles.read_text().splitlines()) == 1
    )
    assert len(gate_index.server.requested(page)) == asked  # offline: the index was not asked
    doc = lock_json(
        run_envbuild, lock, "--rebuild-mismatched", "--offline", "--wheelhouse", str(wheelhouse)
    )
    [placed] = [p for s in doc["stages"] for p in s["packages"] if p["name"] == "flash-attn"]
    assert placed["rebuilt"]["origin"] == "wheelhouse" and placed["rebuilt"]["url"] == url
    assert placed["rebuilt"]["sha256"] == sha


def test_rebuild_mismatched_without_an_sdist_or_an_index_is_refused(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """No sdist of flash-attn 2.8.3 in the lock or on its indexes: exit 8 naming it, nothing made;
    the lock's index not answering: exit 3 naming the host."""
    lock = uv_platform_lock(tmp_path, gate_index, extension=MISMATCHED)
    host = f"127.0.0.1:{gate_index.server.port}"
    for command in ("provision", "plan"):
        res = run_envbuild(
            command, "--lock", lock, "--rebuild-mismatched", "--root", tmp_path / "data"
        )
        assert res.rc == 8, res.output
        assert (
            "--rebuild-mismatched: no sdist of flash-attn 2.8.3 in the lock or on its index"
            f" ({host})" in res.stderr
        )
        assert "with --rebuild-mismatched" not in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "data").exists()
    text = lock.read_text()
    with UnreachablePort() as dead:
        lock.write_text(text.replace(host, f"127.0.0.1:{dead.port}"))
        res = run_envbuild(
            "provision", "--lock", lock, "--rebuild-mismatched", "--root", tmp_path / "data"
        )
    assert res.rc == 3, res.output
    assert f"looking for the sdist of flash-attn 2.8.3 on 127.0.0.1:{dead.port}" in res.stderr
    assert "Traceback" not in res.output and not (tmp_path / "data").exists()


def test_selection_follows_the_locker(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_groups_lock(tmp_path, gate_index)
    res = run_envbuild("plan", "--lock", lock)  # uv sync's default selection installs no torch here
    assert res.rc == 2, res.output
    assert (
        "installs no torch" in res.stderr
        and "--extra cpu, --extra cu128, --extra cu130" in res.stderr
    )
    for extra, torch in (("cpu", "2.10.0+cpu"), ("cu130", "2.10.0+cu130")):
        doc = lock_json(run_envbuild, lock, "--extra", extra)
        assert doc["torch"] == torch and doc["selection"] == f"extra {extra}"
    res = run_envbuild("plan", "--lock", lock, "--extra", "rocm")
    assert res.rc == 2 and "uv refuses this selection (uv sync --frozen --extra rocm)" in res.stderr
    assert (
        "Extra `rocm` is not defined" in res.stderr
        and "its extras: cpu, cu128, cu130" in res.stderr
    )
    # uv's own refusal and reason
    res = run_envbuild("plan", "--lock", lock, "--extra", "cpu", "--extra", "cu128")
    assert (
        res.rc == 2
        and "Extras `cpu` and `cu128` are incompatible with the declared conflicts" in res.stderr
    )


@pytest.mark.parametrize(
    "case", ["missing", "requirements", "not-toml", "with-profile", "other-platform"]
)
def test_bad_lock_inputs_are_usage_errors(
    case: str, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = tmp_path / "uv.lock"
    args: list[str | Path] = []
    if case == "requirements":
        lock = tmp_path / "requirements.txt"
        lock.write_text("torch==2.10.0 --hash=sha256:" + "0" * 64 + "\n")
    elif case == "not-toml":
        lock.write_text("version = 1\n[[package]\nname = 'x'\n")
    elif case == "with-profile":
        lock.write_text("version = 1\n")
        args = ["--profile", "cpu"]
    elif case == "other-platform":
        lock.write_text(
            'version = 1\nrequires-python = ">=3.10"\n\n[[package]]\nname = "torch"\nversion ='
            ' "2.10.0"\nsource = { registry = "https://example.invalid/simple" }\nwheels = [{ url ='
            ' "https://example.invalid/torch-2.10.0-py3-none-any.whl", hash = "sha256:'
            + "0" * 64
            + '" }]\n'
        )
        args = ["--environment", "macos-arm64"]
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data", *args)
    assert res.rc == 2, res.output
    assert "Traceback" not in res.output and not (tmp_path / "data").exists()
    expected = {
        "missing": "no such lockfile",
        "requirements": "a requirements file is not supported",
        "not-toml": "not a readable uv.lock file",
        "with-profile": "--profile cannot be used with it",
        "other-platform": "provision installs on this host",
    }[case]
    assert expected in res.stderr


# ----------------------------------------------------------------------------- provision --lock


@pytest.mark.slow
def test_provision_lock_equals_uv_sync(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """uv.lock with conflicting accelerator extras: `--extra cu128` installs what `uv sync --extra
    cu128` installs, in stages with the guard after each; a re-run is a no-op; the receipt names
    the lock, its sha256 and the environment."""
    lock = uv_groups_lock(tmp_path, gate_index)
    uv_sync(lock, tmp_path / "uv-venv", tmp_path / "home", "--extra", "cu128")
    res = run_envbuild("provision", "--lock", lock, "--extra", "cu128", "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    assert re.search(r"step 1/2 torch: .*torch==2\.10\.0\+cu128", res.output)
    assert "baseline frozen: torch==2.10.0+cu128" in res.output
    ours = pip_list(tmp_path / "data" / "venv")
    assert ours == pip_list(tmp_path / "uv-venv")
    assert {d["name"] for d in ours} >= {
        "torch",
        "nvidia-nccl-cu12",
        "trainer-utils",
        "einops-like",
    }

    again = run_envbuild(
        "provision", "--lock", lock, "--extra", "cu128", "--root", tmp_path / "data", "--json"
    )
    assert again.rc == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["ran"] == [] and doc["skipped"] == ["torch", "rest"]
    receipt = json.loads(Path(doc["receipt"]).read_text())
    source = receipt["payload"]["lock"]
    assert source["lock_file"] == str(lock) and source["environment"] == "linux x86_64, extra cu128"

    assert source["lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_torch_sdist_is_built_against_the_installed_torch(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """The flash-attn-like sdist goes last, built without isolation against the torch of stage 1
    (its build saw 2.10.0+cu128); the result equals uv's own two-phase sync of the same lock."""
    lock = uv_sdist_lock(tmp_path, gate_index)
    doc = lock_json(run_envbuild, lock)
    assert stages_of(doc)["builds"] == ["flash-attn"]
    assert [s["name"] for s in doc["stages"]] == ["torch", "rest", "builds"]
    theirs = tmp_path / "uv-venv"
    uv_sync(lock, theirs, tmp_path / "home", "--no-install-package", "flash-attn")
    uv_sync(lock, theirs, tmp_path / "home")
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    ours = tmp_path / "data" / "venv"
    assert pip_list(ours) == pip_list(theirs)
    built = Venv(ours, home=tmp_path / "home")
    assert json.loads(built.read("flash_attn/_build_env.json")) == {"torch": "2.10.0+cu128"}


def uv_git_lock(tmp: Path, idx: GateIndex) -> Path:
    """uv.lock of torch and the flash-attn-like package pinned to a commit of a local git repository
    (``git+file://``), named in ``no-build-isolation-package`` (NeMo-RL pins mamba-ssm and
    causal-conv1d this way)."""
    import tarfile

    sdist = build_sdist(
        tmp / "git-sdist", "flash-attn", "2.8.3", requires=["torch", "einops-like"], probe=["torch"]
    )
    repo = tmp / "flash-attn-repo"
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "git-src", filter="data")
    [top] = (tmp / "git-src").iterdir()
    top.rename(repo)
    env = {
        **installer_env(tmp / "home"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "flash-attn-like"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env, capture_output=True)
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"],
        check=True,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = ["torch==2.10.0", "trainer-utils==1.0", f"flash-attn @ git+{repo.as_uri()}@{commit}"]
    return torch_project_lock(
        tmp, idx, "uv-git", deps, 'no-build-isolation-package = ["flash-attn"]'
    )


@pytest.mark.slow
def test_a_git_pin_that_builds_against_torch_goes_through_the_build_cache(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A git pin named in no-build-isolation-package is built in the builds stage against the torch
    of stage 1 (with isolation its build would find no torch), once per key: the second root
    compiles nothing.
    """
    compiles = tmp_path / "compiles.log"
    lock = uv_git_lock(tmp_path, gate_index)
    doc = lock_json(run_envbuild, lock)
    assert stages_of(doc)["builds"] == ["flash-attn"], doc
    env = {"TINY_BACKEND_BUILDS": str(compiles)}
    for root in ("one", "two"):
        res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / root, env=env)
        assert res.rc == 0, res.output
        venv = Venv(tmp_path / root / "venv", home=tmp_path / "home")
        assert json.loads(venv.read("flash_attn/_build_env.json")) == {"torch": "2.10.0+cu128"}
    # the second root took the cached wheel
    assert compiles.read_text().splitlines() == ["flash-attn 2.8.3"]
    assert "from the build cache (no compile)" in res.output


# make test-thorough: builds a C extension twice; the build-cache key tests stay
@pytest.mark.thorough
@pytest.mark.slow
def test_built_wheels_are_cached_by_key_and_carried_in_the_wheelhouse(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """The builds stage builds the sdist once per key into the wheelhouse's build cache: a provision
    into a second root from the same wheelhouse compiles nothing (the sdist's build backend never
    runs) and installs the identical wheel, though pip installed torch there (another RECORD: the
    key holds torch's payload digest); the lock of another torch rebuilds and names the key part
    that differs. ``plan --lock`` says which it will be."""
    compiles = tmp_path / "compiles.log"  # the sdist's backend appends a line per build_wheel
    wheelhouse = tmp_path / "wheelhouse"

    def offline(command: str, lock: Path, *args: str | Path) -> EnvbuildResult:
        res = run_envbuild(
            command,
            "--lock",
            lock,
            "--offline",
            "--wheelhouse",
            wheelhouse,
            *args,
            env={"TINY_BACKEND_BUILDS": str(compiles)},
        )
        assert res.rc == 0, res.output
        return res

    def build_note(lock: Path, *args: str | Path) -> str:
        return str(
            json.loads(offline("plan", lock, "--json", *args).stdout)["builds"]["flash-attn"]
        )

    def built(root: Path) -> Path:
        # the copy the builds stage installed
        [wheel] = (root / ".envbuild" / "builds").glob("*.whl")
        return wheel

    def compiled() -> list[str]:
        return compiles.read_text().splitlines() if compiles.exists() else []

    lock = uv_sdist_lock(tmp_path, gate_index)
    assert run_envbuild("wheelhouse", "mirror", "--lock", lock, "--out", wheelhouse).rc == 0
    assert "compiles from the sdist" in build_note(lock)
    offline("provision", lock, "--root", tmp_path / "one")
    assert compiled() == ["flash-attn 2.8.3"]
    cached = build_note(lock)
    assert cached.startswith(
        f"built wheel in cache: {wheelhouse / 'builds' / 'wheels'}"
    ) and cached.endswith(built(tmp_path / "one").name)
    # the full key, from the venv's torch there
    assert build_note(lock, "--root", tmp_path / "one") == cached

    second = offline("provision", lock, "--root", tmp_path / "two", "--backend", "pip")
    assert compiled() == ["flash-attn 2.8.3"], second.output  # no compile: the backend did not run
    assert "from the build cache (no compile)" in second.output
    one, two = built(tmp_path / "one"), built(tmp_path / "two")
    assert (
        one.name == two.name
        and hashlib.sha256(one.read_bytes()).digest() == hashlib.sha256(two.read_bytes()).digest()
    )
    venv = Venv(tmp_path / "two" / "venv", home=tmp_path / "home")
    record = "torch-2.10.0+cu128.dist-info/RECORD"
    assert venv.read(record) != Venv(tmp_path / "one" / "venv", home=tmp_path / "home").read(record)
    seeded = {"pip", "setuptools", "wheel"}  # the pip backend's venv has its installer
    assert [d for d in pip_list(tmp_path / "two" / "venv") if d["name"] not in seeded] == pip_list(
        tmp_path / "one" / "venv"
    )
    # the lock's version
    assert {"name": "flash-attn", "version": "2.8.3"} in pip_list(tmp_path / "two" / "venv")
    assert json.loads(venv.read("flash_attn/_build_env.json")) == {"torch": "2.10.0+cu128"}
    provenance = json.loads(venv.read("flash_attn-2.8.3.dist-info/envbuild_provenance.json"))
    assert (
        provenance["torch"]["version"] == "2.10.0+cu128"
        and provenance["build"]["not_reused"] is None
    )

    # the same sdist (sha256), another torch
    other = uv_sdist_lock(tmp_path, gate_index, torch="2.9.1")
    assert run_envbuild("wheelhouse", "mirror", "--lock", other, "--out", wheelhouse).rc == 0
    assert "compiles from the sdist" in build_note(other)
    third = offline("provision", other, "--root", tmp_path / "three")
    assert compiled() == ["flash-attn 2.8.3", "flash-attn 2.8.3"]
    why = f"{one.name} was built for another key (torch.payload_sha256"
    assert why in third.output and "torch.version 2.10.0+cu128, now 2.9.1+cu128" in third.output
    venv = Venv(tmp_path / "three" / "venv", home=tmp_path / "home")
    assert json.loads(venv.read("flash_attn/_build_env.json")) == {"torch": "2.9.1+cu128"}
    provenance = json.loads(venv.read("flash_attn-2.8.3.dist-info/envbuild_provenance.json"))
    assert "torch.version 2.10.0+cu128, now 2.9.1+cu128" in provenance["build"]["not_reused"]


@pytest.mark.slow
def test_the_project_is_installed_editable_last(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_project_lock(tmp_path, gate_index)
    theirs = tmp_path / "uv-venv"
    uv_sync(lock, theirs, tmp_path / "home")
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    assert re.search(r"step 3/3 project: trainer", res.output)
    listed = pip_list(tmp_path / "data" / "venv")
    assert listed == pip_list(theirs)
    assert {
        "name": "trainer",
        "version": "0.1.0",
        "editable_project_location": str(lock.parent),
    } in listed
    res = run_envbuild("plan", "--lock", lock, "--no-project", "--json")
    assert res.rc == 0 and "project" not in stages_of(json.loads(res.stdout))


@pytest.mark.slow
def test_provision_pylock_equals_the_lockers_install(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = pip_lock(tmp_path, gate_index)
    theirs = tmp_path / "uv-venv"
    env = installer_env(tmp_path / "home")
    subprocess.run(
        [uv_bin(), "venv", "-q", "--python", sys.executable, str(theirs)], env=env, check=True
    )
    subprocess.run(
        [
            uv_bin(),
            "pip",
            "sync",
            "--no-cache",
            "--python",
            str(theirs / "bin" / "python"),
            str(lock),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    assert pip_list(tmp_path / "data" / "venv") == pip_list(theirs)


@pytest.mark.slow
def test_a_venv_with_another_torch_is_refused_and_the_locks_torch_is_adopted(
    gate_index: GateIndex,
    tmp_path: Path,
    make_venv: Callable[..., Venv],
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index)
    wrong = make_venv("wrong")
    wrong.pip(
        "install",
        "--no-deps",
        "--index-url",
        gate_index.url("cu128"),
        "torch==2.9.1+cu128",
        check=True,
    )
    before = (wrong.dists()["torch"].record).read_bytes()
    res = run_envbuild(
        "provision", "--lock", lock, "--venv", wrong.path, "--root", tmp_path / "data"
    )
    assert res.rc == 6, res.output
    assert "has torch 2.9.1+cu128, the lock installs torch 2.10.0+cu128" in res.stderr
    assert (
        wrong.version("torch") == "2.9.1+cu128"
        and wrong.dists()["torch"].record.read_bytes() == before
    )
    assert not (tmp_path / "data").exists()

    base = make_venv("base")  # an image's environment that already holds the lock's torch
    base.pip(
        "install",
        "--no-deps",
        "--index-url",
        gate_index.url("cu128"),
        "torch==2.10.0+cu128",
        check=True,
    )
    base.pip(
        "install",
        "--no-deps",
        "--index-url",
        gate_index.url("pypi"),
        "trainer-utils==1.0",
        check=True,
    )
    record = base.dists()["torch"].record.read_bytes()
    kept = base.dists()["trainer-utils"].record.read_bytes()
    res = run_envbuild("plan", "--lock", lock, "--venv", base.path, "--json")
    assert res.rc == 0, res.output
    left = {x["name"]: x["why"] for x in json.loads(res.stdout)["left_out"]}
    assert (
        left["torch"].startswith("adopted")
        and "already in the adopted environment" in left["trainer-utils"]
    )
    # in words, what the environment already holds is said once (a GPU image's 50 in one line)
    text = run_envbuild("plan", "--lock", lock, "--venv", base.path)
    assert text.rc == 0, text.output
    assert text.output.count("already in the adopted environment") == 1, text.output
    assert (
        "not installed: 1 package(s) already in the adopted environment at the locked version"
        in text.output
        and "(1 other package(s))" in text.output
    )
    res = run_envbuild(
        "provision", "--lock", lock, "--venv", base.path, "--root", tmp_path / "data", "--json"
    )
    assert res.rc == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["adopted_torch"] == "2.10.0+cu128"
    assert "torch" not in stages_of(doc)["torch"]  # kept, not downloaded
    # as uv sync keeps it
    assert "trainer-utils" not in [n for names in stages_of(doc).values() for n in names]
    assert base.dists()["torch"].record.read_bytes() == record
    assert base.dists()["trainer-utils"].record.read_bytes() == kept
    assert {"nvidia-nccl-cu12", "trainer-utils", "filelock-like"} <= set(base.dists())
    # the re-run finds what the first run installed there, and is the same finished environment
    res = run_envbuild(
        "provision", "--lock", lock, "--venv", base.path, "--root", tmp_path / "data"
    )
    assert res.rc == 0, res.output
    assert "nothing to do" in res.output and "==> step" not in res.output
    # an image whose torch was changed after it was installed: refused before anything is made
    tampered = make_venv("tampered")
    tampered.pip(
        "install",
        "--no-deps",
        "--index-url",
        gate_index.url("cu128"),
        "torch==2.10.0+cu128",
        check=True,
    )
    site = tampered.site_packages
    victim = next(p for p in (site / "torch").rglob("*.py"))
    victim.write_text(victim.read_text() + "\n# patched in place\n")
    res = run_envbuild(
        "provision", "--lock", lock, "--venv", tampered.path, "--root", tmp_path / "tampered-root"
    )
    assert res.rc == 6 and "files differ from its RECORD" in res.stderr, res.output
    assert not (tmp_path / "tampered-root").exists()
    # --python whose environment has the lock's torch: a venv of its own, and the way to keep that
    # torch said
    res = run_envbuild(
        "provision", "--lock", lock, "--python", base.python, "--root", tmp_path / "own"
    )
    assert res.rc == 0, res.output
    assert (
        "already has the lock's torch 2.10.0+cu128" in res.stderr
        and f"--venv {base.path}" in res.stderr
    )


@pytest.mark.slow
def test_hash_mismatch_and_unreachable_hosts(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index)
    text = lock.read_text()
    m = re.search(r'torch-2\.10\.0\+cu128-py3-none-any\.whl", hash = "sha256:([0-9a-f]{64})"', text)
    assert m is not None
    lock.write_text(text.replace(m.group(1), "0" * 64))
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 5, res.output
    assert "hash does not match the lock" in res.stderr and "Traceback" not in res.output
    # the same with the walk warm-up (bytecode on, two cores: torch's line is prepared in a scratch
    # install of its own beside its runtime's): that one fails, and stops the run as soon as it does
    res = run_envbuild(
        "provision",
        "--lock",
        lock,
        "--root",
        tmp_path / "walk",
        env={"PYTHONDONTWRITEBYTECODE": "", "ENVBUILD_IMPORT_WARMUP": "walk"},
    )
    assert res.rc == 5, res.output
    said = res.stderr.split("error: ", 1)[1]
    assert said.startswith("preparing step 1 ('torch')") and "hash does not match" in said, said
    assert "01-torch-head.prefetch.log" in said and not (tmp_path / "walk" / "venv").exists()

    with UnreachablePort() as dead:
        port = re.search(r"127\.0\.0\.1:(\d+)", text)
        assert port is not None
        lock.write_text(text.replace(f"127.0.0.1:{port.group(1)}", f"127.0.0.1:{dead.port}"))
        res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data2")
    assert res.rc == 3, res.output
    assert "the lock's file hosts do not answer" in res.stderr and not (tmp_path / "data2").exists()


@pytest.mark.slow
def test_a_wheel_for_a_newer_glibc_is_planned_and_refused_before_anything_is_made(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A lock whose only wheel of a package is manylinux_2_40 (NeMo-RL locks openshell's
    manylinux_2_39 wheels): plan --lock plans it for the target host and says so; provision here
    refuses it, exit 2.
    """
    from envbuild.projectlock.stages import host_glibc

    have = host_glibc()
    if have is None or have >= 40:
        pytest.skip("needs a glibc host older than 2.40")
    from support.wheels import build_wheel

    wheel = build_wheel(
        tmp_path / "newer",
        "newer-glibc-lib",
        "1.0",
        python_tag="py3",
        abi_tag="none",
        platform_tag="manylinux_2_40_x86_64",
    )
    gate_index.server.add_repo("newer", wheel.parent)
    deps = ["torch==2.10.0", f"newer-glibc-lib @ {gate_index.server.file_url('newer', wheel.name)}"]
    lock = torch_project_lock(
        tmp_path,
        gate_index,
        "uv-newer",
        deps,
        "environments = [\"sys_platform == 'linux' and platform_machine == 'x86_64'\"]",
    )
    doc = lock_json(run_envbuild, lock)
    [placed] = [p for s in doc["stages"] for p in s["packages"] if p["name"] == "newer-glibc-lib"]
    assert f"needs glibc 2.40 (this host has 2.{have})" in placed["why"]
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 2, res.output
    assert (
        "have only wheels for a newer glibc than this host's" in res.stderr
        and wheel.name in res.stderr
    )
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_an_interrupted_lock_provision_resumes_where_it_stopped(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """SIGTERM (a job scheduler's stop, Ctrl-C's sibling) while the rest stage downloads: exit 130,
    while every stage is being prepared, so nothing is installed and no venv is made; the same
    command again installs both stages (torch's files from the cache) and equals uv sync.
    """
    import signal
    import time

    lock = uv_platform_lock(tmp_path, gate_index)
    gate_index.server.clear_requests()  # uv lock read trainer-utils' wheel too
    gate_index.server.fail("*trainer_utils-*", "stall", times=1, seconds=60)
    try:
        argv = [
            sys.executable,
            "-m",
            "envbuild",
            "provision",
            "--lock",
            str(lock),
            "--root",
            str(tmp_path / "data"),
        ]
        proc = subprocess.Popen(
            argv,
            env=installer_env(tmp_path / "home"),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            if any("trainer_utils-" in r.path for r in gate_index.server.requested()):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.1)
        _, stderr = proc.communicate(timeout=120)
    finally:
        gate_index.server.clear_faults()
    assert proc.returncode == 130, stderr
    assert "run the same command again to resume" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "data" / "venv").exists()

    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data", "--json")
    assert res.rc == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["skipped"] == [] and doc["ran"] == ["torch", "rest"], doc
    uv_sync(lock, tmp_path / "uv-venv", tmp_path / "home")
    assert pip_list(tmp_path / "data" / "venv") == pip_list(tmp_path / "uv-venv")


def test_lock_options_without_a_lock_are_refused(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """--extra, --rebuild-mismatched, ... choose an environment of a lock file: without --lock FILE
    they would be ignored silently, so they are refused (exit 2) before anything is made."""
    for argv in (
        ("plan", "--profile", "cpu", "--extra", "cu128"),
        ("provision", "--profile", "cpu", "--rebuild-mismatched", "--root", tmp_path / "data"),
        ("docker", "--profile", "cpu", "--no-project", "-o", tmp_path / "Dockerfile"),
        ("preflight", "--profile", "cpu", "--group", "dev"),
        (
            "wheelhouse",
            "mirror",
            "--profile",
            "cpu",
            "--environment",
            "linux-x86_64",
            "--out",
            tmp_path / "wh",
        ),
        ("wheelhouse", "mirror", "--have", tmp_path / "home", "--out", tmp_path / "wh"),
    ):
        res = run_envbuild(*argv)
        assert res.rc == 2 and "goes with --lock FILE" in res.stderr, (argv, res.output)
    assert not any(p.name != "home" for p in tmp_path.iterdir())  # the runner's $HOME only


@pytest.mark.slow
def test_a_kept_package_is_looked_at_by_size(
    gate_index: GateIndex, make_venv: Callable[..., Venv]
) -> None:
    """Adoption keeps a base image's packages whose RECORD files are all there at their size (a
    quick look over thousands of files: ``hash_limit=0``); torch's own files are hashed (the
    tampered image of
    ``test_a_venv_with_another_torch_is_refused_and_the_locks_torch_is_adopted``)."""
    from envbuild import guard

    def damaged(name: str, change: Callable[[bytes], bytes]) -> tuple[guard.Dist, Path, str]:
        venv = make_venv(name)
        venv.pip(
            "install",
            "--no-deps",
            "--index-url",
            gate_index.url("pypi"),
            "trainer-utils==1.0",
            check=True,
        )
        site = guard.site_packages(venv.path)
        dist = guard.scan(site)["trainer-utils"]
        module = next(p for p in dist.files() if p.endswith(".py") and "dist-info" not in p)
        (site / module).write_bytes(change((site / module).read_bytes()))
        return dist, site, module

    # same size, other bytes
    dist, site, module = damaged("flipped", lambda b: bytes([b[0] ^ 1]) + b[1:])
    assert guard.files_differ(dist, site, hash_limit=0) == [] and guard.files_differ(
        dist, site
    ) == [module]
    dist, site, module = damaged("grown", lambda b: b + b"\n")
    assert guard.files_differ(dist, site, hash_limit=0) == [module]
