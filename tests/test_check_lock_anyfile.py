"""check-lock FILE...: the torch policy applied to lockfiles made in the test by the real tools.

uv (uv.lock, ``uv pip compile`` requirements with hashes and pylock.toml), pip-compile (requirements
without hashes) and Poetry (poetry.lock, when it installs here) resolve against the local HTTP
scenario index (a stand-in nightly torch ``2.12.0.dev20260405+cu132`` with pytorch-triton on the
"nightly" index; stable decoys, PyPI triton and torch-requiring packages on "pypi"). Each format
gets a healthy lock that passes and a lock with a planted violation that fails with exit 8.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from support.fixtures import (
    NIGHTLY_TORCH,
    PY_MAJOR_MINOR,
    EnvbuildResult,
    ScenarioIndex,
    installer_env,
)
from support.gatelocks import poetry_bin

from envbuild.errors import ExitCode
from envbuild.gate import Policy, check_file
from envbuild.gate.formats import detect as detect_format
from envbuild.gate.formats import parse

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
Run = Callable[..., EnvbuildResult]


def _uv() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def _tool(argv: list[str | Path], cwd: Path, home: Path, *, project_config: bool = False) -> str:
    env = installer_env(home)
    # UV_NO_CONFIG would also hide the project's own [tool.uv] (its indexes); HOME is private
    if project_config:
        env.pop("UV_NO_CONFIG")
    out = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, f"{argv[:3]} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def _uv_compile(
    tmp: Path,
    idx: ScenarioIndex,
    name: str,
    lines: list[str],
    *extra: str,
    output: str = "requirements.txt",
) -> Path:
    folder = tmp / name
    folder.mkdir(parents=True)
    (folder / "requirements.in").write_text("\n".join(lines) + "\n")
    _tool(
        [
            _uv(),
            "pip",
            "compile",
            "requirements.in",
            "-o",
            output,
            "--index-url",
            idx.nightly_url,
            "--extra-index-url",
            idx.pypi_url,
            "--index-strategy",
            "unsafe-best-match",
            "--prerelease",
            "allow",
            "--python-version",
            PY_MAJOR_MINOR,
            "--no-cache",
            *extra,
        ],
        folder,
        tmp / "home",
    )
    return folder / output


def _check(run: Run, *args: str | Path) -> EnvbuildResult:
    return run("check-lock", *map(str, args))


# ----------------------------------------------------------------------------- requirements (uv pip
# compile, hashes)


def test_uv_pip_compile_with_hashes(
    run_envbuild: Run, scenario_index: ScenarioIndex, tmp_path: Path
) -> None:
    healthy = _uv_compile(
        tmp_path,
        scenario_index,
        "healthy",
        [f"torch=={NIGHTLY_TORCH}", "fla-core-like==0.5.0"],
        "--generate-hashes",
        "--emit-index-url",
    )  # the file names its indexes
    assert "--hash=sha256:" in healthy.read_text() and "# via" in healthy.read_text()
    ok = _check(
        run_envbuild,
        healthy,
        "--torch-local",
        "cu132",
        "--torch-min",
        "2.12.0.dev20260401",
        "--json",
    )
    assert ok.rc == 0, ok.output
    report = json.loads(ok.stdout)["files"][0]
    assert (
        report["format"] == "requirements"
        and report["torch"] == NIGHTLY_TORCH
        and not report["unchecked"]
    )

    # planted: the torch nightly forced with --override, beside a package that declares torch>=2.12
    (tmp_path / "override.txt").write_text(f"torch=={NIGHTLY_TORCH}\n")
    bad = _uv_compile(
        tmp_path,
        scenario_index,
        "override",
        [f"torch=={NIGHTLY_TORCH}", "needs-torch-212==1.0"],
        "--generate-hashes",
        "--override",
        str(tmp_path / "override.txt"),
    )
    failed = _check(
        run_envbuild, bad, "--torch-local", "cu132", "--index-url", scenario_index.pypi_url
    )
    assert failed.rc == ExitCode.LOCK, failed.output
    assert (
        "needs-torch-212: needs-torch-212 1.0 requires torch>=2.12, which the locked torch"
        f" {NIGHTLY_TORCH} does not satisfy"
        in failed.stdout
        and "[torch-requirement]" in failed.stdout
    )
    # offline, the metadata is out of reach: it passes, and says what it could not check
    # offline: the metadata read above is cached by sha256, so the finding stands without the index
    cached = _check(run_envbuild, bad, "--offline")
    assert cached.rc == ExitCode.LOCK and "[torch-requirement]" in cached.stdout, cached.output
    # with nothing cached it cannot know: it passes, and says what it could not check
    fresh = run_envbuild(
        "check-lock", str(bad), "--offline", env={"ENVBUILD_CACHE_DIR": str(tmp_path / "empty")}
    )
    assert fresh.rc == 0, fresh.output
    assert (
        "could not check the torch requirement of 1 package(s) (--offline): needs-torch-212 1.0"
        in fresh.stdout
    )


# ----------------------------------------------------------------------------- requirements
# (pip-compile, no hashes)


def _pip_compile(tmp: Path, idx: ScenarioIndex, name: str, lines: list[str]) -> Path:
    folder = tmp / name
    folder.mkdir(parents=True)
    (folder / "requirements.in").write_text("\n".join(lines) + "\n")
    _tool(
        [
            sys.executable,
            "-m",
            "piptools",
            "compile",
            "--quiet",
            "--no-strip-extras",
            "--pre",
            "--index-url",
            idx.nightly_url,
            "--extra-index-url",
            idx.pypi_url,
            "--cache-dir",
            tmp / "pipcache",
            "-o",
            "requirements-dev.txt",
            "requirements.in",
        ],
        folder,
        tmp / "home",
    )
    return folder / "requirements-dev.txt"


def test_pip_compile_without_hashes(
    run_envbuild: Run, scenario_index: ScenarioIndex, tmp_path: Path
) -> None:
    healthy = _pip_compile(
        tmp_path, scenario_index, "healthy", [f"torch=={NIGHTLY_TORCH}", "fla-core-like==0.5.0"]
    )
    assert "--hash" not in healthy.read_text()
    ok = _check(run_envbuild, healthy, "--torch-local", "cu132")
    assert ok.rc == 0, ok.output
    assert "torch 2.12.0.dev20260405+cu132, 1 environment(s), ok" in ok.stderr + ok.stdout

    # planted: a package that depends on PyPI triton; the resolver puts it beside pytorch-triton
    bad = _pip_compile(
        tmp_path, scenario_index, "triton", [f"torch=={NIGHTLY_TORCH}", "mamba-like==1.0"]
    )
    failed = _check(run_envbuild, bad, "--offline")
    assert failed.rc == ExitCode.LOCK, failed.output
    assert "triton: PyPI triton 3.8.0 is locked beside pytorch-triton" in failed.stdout, (
        failed.output
    )


# ----------------------------------------------------------------------------- uv.lock


def _uv_project(
    tmp: Path, idx: ScenarioIndex, name: str, deps: list[str], overrides: Sequence[str] = ()
) -> Path:
    folder = tmp / name
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(f"""[project]
name = "trainer"
version = "0.1.0"
requires-python = ">={PY_MAJOR_MINOR}"
dependencies = {json.dumps(deps)}

