"""envbuild lock: real pip-compile against the local HTTP index, then installs from what it
wrote."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from lockhelpers import lock_env, manifest, resync, step_file
from support.fixtures import (
    NIGHTLY_TORCH,
    PYTORCH_TRITON,
    EnvbuildResult,
    ScenarioIndex,
    ScenarioWheels,
    Venv,
    installer_env,
)
from support.index import UnreachablePort

from envbuild.spec import load_spec
from envbuild.stacklock.model import parse_requirements_text
from envbuild.stacklock.serve import step_digests

STEPS = [
    {"name": "helpers", "packages": ["fla-core-like==0.4.2"]},
    {"name": "fla", "packages": ["needs-fla-core==1.0"], "no_deps": True},
]


@pytest.fixture
def locked(stack_locks: Callable[..., Path], tmp_path: Path) -> Path:
    """``write_stack(STEPS)``, locked (made once per worker, copied: ``stack_locks``)."""
    return stack_locks(STEPS, tmp_path)


def test_lock_writes_hash_pinned_files_and_manifest(
    locked: Path, scenario_index: ScenarioIndex
) -> None:
    folder = locked.parent
    data = manifest(folder)
    assert [s["name"] for s in data["steps"]] == ["torch", "helpers", "fla"]
    assert data["spec_digest"].startswith("sha256:") and data["tools"]["pip-tools"]
    # one digest per step (python + [abi] + the steps up to it): a prefix of the spec is checked by
    # them
    assert [s["step_digest"] for s in data["steps"]] == step_digests(load_spec(locked, {}))
    torch_reqs = parse_requirements_text(step_file(folder, "torch").read_text(), "torch")
    assert {r.name: r.version for r in torch_reqs} == {
        "torch": NIGHTLY_TORCH,
        "pytorch-triton": PYTORCH_TRITON,
        "nvidia-nccl-cu13": "2.29.7",
    }
    assert all(r.hashes for r in torch_reqs)
    assert sorted(data["abi"]["protected"]) == ["nvidia-nccl-cu13", "pytorch-triton", "torch"]
    # a guarded step never carries torch: resolved against it, and left out
    helpers = {
        r.name: r.version
        for r in parse_requirements_text(step_file(folder, "helpers").read_text(), "h")
    }
    assert helpers == {"fla-core-like": "0.4.2", "einops-like": "0.8.1"}
    # no_deps: exactly the named package, nothing transitive
    fla = parse_requirements_text(step_file(folder, "fla").read_text(), "fla")
    assert [(r.name, r.version) for r in fla] == [("needs-fla-core", "1.0")]
    entry = data["steps"][2]["packages"][0]
    wheel = scenario_index.wheels.wheel("needs-fla-core", "1.0")
    assert entry["artifacts"][0]["filename"] == wheel.name
    assert entry["artifacts"][0]["url"].startswith(scenario_index.server.url)
    assert entry["requires_dist"] == ["fla-core-like==0.5.0", "einops-like"]


def test_lock_files_install_by_hand_with_require_hashes(locked: Path, nightly_venv: Venv) -> None:
    folder = locked.parent
    data = manifest(folder)
    src = data["steps"][1]["sources"]
    out = nightly_venv.pip(
        "install",
        "--require-hashes",
        "--index-url",
        src["index_url"],
        "-r",
        step_file(folder, "helpers"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    out = nightly_venv.pip(
        "install",
        "--require-hashes",
        "--no-deps",
        "--index-url",
        src["index_url"],
        "-r",
        step_file(folder, "fla"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert nightly_venv.version("torch") == NIGHTLY_TORCH
    assert nightly_venv.version("needs-fla-core") == "1.0"


def test_provision_installs_from_the_lock(
    locked: Path, provision: Callable[..., EnvbuildResult], provisioned_venv: Venv
) -> None:
    r = provision(locked)
    assert r.rc == 0, r.output
    assert provisioned_venv.version("torch") == NIGHTLY_TORCH
    assert provisioned_venv.version("fla-core-like") == "0.4.2"
    assert "--require-hashes" in (locked.parent / "data" / "logs" / "02-helpers.log").read_text()


def test_provision_refuses_a_stale_lock(
    locked: Path, provision: Callable[..., EnvbuildResult]
) -> None:
    text = locked.read_text().replace(
        '"needs-fla-core==1.0"', '"needs-fla-core==1.0", "einops-like==0.8.1"'
    )
    locked.write_text(text)
    r = provision(locked)
    assert r.rc == 8, r.output
    assert "the lock is stale" in r.stderr and "envbuild lock" in r.stderr
    assert "step 'fla' changed" in r.stderr  # the step is named
    assert "Traceback" not in r.output


@pytest.mark.parametrize(
    "damage, message",
    [
        ("hash", "malformed"),
        ("missing", "is missing"),
        ("option", "an option line without a requirement"),
    ],
)
def test_provision_refuses_a_broken_lock(
    locked: Path, provision: Callable[..., EnvbuildResult], damage: str, message: str
) -> None:
    folder = locked.parent
    path = step_file(folder, "helpers")
    if damage == "missing":
        path.unlink()
    elif damage == "hash":
        path.write_text(path.read_text().replace("--hash=sha256:", "--hash=sha256:zz", 1))
        resync(folder)
    else:
        path.write_text(path.read_text() + "--index-url http://example.invalid/simple\n")
    r = provision(locked)
    assert r.rc == 8, r.output
    assert "Traceback" not in r.output
    assert message in r.stderr and "02-helpers.txt" in r.stderr


def test_pylock_export_installs_with_uv(
    locked: Path, make_venv: Callable[..., Venv], tmp_path: Path
) -> None:
    from uv import find_uv_bin

    pylock = locked.parent / "pylock.toml"
    assert pylock.is_file()
    venv = make_venv("uv-target")
    out = subprocess.run(
        [find_uv_bin(), "pip", "install", "--python", str(venv.python), "-r", str(pylock)],
        capture_output=True,
        text=True,
        env=installer_env(tmp_path / "home"),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert venv.version("torch") == NIGHTLY_TORCH
    assert venv.version("pytorch-triton") == PYTORCH_TRITON
    assert venv.version("needs-fla-core") == "1.0"


def test_lock_offline_from_a_find_links_folder(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    scenario_wheels: ScenarioWheels,
    tmp_path: Path,
) -> None:
    house = tmp_path / "house"
    house.mkdir()
    for folder in (scenario_wheels.nightly, scenario_wheels.pypi):
        for w in folder.iterdir():
            if not (house / w.name).exists():
                (house / w.name).symlink_to(w)
    stack = write_stack(STEPS)
    r = run_envbuild("lock", "--stack", stack, "--wheelhouse", house, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    torch = manifest(stack.parent)["steps"][0]["packages"]
    assert {p["name"] for p in torch} >= {"torch", "pytorch-triton"}
    assert all(a["url"].startswith("file://") for p in torch for a in p["artifacts"])


def test_lock_fails_fast_on_an_unreachable_index(
    write_stack: Callable[..., Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    with UnreachablePort() as dead:
        stack = write_stack(
            [
                {
                    "name": "x",
                    "packages": ["einops-like==0.8.1"],
                    "index_url": "${ENVBUILD_TORCH_INDEX-" + dead.url + "/simple}",
                }
            ]
        )
        r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 3, r.output
    # fast: the index's own refusal is the verdict, before anything is resolved (no deadline)
    assert f"{dead.url}/simple (connection refused)" in r.stderr, r.stderr
    assert "do not answer" in r.stderr and "Traceback" not in r.output
    # the way out is in the error: the variable the index came from, a wheelhouse, --skip-step
    assert "`ENVBUILD_TORCH_INDEX= envbuild lock ...`" in r.stderr, r.stderr
    assert "--wheelhouse DIR" in r.stderr and "`--skip-step x`" in r.stderr, r.stderr


def test_lock_to_an_unwritable_folder_fails_before_resolving(
    write_stack: Callable[..., Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack = write_stack([{"name": "x", "packages": ["einops-like==0.8.1"]}])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = run_envbuild("lock", "--stack", stack, "--output", blocker / "lock", env=lock_env(tmp_path))
    assert r.rc == 2, r.output
    assert (
        f"cannot write the lock to {blocker / 'lock'}" in r.stderr and "Traceback" not in r.output
    )


def _git_repo(tmp_path: Path, wheel_factory: Callable[..., Path]) -> Path:
    repo = tmp_path / "gitpkg"
    (repo / "gitpkg").mkdir(parents=True)
    (repo / "gitpkg" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text('[project]\nname = "gitpkg"\nversion = "0.1"\n')
    env = {
        **installer_env(tmp_path / "home"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for cmd in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    return repo


def test_git_head_resolves_to_a_commit(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    wheel_factory: Callable[..., Path],
) -> None:
    repo = _git_repo(tmp_path, wheel_factory)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    stack = write_stack(
        [{"name": "g", "packages": [f"gitpkg @ git+file://{repo}@HEAD"], "no_deps": True}]
    )
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    text = step_file(stack.parent, "g").read_text()
    assert f"gitpkg @ git+file://{repo}@{sha}" in text
    assert manifest(stack.parent)["steps"][1]["packages"][0]["vcs"]["commit"] == sha


@pytest.mark.parametrize(
    "ref, rc, message", [("no-such-branch", 2, "does not exist"), (None, 3, "cannot read")]
)
def test_git_ref_that_does_not_resolve(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    wheel_factory: Callable[..., Path],
    ref: str | None,
    rc: int,
    message: str,
) -> None:
    repo = _git_repo(tmp_path, wheel_factory) if ref else tmp_path / "nowhere"
    url = f"git+file://{repo}@{ref or 'HEAD'}"
    stack = write_stack([{"name": "g", "packages": [f"gitpkg @ {url}"], "no_deps": True}])
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == rc, r.output
    assert message in r.stderr and "Traceback" not in r.output


def test_committed_cpu_lock_matches_its_spec() -> None:
    from envbuild.spec import resolve_spec
    from envbuild.stacklock.serve import locked_requirements

    files = locked_requirements(resolve_spec("cpu", None, {}))
    assert list(files) == ["bootstrap", "torch", "fla", "torch-users", "rest"]
    torch = parse_requirements_text(files["torch"].read_text(), "torch")
    assert any(r.name == "torch" and r.version == "2.13.0+cpu" and r.hashes for r in torch)
    assert sys.version_info >= (3, 10)
