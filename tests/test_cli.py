"""The CLI's last line of defence: a file system that says no is a host error, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fixtures import run_cli

from envbuild.cli import main
from envbuild.errors import ExitCode


def test_unwritable_output_folder_is_exit_3_without_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = run_cli(
        ["wheelhouse", "mirror", "--profile", "cpu", "--out", blocker / "wheelhouse"],
        home=tmp_path / "home",
        timeout=120,
    )
    assert out.rc == ExitCode.PREFLIGHT, out.stderr
    assert "Traceback" not in out.stderr
    assert f"error: Not a directory: {blocker / 'wheelhouse'}" in out.stderr
    assert blocker.read_text() == ""


@pytest.mark.parametrize("argv", [["--help"], ["-v", "--help", "provision"]])
def test_help_lists_every_command_and_the_exit_codes(argv: list[str]) -> None:
    out = run_cli(argv, home=None)
    assert out.rc == 0
    for command in (
        "plan",
        "provision",
        "verify",
        "lock",
        "check-lock",
        "wheelhouse",
        "preflight",
        "smoke",
        "dist-step",
        "receipt",
        "docker",
    ):
        assert command in out.stdout
    for code in ExitCode:
        assert f"  {int(code):>3}  " in out.stdout


def test_a_subcommand_parses_alone_and_an_unknown_one_is_a_usage_error() -> None:
    # only the named command's module is imported; its own options and help still work
    out = run_cli(["-v", "provision", "--help"], home=None)
    assert out.rc == 0 and "--compile-bytecode" in out.stdout and "--prefetch" in out.stdout
    out = run_cli(["provison"], home=None)
    assert out.rc == ExitCode.CONFIG and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "typo,meant",
    [
        ("provison", "provision"),
        ("smok", "smoke"),
        ("dist_stp", "dist-step"),
        ("recipt", "receipt"),
        ("check-lok", "check-lock"),
    ],
)
def test_a_mistyped_command_gets_the_nearest_one_and_no_usage_dump(
    typo: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-v", typo, "--root", "/x"]) == ExitCode.CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == f"error: unknown command {typo!r} (did you mean {meant!r}?)"
    assert len(lines) == 2 and "envbuild --help" in lines[1] and "usage:" not in captured.err
    assert main(["no-such-thing"]) == ExitCode.CONFIG
    # nothing near it
    assert capsys.readouterr().err.startswith("error: unknown command 'no-such-thing'\n")


def test_a_reader_that_goes_away_is_no_error(tmp_path: Path) -> None:
    """`envbuild check-lock FILES | head -1`: the pipe closes early; envbuild stops quietly (141, as
    a Unix filter does), without the disk-error paragraph or a traceback."""
    import fcntl
    import subprocess
    import sys

    locks = []
    for i in range(60):
        lock = tmp_path / f"requirements-{i}.txt"
        lock.write_text("torch==2.10.0\nnumpy==2.3.1\n")
        locks.append(str(lock))
    proc = subprocess.Popen(
        [sys.executable, "-m", "envbuild", "check-lock", "--offline", *locks],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    # F_SETPIPE_SZ: a one-page pipe, so the document cannot fit
    fcntl.fcntl(proc.stdout.fileno(), 1031, 4096)
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) in (0, 141), err  # 0 where the pipe took it all before it closed
    assert "Traceback" not in err and "permissions" not in err, err


def test_a_mistyped_flag_prints_the_commands_usage_and_the_nearest_flag(tmp_path: Path) -> None:
    from support.fixtures import run_cli

    r = run_cli(["provision", "--profle", "cpu"], home=tmp_path / "home", cwd=tmp_path)
    assert r.rc == 2
    assert r.stderr.startswith("usage: envbuild provision ")
    assert "unrecognized arguments: --profle cpu (did you mean '--profile'?)" in r.stderr


def test_empty_paths_and_an_unwritable_markdown_file_are_refused_before_checking(
    tmp_path: Path,
) -> None:
    from support.fixtures import run_cli

    lock = "lockfiles/examples/vision/uv.lock"
    repo = Path(__file__).resolve().parents[1]
    r = run_cli(["check-lock", "--offline", "--accept", "", lock], home=tmp_path / "home", cwd=repo)
    assert r.rc == 2 and "argument --accept: an empty path" in r.stderr
    r = run_cli(
        ["check-lock", "--offline", "--markdown-file", str(tmp_path / "no" / "x.md"), lock],
        home=tmp_path / "home",
        cwd=repo,
    )
    assert r.rc == 2 and "its folder" in r.stderr and "checking" not in r.stderr + r.stdout


def test_verbose_prints_the_cause_under_the_one_paragraph(tmp_path: Path) -> None:
    from support.fixtures import run_cli

    notes = tmp_path / "notes.md"
    notes.write_text("# not a lock\n")
    plain = run_cli(["plan", "--lock", notes], home=tmp_path / "home", cwd=tmp_path)
    loud = run_cli(["-v", "plan", "--lock", notes], home=tmp_path / "home", cwd=tmp_path)
    assert plain.rc == loud.rc == 2
    assert "caused by" not in plain.stderr and "Traceback" not in loud.stderr
    assert (
        "caused by envbuild.errors.ConfigError: " in loud.stderr
        and "cannot tell which kind of lockfile" in loud.stderr
    )


def test_verbose_shows_the_operating_system_error_under_a_missing_file(tmp_path: Path) -> None:
    """The one paragraph names the file; `-v` adds what the system said (`raise ... from exc`)."""
    from support.fixtures import run_cli

    missing = tmp_path / "gone" / "uv.lock"
    plain = run_cli(["check-lock", "--offline", missing], home=tmp_path / "home", cwd=tmp_path)
    loud = run_cli(["-v", "check-lock", "--offline", missing], home=tmp_path / "home", cwd=tmp_path)
    assert plain.rc == loud.rc == 2
    assert f"{missing}: no such lockfile" in plain.stderr and "caused by" not in plain.stderr
    assert (
        "caused by builtins.FileNotFoundError: [Errno 2]" in loud.stderr
        and "Traceback" not in loud.stderr
    )