[tool.uv]
index-strategy = "unsafe-best-match"
prerelease = "allow"
package = false
override-dependencies = {json.dumps(list(overrides))}
environments = ["sys_platform == 'linux'"]

[[tool.uv.index]]
name = "nightly"
url = "{idx.nightly_url}"

[[tool.uv.index]]
name = "stand-in-pypi"
url = "{idx.pypi_url}"
default = true
""")
    _tool([_uv(), "lock", "--no-cache"], folder, tmp / "home", project_config=True)
    return folder / "uv.lock"


def test_uv_lock(run_envbuild: Run, scenario_index: ScenarioIndex, tmp_path: Path) -> None:
    healthy = _uv_project(
        tmp_path, scenario_index, "healthy", [f"torch=={NIGHTLY_TORCH}", "fla-core-like==0.5.0"]
    )
    ok = _check(run_envbuild, healthy, "--torch-local", "cu132", "--json")
    assert ok.rc == 0, ok.output
    report = json.loads(ok.stdout)["files"][0]
    assert (
        report["format"] == "uv.lock"
        and report["torch"] == NIGHTLY_TORCH
        and not report["unchecked"]
    )

    # planted: override-dependencies force the nightly under a package that declares torch>=2.12
    bad = _uv_project(
        tmp_path,
        scenario_index,
        "override",
        ["needs-torch-212==1.0"],
        overrides=[f"torch=={NIGHTLY_TORCH}"],
    )
    failed = _check(run_envbuild, bad)
    assert failed.rc == ExitCode.LOCK, failed.output
    assert (
        "needs-torch-212 1.0 requires torch>=2.12" in failed.stdout
        and "[torch-requirement]" in failed.stdout
    )


# ----------------------------------------------------------------------------- pylock.toml, --base


def _git(repo: Path, *args: str) -> None:
    env = {
        **installer_env(repo.parent / "home"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)


def test_pylock_and_a_downgrade_against_the_base_branch(
    run_envbuild: Run, scenario_index: ScenarioIndex, tmp_path: Path
) -> None:
    """main pins the stable torch 2.12.0; the branch's lock moves it to 2.12.0.dev…: a downgrade."""
    stable = _uv_compile(
        tmp_path,
        scenario_index,
        "repo",
        ["torch==2.12.0", "needs-torch-212==1.0"],
        output="pylock.toml",
    )
    repo = stable.parent
    assert detect_format(stable, stable.read_text()) == "pylock"
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "pylock.toml")
    _git(repo, "commit", "-q", "-m", "stable torch")
    ok = _check(run_envbuild, stable, "--base", "main", "--json")
    assert ok.rc == 0, ok.output
    assert json.loads(ok.stdout)["files"][0]["torch"] == "2.12.0"

    (repo / "requirements.in").write_text(f"torch=={NIGHTLY_TORCH}\nfla-core-like==0.5.0\n")
    _tool(
        [
            _uv(),
            "pip",
            "compile",
            "requirements.in",
            "-o",
            "pylock.toml",
            "--index-url",
            scenario_index.nightly_url,
            "--extra-index-url",
            scenario_index.pypi_url,
            "--index-strategy",
            "unsafe-best-match",
            "--prerelease",
            "allow",
            "--python-version",
            PY_MAJOR_MINOR,
            "--no-cache",
        ],
        repo,
        tmp_path / "home",
    )
    failed = _check(run_envbuild, stable, "--base", "main")
    assert failed.rc == ExitCode.LOCK, failed.output
    assert (
        f"torch: torch 2.12.0 at main -> {NIGHTLY_TORCH} here: a downgrade [torch-downgrade]"
        in failed.stdout
    )


