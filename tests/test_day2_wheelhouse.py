"""Day 2 of a wheelhouse (issue 24): mirror the target only, prove the locked artifacts are still
there (``check-lock --online``), rebuild what was built against a torch the lock moved away from.

Real pip-compile, the real CLI, the local HTTP index (files added, replaced and deleted under it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lockhelpers import lock_env
from support.fixtures import (
    NIGHTLY_CUDA,
    NIGHTLY_NCCL,
    NIGHTLY_TORCH,
    PY_MAJOR_MINOR,
    PYTORCH_TRITON,
    EnvbuildResult,
    ScenarioIndex,
    Venv,
    stack_toml,
)
from support.wheels import build_sdist, build_wheel, dist_info_name

from envbuild.guard.buildrecord import PROVENANCE_FILE

HERE = f"cp{PY_MAJOR_MINOR.replace('.', '')}"  # the Python the tests run on: the stack's
OTHER_PY = "cp312" if HERE != "cp312" else "cp313"  # a wheel for another Python, left out
OTHERS = ("macosx_11_0_arm64", "win_amd64", "musllinux_1_2_x86_64", "manylinux_2_28_aarch64")


def _write_stack(tmp_path: Path, index: ScenarioIndex, steps: list[dict[str, object]]) -> Path:
    """A stack whose every step (the baseline's too) reads this test's own index."""
    path = tmp_path / "stack.toml"
    path.write_text(stack_toml(steps, index=index))
    return path


def _platform_set(folder: Path) -> None:
    """``binpkg``: a wheel for the target, wheels for four other platforms, one for another Python,
    an sdist; ``purepkg``: a pure wheel and an sdist; ``srconly``: an sdist only."""
    build_wheel(
        folder, "binpkg", "1.0", python_tag=HERE, abi_tag=HERE, platform_tag="manylinux_2_17_x86_64"
    )
    for plat in OTHERS:
        build_wheel(folder, "binpkg", "1.0", python_tag=HERE, abi_tag=HERE, platform_tag=plat)
    build_wheel(
        folder,
        "binpkg",
        "1.0",
        python_tag=OTHER_PY,
        abi_tag=OTHER_PY,
        platform_tag="manylinux_2_17_x86_64",
    )
    build_sdist(folder, "binpkg", "1.0")
    build_wheel(folder, "purepkg", "1.0")
    build_sdist(folder, "purepkg", "1.0")
    build_sdist(folder, "srconly", "1.0")


def test_mirror_takes_only_what_installs_on_the_target(
    run_envbuild: Callable[..., EnvbuildResult],
    private_scenario_index: ScenarioIndex,
    tmp_path: Path,
) -> None:
    index = private_scenario_index
    _platform_set(index.wheels.pypi)
    stack = _write_stack(
        tmp_path,
        index,
        [
            {
                "name": "app",
                "packages": ["binpkg==1.0", "purepkg==1.0", "srconly==1.0"],
                "no_deps": True,
            }
        ],
    )
    env = lock_env(tmp_path)
    r = run_envbuild("lock", "--stack", stack, env=env)
    assert r.rc == 0, r.stderr
    r = run_envbuild(
        "wheelhouse",
        "mirror",
        "--lock",
        stack.parent,
        "--out",
        tmp_path / "target",
        "--json",
        env=env,
    )
    assert r.rc == 0, r.output
    out = json.loads(r.stdout)
    mirrored = sorted(
        p.name for p in (tmp_path / "target").iterdir() if p.suffix in (".whl", ".gz")
    )
    assert [m for m in mirrored if m.startswith(("binpkg", "purepkg", "srconly"))] == [
        f"binpkg-1.0-{HERE}-{HERE}-manylinux_2_17_x86_64.whl",
        "purepkg-1.0-py3-none-any.whl",
        "srconly-1.0.tar.gz",
    ]
    left = out["left_out"]
    assert (
        len(left) == len(OTHERS) + 3
        and "binpkg-1.0.tar.gz" in left
        and "purepkg-1.0.tar.gz" in left
    )
    assert out["target"] == {"python": PY_MAJOR_MINOR, "platform": "manylinux_2_28_x86_64"}
    assert (
        out["bytes_saved"] == sum((index.wheels.pypi / f).stat().st_size for f in left)
        and out["bytes_unknown"] == 0
    )
    r = run_envbuild(
        "wheelhouse",
        "mirror",
        "--lock",
        stack.parent,
        "--out",
        tmp_path / "all",
        "--all-platforms",
        "--json",
        env=env,
    )
    assert r.rc == 0, r.output
    assert json.loads(r.stdout)["left_out"] == [] and all(
        (tmp_path / "all" / f).is_file() for f in left
    )


def test_check_lock_online_names_what_left_the_index(
    run_envbuild: Callable[..., EnvbuildResult],
    private_scenario_index: ScenarioIndex,
    tmp_path: Path,
) -> None:
    index = private_scenario_index
    stack = _write_stack(
        tmp_path,
        index,
        [
            {"name": "helpers", "packages": ["einops-like==0.8.1"]},
            {"name": "fla", "packages": ["fla-core-like==0.4.2"], "no_deps": True},
        ],
    )
    env = lock_env(tmp_path)
    assert run_envbuild("lock", "--stack", stack, env=env).rc == 0
    house = tmp_path / "wheelhouse"
    assert (
        run_envbuild("wheelhouse", "mirror", "--lock", stack.parent, "--out", house, env=env).rc
        == 0
    )
    r = run_envbuild(
        "check-lock", "--stack", stack, "--online", "--wheelhouse", house, "--json", env=env
    )
    assert r.rc == 0, r.output

    # the nightly left its index; mirrored
    index.wheels.wheel("torch", NIGHTLY_TORCH, "nightly").unlink()
    einops = index.wheels.wheel("einops-like", "0.8.1")
    einops.unlink()  # gone from the index, and from the wheelhouse
    (house / einops.name).unlink()
    fla = index.wheels.wheel("fla-core-like", "0.4.2")  # re-uploaded: same name, other bytes
    fla.unlink()
    build_wheel(fla.parent, "fla-core-like", "0.4.2", files={"fla/__init__.py": "# rebuilt\n"})
    r = run_envbuild(
        "check-lock", "--stack", stack, "--online", "--wheelhouse", house, "--json", env=env
    )
    assert r.rc == 8, r.output
    report = json.loads(r.stdout)["reports"][0]
    online = {
        (f["package"], f["rule"]) for f in report["findings"] if f["rule"].startswith("artifact-")
    }
    assert online == {("einops-like", "artifact-gone"), ("fla-core-like", "artifact-changed")}
    gone = next(f for f in report["findings"] if f["rule"] == "artifact-gone")
    assert "the wheelhouse does not have it" in gone["reason"]
    assert any(
        f"torch-{NIGHTLY_TORCH}" in n and "the wheelhouse has it" in n for n in report["notices"]
    )
    r = run_envbuild("check-lock", "--online", stack, env=env)
    assert r.rc == 2 and "check envbuild's own locks" in r.stderr, r.output


def _stand_in_torch(folder: Path, version: str) -> Path:
    return build_wheel(
        folder,
        "torch",
        version,
        requires=[f"pytorch-triton=={PYTORCH_TRITON}", f"nvidia-nccl-cu13=={NIGHTLY_NCCL}"],
        files={
            "torch/__init__.py": "from .version import __version__ as __version__\n",
            "torch/version.py": f"__version__ = {version!r}\ncuda = {NIGHTLY_CUDA!r}\n",
        },
    )


def test_torch_move_lists_the_wheels_to_rebuild(
    run_envbuild: Callable[..., EnvbuildResult],
    private_scenario_index: ScenarioIndex,
    nightly_venv: Venv,
    tmp_path: Path,
) -> None:
    newer = NIGHTLY_TORCH.replace("20260405", "20260410")
    _stand_in_torch(private_scenario_index.wheels.nightly, newer)
    label = "cu132torch" + NIGHTLY_TORCH.split("+")[0]
    provenance = {
        "schema": 1,
        "name": "flash-like",
        "version": f"1.0+{label}",
        "torch": {"version": NIGHTLY_TORCH, "cuda": NIGHTLY_CUDA},
    }
    built = build_wheel(
        tmp_path / "wheelhouse",
        "flash-like",
        f"1.0+{label}",
        files={
            "flash_like/__init__.py": "",
            f"{dist_info_name('flash-like', f'1.0+{label}')}/{PROVENANCE_FILE}": json.dumps(
                provenance
            ),
        },
    )
    stack = _write_stack(
        tmp_path, private_scenario_index, [{"name": "helpers", "packages": ["einops-like==0.8.1"]}]
    )
    env = lock_env(tmp_path)
    assert run_envbuild("lock", "--stack", stack, env=env).rc == 0
    stack.write_text(stack.read_text().replace(NIGHTLY_TORCH, newer))
    r = run_envbuild("lock", "--stack", stack, "--json", env=env)
    assert r.rc == 0, r.output
    out = json.loads(r.stdout)
    assert out["torch"] == {"old": NIGHTLY_TORCH, "new": newer}
    assert [(w["wheel"], w["built_against"]) for w in out["rebuild"]] == [
        (str(Path("wheelhouse") / built.name), NIGHTLY_TORCH)
    ]
    torch = next(c for c in out["changes"] if c["package"] == "torch")
    assert (torch["old"], torch["new"], torch["reason"]) == (NIGHTLY_TORCH, newer, "spec changed")
    r = run_envbuild("lock", "--stack", stack, "--json", env=env)  # nothing moves twice
    assert json.loads(r.stdout)["up_to_date"] is True

    # a build against a venv that still has the old torch is refused: its wheels would be for that
    # torch
    spec = tmp_path / "flash-like.toml"
    spec.write_text(
        'schema = 1\nname = "flash-like"\nversion = "1.0"\n\n[source]\npath = "."\n\n'
        '[build]\nrequires = ["setuptools"]\n'
    )
    r = run_envbuild(
        "wheelhouse", "build", spec, "--venv", nightly_venv.path, "--stack", stack, env=env
    )
    assert r.rc == 9, r.output
    assert f"has torch {NIGHTLY_TORCH}, but the lock of 'scenario' pins torch {newer}" in r.stderr
