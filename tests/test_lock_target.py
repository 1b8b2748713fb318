"""Locks for a target that is not this machine: the stack's Python and ``[target]`` platform.

Real uv and pip-compile against the local HTTP index; the lock is then checked the way the
target host would use it, with ``pip install --dry-run --require-hashes --python-version
--platform --only-binary=:all:``. Also: ``[target]`` validation, and the CI gate that fails a
pull request changing the stack spec without its lock (a real git repository, ``--base``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import pytest
from lockhelpers import lock_env, manifest, step_file
from support.fixtures import (
    NIGHTLY_TORCH,
    PY_MAJOR_MINOR,
    EnvbuildResult,
    ScenarioIndex,
    installer_env,
    stack_toml,
)
from support.wheels import build_wheel

from envbuild.errors import ConfigError
from envbuild.spec import load_spec
from envbuild.stacklock.model import parse_requirements_text

OTHER_PY = "3.13" if PY_MAJOR_MINOR != "3.13" else "3.12"
OTHER_TAG = "cp" + OTHER_PY.replace(".", "")
HERE_TAG = "cp" + PY_MAJOR_MINOR.replace(".", "")


def _binary_wheels(folder: Path) -> None:
    """A project whose files and dependencies differ by Python and CPU, as numpy's and torch's
    do."""
    for tag in (HERE_TAG, OTHER_TAG):
        for plat in ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64"):
            build_wheel(
                folder,
                "binpkg",
                "1.0",
                python_tag=tag,
                abi_tag=tag,
                platform_tag=plat,
                requires=[
                    f'only-new ; python_version >= "{OTHER_PY}"',
                    f'only-old ; python_version < "{OTHER_PY}"',
                    'only-arm ; platform_machine == "aarch64"',
                ],
            )
    for name in ("only-new", "only-old", "only-arm"):
        build_wheel(folder, name, "1.0")


def _stack(tmp_path: Path, index: ScenarioIndex, python: str, target: str | None = None) -> Path:
    text = stack_toml([{"name": "app", "packages": ["binpkg==1.0"]}], index=index)
    text = text.replace(f'python = "{PY_MAJOR_MINOR}"', f'python = "{python}"')
    if target is not None:
        text = text.replace("\n[layout]", f'\n[target]\nplatform = "{target}"\n\n[layout]', 1)
    path = tmp_path / "stack.toml"
    path.write_text(text)
    return path


@pytest.fixture
def target_index(private_scenario_index: ScenarioIndex) -> ScenarioIndex:
    _binary_wheels(private_scenario_index.wheels.pypi)
    return private_scenario_index


def _names(folder: Path, step: str) -> dict[str, str | None]:
    return {
        r.name: r.version
        for r in parse_requirements_text(step_file(folder, step).read_text(), step)
    }


def test_lock_for_another_python_uses_uv_and_installs_on_the_target(
    target_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack = _stack(tmp_path, target_index, OTHER_PY)
    r = run_envbuild("-v", "lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    data = manifest(stack.parent)
    assert data["target"] == {
        "python": OTHER_PY,
        "platform": "manylinux_2_28_x86_64",
        "resolver": "uv",
    }
    assert data["tools"]["resolver"] == "uv" and data["tools"]["uv"]
    # resolved for the target's markers, not this interpreter's
    app = _names(stack.parent, "app")
    assert app == {"binpkg": "1.0", "only-new": "1.0"}, app
    # every file of the chosen version is hashed: the target host's pip may pick any of them
    binpkg = next(p for p in data["steps"][1]["packages"] if p["name"] == "binpkg")
    files = sorted(target_index.wheels.pypi.glob("binpkg-1.0-*.whl"))
    assert len(files) == 4 and len(binpkg["hashes"]) == 4
    assert sorted(a["filename"] for a in binpkg["artifacts"]) == [f.name for f in files]
    # the baseline is locked as on the nightly index and never repeated later
    assert _names(stack.parent, "torch")["torch"] == NIGHTLY_TORCH
    assert "torch" not in app
    for step, index in (("torch", target_index.nightly_url), ("app", target_index.pypi_url)):
        chosen = dry_run_on_target(
            step_file(stack.parent, step),
            OTHER_PY,
            "manylinux_2_28_x86_64",
            [index, target_index.pypi_url],
            tmp_path,
        )
    assert chosen["binpkg"] == f"binpkg-1.0-{OTHER_TAG}-{OTHER_TAG}-manylinux_2_28_x86_64.whl"


def host_platforms(platform: str) -> list[str]:
    """``--platform`` flags for everything a manylinux_2_N host takes: pip expands only the legacy
    manylinux2014 alias, so the perennial tags down to 2_17 and ``linux_<cpu>`` are spelled out."""
    _, _, glibc, arch = platform.split("_", 3)
    tags = [f"manylinux_2_{n}_{arch}" for n in range(int(glibc), 16, -1)] + [
        f"manylinux2014_{arch}",
        f"linux_{arch}",
    ]
    return [a for t in tags for a in ("--platform", t)]


def dry_run_on_target(
    path: Path,
    python: str,
    platform: str,
    indexes: list[str],
    tmp_path: Path,
    *,
    find_links: tuple[str, ...] | list[str] = (),
    sdist_ok: tuple[str, ...] = (),
    no_deps_only: bool = False,
    on_top_of: tuple[Path, ...] = (),
) -> dict[str, str]:
    """What the target host's installers do with a lock file, as a dry run from this machine.

    pip: ``--no-deps`` (pip evaluates markers for the interpreter it runs under, not for
    ``--python-version``), so it proves that every pin has a file for the target whose hash the
    lock accepts on a host of that glibc (``host_platforms``); ``--only-binary=:all:`` except for
    ``sdist_ok`` (projects PyPI has no wheel of). uv (unless ``no_deps_only``): with dependencies,
    for the target's markers, so it proves the file is complete there, on top of the files
    ``on_top_of`` (the baseline's: a later step's file leaves out what the baseline step installs)
    given as hash-pinned constraints. Returns pip's choice of file per package.
    """
    env = installer_env(tmp_path / "home")
    sources = (
        (["--index-url", indexes[0]] if indexes else ["--no-index"])
        + [a for u in indexes[1:] for a in ("--extra-index-url", u)]
        + [a for f in find_links for a in ("--find-links", f)]
    )
    binary = ["--only-binary=:all:", *(a for n in sdist_ok for a in ("--no-binary", n))]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            "-",
            "--require-hashes",
            "--no-deps",
            "--ignore-installed",
            "--python-version",
            python,
            *host_platforms(platform),
            *binary,
            *sources,
            "-r",
            str(path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    chosen = {
        i["metadata"]["name"]: unquote(i["download_info"]["url"].rsplit("/", 1)[-1])
        for i in report["install"]
    }
    if no_deps_only:
        return chosen
    from uv import find_uv_bin

    glibc, arch = platform.split("_", 3)[2], platform.split("_", 3)[3]
    target = tmp_path / "uv-dry-run-target"
    out = subprocess.run(
        [
            find_uv_bin(),
            "pip",
            "install",
            "--dry-run",
            "--no-config",
            "--no-python-downloads",
            "--target",
            str(target),
            "--python-version",
            python,
            "--python-platform",
            f"{arch}-manylinux_2_{glibc}",
            "--require-hashes",
            "--index-strategy",
            "unsafe-best-match",
            *sources,
            *(a for c in on_top_of for a in ("--constraint", str(c))),
            "-r",
            str(path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Would install" in out.stderr, out.stderr
    return chosen


def test_target_platform_changes_the_resolution(
    target_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack = _stack(tmp_path, target_index, OTHER_PY, target="manylinux_2_28_aarch64")
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    assert _names(stack.parent, "app") == {"binpkg": "1.0", "only-new": "1.0", "only-arm": "1.0"}
    assert manifest(stack.parent)["target"]["platform"] == "manylinux_2_28_aarch64"


def test_lock_for_this_interpreter_uses_pip_compile(
    target_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack = _stack(tmp_path, target_index, PY_MAJOR_MINOR)
    r = run_envbuild("-v", "lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    data = manifest(stack.parent)
    assert data["target"]["resolver"] == "pip-compile" and data["tools"]["pip-tools"]
    assert _names(stack.parent, "app") == {"binpkg": "1.0", "only-old": "1.0"}
    # the same spec, forced through uv: the same pins and hashes (two resolvers, one answer)
    first = step_file(stack.parent, "app").read_text()
    r = run_envbuild("lock", "--stack", stack, "--resolver", "uv", env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    assert manifest(stack.parent)["target"]["resolver"] == "uv"
    assert parse_requirements_text(
        step_file(stack.parent, "app").read_text(), "uv"
    ) == parse_requirements_text(first, "pip-compile")


@pytest.mark.parametrize(
    "table, message",
    [
        ('platform = "linux_x86_64"', "target.platform: must be a manylinux wheel platform tag"),
        (
            'platform = "manylinux_2_5_x86_64"',
            "target.platform: must be a manylinux wheel platform tag",
        ),
        ("platform = 3", "target.platform: must be a string"),
        (
            'platfrom = "manylinux_2_28_x86_64"',
            "target.platfrom: unknown key (did you mean 'platform'?)",
        ),
    ],
)
def test_target_table_is_validated_with_key_paths(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "stack.toml"
    text = stack_toml([], index=None, baseline=False, abi={"adopt": True})
    path.write_text(
        text.replace("\n[layout]", f"\n[target]\n{table}\n\n[layout]", 1)
        + '\n[[step]]\nname = "x"\npackages = ["x==1"]\n'
    )
    with pytest.raises(ConfigError) as err:
        load_spec(path, {})
    assert str(path) in str(err.value) and message in str(err.value)


def test_target_defaults_to_manylinux_x86_64(tmp_path: Path) -> None:
    path = tmp_path / "stack.toml"
    path.write_text(
        stack_toml(
            [{"name": "x", "packages": ["x==1"]}], index=None, baseline=False, abi={"adopt": True}
        )
    )
    spec = load_spec(path, {})
    assert (
        spec.target.platform == "manylinux_2_28_x86_64"
        and spec.target.uv_platform == "x86_64-manylinux_2_28"
    )


# ----------------------------------------------------------------------------- the CI gate


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={
            **installer_env(repo.parent / "home"),
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )
    return out.stdout.strip()


def test_check_lock_fails_a_pull_request_that_changes_the_spec_without_its_lock(
    target_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    profile = repo / "lockfiles" / "demo"
    profile.mkdir(parents=True)
    stack = _stack(profile, target_index, OTHER_PY)
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "lock demo")
    # the pull request: a new pin in the spec, no new lock
    _git(repo, "checkout", "-q", "-b", "pr")
    stack.write_text(stack.read_text().replace('"binpkg==1.0"', '"binpkg==1.0", "only-old==1.0"'))
    _git(repo, "commit", "-q", "-am", "add a package")
    r = run_envbuild(
        "check-lock",
        "--stack",
        stack,
        "--base",
        "main",
        "--offline",
        env=lock_env(tmp_path),
        cwd=repo,
    )
    assert r.rc == 8, r.output
    assert "stale" in r.output and "envbuild lock" in r.output and "Traceback" not in r.output
    # the same pull request with its lock passes the gate
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    _git(repo, "commit", "-q", "-am", "lock")
    r = run_envbuild(
        "check-lock",
        "--stack",
        stack,
        "--base",
        "main",
        "--offline",
        env=lock_env(tmp_path),
        cwd=repo,
    )
    assert r.rc == 0, r.output


@pytest.mark.parametrize(
    "filename, python, kept",
    [
        ("hf_xet-1.8.0-cp37-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "cp311", True),
        ("multiprocess-0.70.19-py311-none-any.whl", "cp311", True),
        ("multiprocess-0.70.19-py312-none-any.whl", "cp311", False),
        ("numpy-2.4.6-cp313-cp313-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "cp311", False),
        (
            "torchao-0.17.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
            "cp313",
            True,
        ),
        ("tqdm-4.70.1-py3-none-any.whl", "cp313", True),
    ],
)
def test_mirror_keeps_every_wheel_the_target_python_takes(
    filename: str, python: str, kept: bool
) -> None:
    """A lock for one Python mirrors the abi3 and pyXY wheels it installs (cp37 is older than
    cp311)."""
    from envbuild.wheelhouse.mirror import Artifact, select

    got = select(
        [Artifact(filename, "http://h/" + filename, "0" * 64)], python, "manylinux*_x86_64"
    )
    assert bool(got) is kept


def test_an_aarch64_target_locks_and_checks_its_aarch64_only_protected_package(
    target_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    """GH200/GB200/GB10 hosts are aarch64: the lock is resolved for it by real uv
    (``--python-platform aarch64-manylinux_2_28``) and check-lock reads the stack's markers for
    aarch64, so a protected package only aarch64 installs (in the baseline step, marked
    ``platform_machine == "aarch64"``) is required there, locked and frozen with torch."""
    stack = _stack(tmp_path, target_index, OTHER_PY, target="manylinux_2_28_aarch64")
    text = stack.read_text().replace(
        'protect = ["pytorch-triton"]', 'protect = ["pytorch-triton", "only-arm"]'
    )
    text = text.replace(
        f'packages = ["torch=={NIGHTLY_TORCH}"]',
        f'packages = ["torch=={NIGHTLY_TORCH}", "only-arm==1.0 ; platform_machine == \'aarch64\'"]',
    )
    assert "only-arm==1.0" in text, text
    stack.write_text(text)
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    assert _names(stack.parent, "torch").get("only-arm") == "1.0", step_file(
        stack.parent, "torch"
    ).read_text()
    r = run_envbuild("check-lock", "--stack", stack, "--offline", env=lock_env(tmp_path))
    assert r.rc == 0, r.output


def test_check_lock_reads_requirements_for_the_target_cpu(
    target_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    """A requirement only x86_64 installs (``only-old>=2 ; platform_machine == "x86_64"``) does not
    apply to an aarch64 target: its lock, made by uv for aarch64 with only-old 1.0, passes the
    gate's requirement rule (judged as x86_64 it was a false unmet-requirement)."""
    build_wheel(
        target_index.wheels.pypi,
        "armdep",
        "1.0",
        requires=['only-old>=2 ; platform_machine == "x86_64"'],
    )
    text = stack_toml(
        [{"name": "app", "packages": ["armdep==1.0", "only-old==1.0"]}], index=target_index
    )
    text = text.replace(f'python = "{PY_MAJOR_MINOR}"', f'python = "{OTHER_PY}"')
    text = text.replace(
        "\n[layout]", '\n[target]\nplatform = "manylinux_2_28_aarch64"\n\n[layout]', 1
    )
    stack = tmp_path / "stack.toml"
    stack.write_text(text)
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    r = run_envbuild("check-lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0 and "unmet-requirement" not in r.output, r.output
    # the same lock for an x86_64 target: only-old 1.0 does not meet armdep's requirement there
    stack.write_text(text.replace("manylinux_2_28_aarch64", "manylinux_2_28_x86_64"))
    r = run_envbuild("check-lock", "--stack", stack, env=lock_env(tmp_path))
    assert "armdep 1.0 requires only-old>=2" in r.output, r.output