# ----------------------------------------------------------------------------- poetry.lock


def _poetry_lock(tmp: Path, idx: ScenarioIndex, name: str, deps: dict[str, str]) -> Path:
    poetry = poetry_bin()
    folder = tmp / name
    folder.mkdir(parents=True)
    lines = "\n".join(
        f'{k} = {{version = "{v}", source = "{"nightly" if v == NIGHTLY_TORCH else "standin"}"}}'
        for k, v in deps.items()
    )
    (folder / "pyproject.toml").write_text(f"""[tool.poetry]
name = "trainer"
version = "0.1.0"
description = ""
authors = []
package-mode = false

[tool.poetry.dependencies]
python = "~{PY_MAJOR_MINOR}"
{lines}

[[tool.poetry.source]]
name = "nightly"
url = "{idx.nightly_url}"
priority = "explicit"

[[tool.poetry.source]]
name = "standin"
url = "{idx.pypi_url}"
priority = "primary"
""")
    env = installer_env(
        tmp / "home",
        {"POETRY_CACHE_DIR": str(tmp / "poetry-cache"), "POETRY_VIRTUALENVS_CREATE": "false"},
    )
    out = subprocess.run(
        [str(poetry), "lock", "--no-interaction"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return folder / "poetry.lock"


# Poetry, installed from pip's sources once into the test cache (~/.cache/envbuild-tests,
# support/cachedir.py)
@pytest.mark.pip_sources
def test_poetry_lock(run_envbuild: Run, scenario_index: ScenarioIndex, tmp_path: Path) -> None:
    healthy = _poetry_lock(
        tmp_path, scenario_index, "healthy", {"torch": NIGHTLY_TORCH, "fla-core-like": "0.5.0"}
    )
    ok = _check(run_envbuild, healthy, "--torch-local", "cu132", "--offline", "--json")
    assert ok.rc == 0, ok.output
    report = json.loads(ok.stdout)["files"][0]
    # offline and still complete: poetry.lock records every declared specifier
    assert (
        report["format"] == "poetry.lock"
        and report["torch"] == NIGHTLY_TORCH
        and not report["unchecked"]
    )

    # planted: an unpinned torch beside a torch>=2.12 package resolves to the stable 2.13.0 build
    bad = _poetry_lock(tmp_path, scenario_index, "stable", {"torch": "*", "needs-torch-212": "1.0"})
    failed = _check(run_envbuild, bad, "--torch-local", "cu132", "--offline")
    assert failed.rc == ExitCode.LOCK, failed.output
    assert (
        "torch: torch 2.13.0 has local tag none, the policy wants +cu132 [torch-local]"
        in failed.stdout
    )


# ----------------------------------------------------------------------------- policy and input
# errors


def test_policy_from_a_profile_and_clear_errors(run_envbuild: Run, tmp_path: Path) -> None:
    cpu_torch = REPO / "lockfiles" / "cpu" / "02-torch.txt"
    ok = _check(run_envbuild, cpu_torch, "--profile", "cpu", "--offline")
    assert ok.rc == 0, ok.output
    low = _check(
        run_envbuild, cpu_torch, "--torch-min", "2.14", "--torch-local", "cu132", "--offline"
    )
    assert low.rc == ExitCode.LOCK
    assert "torch 2.13.0+cpu is below the minimum 2.14 [torch-min]" in low.stdout
    assert "has local tag +cpu, the policy wants +cu132 [torch-local]" in low.stdout
    missing = _check(run_envbuild, tmp_path / "nope.lock")
    assert (
        missing.rc == ExitCode.CONFIG
        and "no such lockfile" in missing.stderr
        and "Traceback" not in missing.output
    )
    odd = tmp_path / "deps.lock"
    odd.write_text("hello\n")
    unknown = _check(run_envbuild, odd)
    assert unknown.rc == ExitCode.CONFIG and "--format" in unknown.stderr
    broken = tmp_path / "uv.lock"
    broken.write_text("version = [\n")
    r = _check(run_envbuild, broken, "--markdown")
    assert r.rc == ExitCode.LOCK and "**broken-lock**" in r.stdout and "not valid TOML" in r.stdout
    # only the comment on stdout
    assert r.stdout.startswith("### envbuild check-lock: ❌ 1 finding(s)\n"), r.stdout
    assert "==> checking" in r.stderr


def test_twice_pinned_and_loose_torch_in_a_requirements_file(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(
        "torch==2.12.0 ; python_version < '3.9'\ntorch==2.13.0\ntorch>=2.0 ; sys_platform =="
        " 'linux'\n"
    )
    lock = parse(path, path.read_text(), "requirements")
    assert [p.version for p in lock.entries] == ["2.12.0", "2.13.0", None]
    report = check_file(path, Policy(python="3.11"), offline=True)
    rules = sorted(f.rule for f in report.findings)
    # the 3.8-only line does not count (the file states no range: its markers' 3.9 up to the
    # policy's 3.11 are judged); the loose one does
    assert rules == ["torch-pins"], report.findings
    assert "`torch>=2.0 ; sys_platform == 'linux'` is not pinned" in report.findings[0].reason
    assert report.findings[0].line == 3 and report.findings[0].environments == [
        "linux x86_64, python 3.9–3.11",
        "linux aarch64, python 3.9–3.11",
    ]


def test_the_github_workflow_calls_options_that_exist() -> None:
    """The repository's workflow runs the gate through the composite action (``uses: ./``): every
    check-lock option the action passes and the workflow's ``args`` input names exists."""
    yaml = pytest.importorskip("yaml")
    import re

    from envbuild.cli import build_parser

    flow = yaml.safe_load((REPO / ".github" / "workflows" / "check-lockfiles.yml").read_text())
    steps = flow["jobs"]["check-lockfiles"]["steps"]
    gate = next(s for s in steps if s.get("uses") == "./")
    action = yaml.safe_load((REPO / "action.yml").read_text())
    scripts = " ".join(s.get("run", "") for s in action["runs"]["steps"])
    passed = (
        " ".join(re.findall(r"args\+=\(([^)]*)\)", scripts)) + " " + gate["with"].get("args", "")
    )
    used = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", passed))
    parser = build_parser("check_lock")
    assert parser._subparsers is not None
    commands = parser._subparsers._group_actions[0].choices  # argparse's own: {command: its parser}
    assert isinstance(commands, dict)
    known = {o for a in commands["check-lock"]._actions for o in a.option_strings}
    assert {"--base", "--annotations", "--markdown-file"} <= used, used
    assert used <= known, used - known
    # the comment on the pull request
    assert any("github-script" in s.get("uses", "") for s in steps)
