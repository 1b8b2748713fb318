"""What provision writes, what it refuses before writing anything, and the words it uses.

Real pip and uv against the scenario index over HTTP: secrets never reach a file (and the
files that may hold them are private), empty paths are refused, refused runs leave nothing,
the import verdict is reused only while nothing changed, and the messages say what happened.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, ScenarioIndex, Venv, installer_env, stack_toml
from support.wheels import build_wheel, dist_info_name

from envbuild.errors import ExitCode

pytestmark = pytest.mark.slow

SECRET = "s3cret-Pa55word"


def _write(
    tmp_path: Path,
    index: ScenarioIndex,
    steps: list[dict[str, object]],
    *,
    extra: str = "",
    name: str = "stack.toml",
) -> Path:
    path = tmp_path / name
    path.write_text(stack_toml(steps, index=index) + extra, encoding="utf-8")
    return path


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_a_password_in_an_index_url_reaches_no_file(
    tmp_path: Path,
    scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
    backend: str,
) -> None:
    secret_url = scenario_index.pypi_url.replace("http://", f"http://alice:{SECRET}@")
    stack = _write(
        tmp_path,
        scenario_index,
        [{"name": "helpers", "packages": ["einops-like==0.8.1"], "extra_index_urls": [secret_url]}],
        extra='\n[env]\nHF_TOKEN = "hf_not_for_others"\n',
    )
    root = tmp_path / "data"
    out = run_envbuild(
        "-v",
        "provision",
        "--stack",
        str(stack),
        "--root",
        str(root),
        "--home",
        str(tmp_path / "home"),
        "--python",
        sys.executable,
        "--backend",
        backend,
    )
    assert out.rc == 0, out.output
    assert SECRET not in out.output
    leaks = [str(p) for p in _files_under(root) if SECRET.encode() in p.read_bytes()]
    assert leaks == []
    logs = list((root / "logs").glob("*.log"))
    # redacted, not dropped
    assert any("alice:" not in p.read_text() and "***@" in p.read_text() for p in logs)
    private = [
        root / ".envbuild" / "envbuild-env.sh",
        root / ".envbuild" / "manifest.json",
        *logs,
        *(root / "receipts").rglob("*.json"),
    ]
    assert len(private) > 4
    for p in private:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


@pytest.mark.parametrize("option", ["--root", "--home", "--venv", "--python"])
def test_an_empty_path_is_refused_and_nothing_lands_in_the_cwd(
    tmp_path: Path,
    scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
    option: str,
) -> None:
    stack = _write(tmp_path, scenario_index, [])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    args = {
        "--root": str(tmp_path / "data"),
        "--home": str(tmp_path / "home"),
        "--python": sys.executable,
    }
    args[option] = ""
    out = run_envbuild(
        "provision", "--stack", str(stack), *[x for kv in args.items() for x in kv], cwd=cwd
    )
    assert out.rc == ExitCode.CONFIG, out.output
    assert f"argument {option}: an empty" in out.stderr and "Traceback" not in out.output
    assert list(cwd.iterdir()) == [] and not (tmp_path / "data").exists()


def test_an_empty_layout_root_in_the_spec_is_refused(
    tmp_path: Path, scenario_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    path = tmp_path / "stack.toml"
    path.write_text(stack_toml([], index=scenario_index, layout={"root": ""}), encoding="utf-8")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = run_envbuild(
        "provision",
        "--stack",
        str(path),
        "--home",
        str(tmp_path / "home"),
        "--python",
        sys.executable,
        cwd=cwd,
    )
    assert out.rc == ExitCode.CONFIG, out.output
    assert "layout.root is empty" in out.stderr
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("case", ["python", "step", "venv"])
def test_a_refused_run_leaves_nothing(
    tmp_path: Path,
    scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
    case: str,
) -> None:
    stack = _write(tmp_path, scenario_index, [{"name": "rest", "packages": ["einops-like==0.8.1"]}])
    root, home = tmp_path / "data", tmp_path / "home"
    extra = {
        "python": ["--python", "/nonexistent/python3"],
        "step": ["--python", sys.executable, "--step", "rest"],
        "venv": ["--venv", str(tmp_path / "nonexistent")],
    }[case]
    out = run_envbuild(
        "provision", "--stack", str(stack), "--root", str(root), "--home", str(home), *extra
    )
    assert out.rc == ExitCode.PREFLIGHT, out.output
    assert "Traceback" not in out.output
    assert not root.exists()  # no data root, so no .envbuild/lock
    assert not home.exists() or [p for p in home.iterdir() if p.is_symlink()] == []  # no links


def test_a_file_where_a_link_goes_is_refused_before_the_data_root_is_made(
    tmp_path: Path, scenario_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    stack = _write(tmp_path, scenario_index, [{"name": "rest", "packages": ["einops-like==0.8.1"]}])
    root, home = tmp_path / "data", tmp_path / "home"
    home.mkdir()
    (home / "venv").write_text("the user's own file\n")
    out = run_envbuild(
        "provision",
        "--stack",
        str(stack),
        "--root",
        str(root),
        "--home",
        str(home),
        "--python",
        sys.executable,
    )
    assert out.rc == ExitCode.LAYOUT, out.output
    assert "Traceback" not in out.output and "--force-links" in out.output
    assert (home / "venv").read_text() == "the user's own file\n"  # untouched
    assert not root.exists()  # refused before anything was made
    assert [p for p in home.iterdir() if p.is_symlink()] == []


@pytest.mark.parametrize("command", ["smoke", "dist-step"])
def test_smoke_and_dist_step_on_a_missing_root_make_nothing(
    tmp_path: Path,
    scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
    command: str,
) -> None:
    stack = _write(tmp_path, scenario_index, [])
    root = tmp_path / "nowhere"
    out = run_envbuild(command, "--stack", str(stack), "--root", str(root))
    assert out.rc == ExitCode.PREFLIGHT, out.output
    assert "no Python interpreter at" in out.stderr
    assert not root.exists()


def test_switching_the_backend_says_so(
    write_stack: Callable[..., Path], provision: Callable[..., EnvbuildResult]
) -> None:
    stack = write_stack([{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    assert provision(stack).rc == 0  # pip
    out = provision(stack, "--backend", "uv")
    assert out.rc == 0, out.output
    assert "the installer changed (pip -> uv): re-running" in out.output
    assert "the spec changed" not in out.output


def test_ctrl_c_in_smoke_does_not_promise_a_resume(
    tmp_path: Path, scenario_index: ScenarioIndex
) -> None:
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text("import time\ntime.sleep(3600)\n")
    stack = _write(tmp_path, scenario_index, [], extra=f'\n[env]\nPYTHONPATH = "{hang}"\n')
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envbuild",
            "smoke",
            "--stack",
            str(stack),
            "--root",
            str(tmp_path / "data"),
            "--python",
            sys.executable,
            "--no-receipt",
        ],
        env=installer_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "data" / "logs" / "smoke.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().startswith("$ ")) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "interrupted" in stderr and "resume" not in stderr and "state is saved" not in stderr


@pytest.mark.thorough  # make test-thorough: three provisions of the cpu profile
def test_the_import_verdict_is_reused_only_while_nothing_changed(
    tmp_path: Path,
    scenario_index: ScenarioIndex,
    write_stack: Callable[..., Path],
    provision: Callable[..., EnvbuildResult],
    provisioned_venv: Venv,
) -> None:
    stack = write_stack([{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    first = provision(stack, "--json")
    assert first.rc == 0, first.output
    assert json.loads(first.stdout)["import_cached"] is False
    again = provision(stack)
    assert again.rc == 0 and "cached verdict" in again.output, again.output
    # nothing changed: the re-run is a line confirming the first receipt (verified.jsonl), no new
    # receipt
    (receipt,) = (tmp_path / "data" / "receipts").glob("*.json")
    (line,) = map(
        json.loads, (tmp_path / "data" / "receipts" / "verified.jsonl").read_text().splitlines()
    )
    assert line["payload"]["import_check"] == {"cached": True} and line["confirms"] == receipt.name
    # the inventory recorded with the verdict stands in for a new one: the same distributions
    names = {d["name"] for d in json.loads(receipt.read_text())["software"]["distributions"]}
    assert {"torch", "einops-like"} <= names
    # any distribution changed (here: one more installed behind envbuild's back): import again
    provisioned_venv.pip(
        "install", "--no-deps", "--index-url", scenario_index.pypi_url, "fla-core-like", check=True
    )
    changed = provision(stack, "--json")
    assert changed.rc == 0, changed.output
    assert json.loads(changed.stdout)["import_cached"] is False
    # and cached again
    assert json.loads(provision(stack, "--json").stdout)["import_cached"] is True
    # a reinstall of the same version changes its RECORD: import again
    provisioned_venv.pip(
        "install",
        "--no-deps",
        "--force-reinstall",
        "--index-url",
        scenario_index.pypi_url,
        "einops-like==0.8.1",
        check=True,
    )
    assert json.loads(provision(stack, "--json").stdout)["import_cached"] is False
    # an overlay variable changed: import again
    stack.write_text(stack.read_text() + '\n[env]\nSOME_SETTING = "1"\n')
    assert json.loads(provision(stack, "--json").stdout)["import_cached"] is False


def test_receipt_diff_of_one_install_at_two_roots_finds_no_drift(
    tmp_path: Path,
    private_scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    index = private_scenario_index
    info = dist_info_name("toolpkg", "1.0")
    build_wheel(
        index.wheels.pypi,
        "toolpkg",
        "1.0",
        files={
            "toolpkg/__init__.py": "def main() -> None:\n    pass\n",
            f"{info}/entry_points.txt": "[console_scripts]\ntoolpkg = toolpkg:main\n",
        },
    )
    stack = _write(tmp_path, index, [{"name": "tools", "packages": ["toolpkg==1.0"]}])
    receipts = []
    for root in ("a", "b"):
        out = run_envbuild(
            "provision",
            "--stack",
            str(stack),
            "--root",
            str(tmp_path / root),
            "--home",
            str(tmp_path / f"home-{root}"),
            "--python",
            sys.executable,
            "--backend",
            "pip",
            "--json",
        )
        assert out.rc == 0, out.output
        receipts.append(json.loads(out.stdout)["receipt"])
    scripts = [(tmp_path / r / "venv" / "bin" / "toolpkg").read_text() for r in ("a", "b")]
    assert scripts[0] != scripts[1]  # the shebangs name two different venvs
    out = run_envbuild("receipt", "diff", *receipts)
    assert "RECORD" not in out.output, out.output
    assert os.path.basename(receipts[0]) != "" and out.rc in (0, ExitCode.DRIFT)


def test_smoke_leaves_no_inductor_folder_in_tmp(
    tmp_path: Path,
    torch_venv: Path,
    scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    stack = _write(tmp_path, scenario_index, [])
    out = run_envbuild(
        "smoke",
        "--stack",
        str(stack),
        "--root",
        str(tmp_path / "data"),
        "--python",
        str(torch_venv / "bin" / "python"),
        "--only",
        "matmul",
        "--quick",
        "--no-receipt",
        env={"TMPDIR": str(tmp)},
    )
    assert out.rc in (0, ExitCode.VERIFY), out.output
    assert "smoke" in out.output
    assert sorted(p.name for p in tmp.iterdir()) == []
