"""The CLI's last line of defence: a file system that says no is a host error, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.cli import main
from envbuild.errors import ExitCode


def test_unwritable_output_folder_is_exit_3_without_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = subprocess.run([sys.executable, "-m", "envbuild", "wheelhouse", "mirror", "--profile", "cpu",
                          "--out", str(blocker / "wheelhouse")], capture_output=True, text=True, timeout=120)
    assert out.returncode == ExitCode.PREFLIGHT, out.stderr
    assert "Traceback" not in out.stderr
    assert f"error: Not a directory: {blocker / 'wheelhouse'}" in out.stderr
    assert blocker.read_text() == ""


@pytest.mark.parametrize("argv", [["--help"], ["-v", "--help", "provision"]])
def test_help_lists_every_command_and_the_exit_codes(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "envbuild", *argv], capture_output=True, text=True)
    assert out.returncode == 0
    for command in ("plan", "provision", "verify", "lock", "check-lock", "wheelhouse", "preflight",
                    "smoke", "dist-step", "receipt", "docker"):
        assert command in out.stdout
    for code in ExitCode:
        assert f"  {int(code):>3}  " in out.stdout


def test_a_subcommand_parses_alone_and_an_unknown_one_is_a_usage_error() -> None:
    # only the named command's module is imported; its own options and help still work
    out = subprocess.run([sys.executable, "-m", "envbuild", "-v", "provision", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--compile-bytecode" in out.stdout and "--prefetch" in out.stdout
    out = subprocess.run([sys.executable, "-m", "envbuild", "provison"], capture_output=True, text=True)
    assert out.returncode == ExitCode.CONFIG and "Traceback" not in out.stderr


@pytest.mark.parametrize("typo,meant", [("provison", "provision"), ("smok", "smoke"), ("dist_stp", "dist-step"),
                                        ("recipt", "receipt"), ("check-lok", "check-lock")])
def test_a_mistyped_command_gets_the_nearest_one_and_no_usage_dump(typo: str, meant: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", typo, "--root", "/x"]) == ExitCode.CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == f"error: unknown command {typo!r} (did you mean {meant!r}?)"
    assert len(lines) == 2 and "envbuild --help" in lines[1] and "usage:" not in captured.err
    assert main(["no-such-thing"]) == ExitCode.CONFIG
    assert capsys.readouterr().err.startswith("error: unknown command 'no-such-thing'\n")  # nothing near it
