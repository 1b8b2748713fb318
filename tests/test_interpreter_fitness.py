"""An interpreter torch cannot run on is refused before anything is made (exit 3).

The case that matters is Ubuntu 22.04's own ``python3.11``: 3.11.0rc1, a release candidate that
lacks ``sys.get_int_max_str_digits`` (torch._dynamo calls it at import on 3.11+).
``test_bootstrap`` meets the real one inside a jammy container; this machine has no pre-release
CPython, so here a crafted one stands in: a real interpreter run through a launcher that makes it
report itself as ``X.Y.0rc1`` (``sys.version_info``, ``sys.version``, ``sys.implementation``)
and removes ``sys.get_int_max_str_digits`` before it runs the code it was given. The probe runs
it for real, as it runs any interpreter.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult

from envbuild.errors import ExitCode
from envbuild.installer.python import (
    UnfitInterpreter,
    find_interpreter,
    find_python,
    probe_python,
    unfit_reason,
)

HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"

_LAUNCHER = """import sys, types
from collections import namedtuple
args = sys.argv[1:]
code = args[args.index("-c") + 1]
sys.argv = ["-c", *args[args.index("-c") + 2:]]
VersionInfo = namedtuple("VersionInfo", "major minor micro releaselevel serial")
sys.version_info = VersionInfo({major}, {minor}, 0, "candidate", 1)
sys.version = "{major}.{minor}.0rc1 (main, Aug 12 2022, 18:10:39) [GCC 11.2.0]"
sys.implementation = types.SimpleNamespace(**{{**vars(sys.implementation), "version": sys.version_info}})
sys.executable = {exe!r}
del sys.get_int_max_str_digits, sys.set_int_max_str_digits
exec(compile(code, "<string>", "exec"), {{"__name__": "__main__"}})
"""  # noqa: E501 (embedded launcher source: the text is the value)


def prerelease(folder: Path, version: str = HERE) -> Path:
    """``folder/python<version>``: this interpreter, reporting itself as ``<version>.0rc1``."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / f"python{version}"
    major, minor = version.split(".")
    (folder / "launcher.py").write_text(_LAUNCHER.format(major=major, minor=minor, exe=str(exe)))
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S {folder / "launcher.py"} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_the_probe_reads_a_prerelease_and_what_it_lacks(tmp_path: Path) -> None:
    rc1 = probe_python(prerelease(tmp_path / "rc"))
    assert rc1 is not None
    assert (rc1.version, rc1.release, rc1.releaselevel, rc1.int_max_str_digits) == (
        HERE,
        f"{HERE}.0rc1",
        "candidate",
        False,
    )
    reason = unfit_reason(rc1)
    assert reason is not None and "a release candidate, a pre-release" in reason
    assert "torch._dynamo calls sys.get_int_max_str_digits at import" in reason
    final = probe_python(sys.executable)
    assert final is not None and final.releaselevel == "final" and final.int_max_str_digits
    assert final.release == ".".join(map(str, sys.version_info[:3])) and unfit_reason(final) is None


def test_python_override_to_a_prerelease_is_refused_with_the_fix(tmp_path: Path) -> None:
    rc1 = prerelease(tmp_path / "rc")
    with pytest.raises(UnfitInterpreter) as err:
        find_interpreter(HERE, str(rc1))
    assert err.value.exit_code == ExitCode.PREFLIGHT
    text = str(err.value)
    assert f"--python {rc1} is Python {HERE}.0rc1, a release candidate" in text
    assert "get_int_max_str_digits" in text and "Nothing was made" in text
    assert f"Pass --python PATH to a final release of Python {HERE}" in text
    assert f"uv python install {HERE}" in text and "deadsnakes" in text


def test_the_search_takes_a_final_release_over_a_prerelease_found_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc1 = prerelease(tmp_path / "rc")
    final_dir = tmp_path / "final"
    final_dir.mkdir()
    (final_dir / f"python{HERE}").symlink_to(sys.executable)
    monkeypatch.setenv(
        "PATH", f"{rc1.parent}{os.pathsep}{final_dir}{os.pathsep}{os.environ['PATH']}"
    )
    chosen = find_interpreter(HERE)
    assert chosen.releaselevel == "final" and chosen.executable != rc1
    assert unfit_reason(chosen) is None


def test_the_search_refuses_when_only_a_prerelease_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc1 = prerelease(tmp_path / "rc", "3.97")  # a version nothing else here is
    monkeypatch.setenv("PATH", f"{rc1.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(UnfitInterpreter) as err:
        find_interpreter("3.97")
    assert f"{rc1} (found as {rc1}), the only Python 3.97 here, is Python 3.97.0rc1" in str(
        err.value
    )


def test_lock_resolves_with_a_prerelease_when_it_is_the_only_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolving never runs torch: `lock` (find_python) takes the pre-release the search found,
    and an explicit --python to one, where provision refuses both."""
    rc1 = prerelease(tmp_path / "rc", "3.97")
    monkeypatch.setenv("PATH", f"{rc1.parent}{os.pathsep}{os.environ['PATH']}")
    assert find_python("3.97") == rc1
    assert find_python("3.97", str(rc1)) == rc1
    # where both are found, the final release still comes first (the rc1 of this Python is on PATH
    # first)
    rc_here = prerelease(tmp_path / "rc-here")
    final_dir = tmp_path / "final"
    final_dir.mkdir()
    (final_dir / f"python{HERE}").symlink_to(sys.executable)
    monkeypatch.setenv(
        "PATH", f"{rc_here.parent}{os.pathsep}{final_dir}{os.pathsep}{os.environ['PATH']}"
    )
    assert find_python(HERE) != rc_here


def test_provision_refuses_a_prerelease_before_making_anything_and_plan_preflight_say_it(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    rc1 = prerelease(tmp_path / "rc")
    stack = Path(__file__).resolve().parent.parent / "lockfiles" / "cpu" / "stack.toml"
    text = stack.read_text()
    copy = tmp_path / "stack" / "stack.toml"  # the cpu profile for this machine's Python
    copy.parent.mkdir()
    copy.write_text(text.replace('python = "3.11"', f'python = "{HERE}"', 1))
    data = tmp_path / "data"
    home = tmp_path / "operator"
    out = run_envbuild(
        "provision", "--stack", copy, "--root", data, "--home", home, "--python", rc1, "--no-lock"
    )
    assert out.rc == ExitCode.PREFLIGHT, out.output
    assert f"is Python {HERE}.0rc1, a release candidate, a pre-release" in out.stderr
    assert "Pass --python PATH to a final release" in out.stderr
    assert "Traceback" not in out.output
    assert not data.exists() and not home.exists()  # no data root, no venv, no links
    print(out.stderr)
    pre = run_envbuild(
        "preflight", "--stack", copy, "--root", data, "--only", "python", "--python", rc1
    )
    assert pre.rc == ExitCode.PREFLIGHT, pre.output
    assert "FAIL" in pre.stdout and f"{HERE}.0rc1" in pre.stdout.replace("\n", " ")
    plan = run_envbuild("plan", "--stack", copy, "--root", data, "--python", rc1, "--no-lock")
    assert plan.rc == 0, plan.output
    assert "python: provision refuses it (exit 3)" in plan.stdout
    ok = run_envbuild(
        "preflight", "--stack", copy, "--root", data, "--only", "python", "--python", sys.executable
    )
    assert ok.rc == 0, ok.output
