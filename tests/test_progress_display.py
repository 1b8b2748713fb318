"""The live progress display, seen on a real pseudo-terminal (screen emulated by pyte).

A person at a terminal sees one live line per running step (the phase read from pip's or uv's
output, with counts, bytes and rate) and, when it ends, the permanent ``ok`` line; CI logs (not a
terminal), ``--quiet``, ``--json`` and ``NO_COLOR``/``TERM=dumb`` keep the plain line-based output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from lockhelpers import lock_env
from packaging.version import Version
from support.fixtures import EnvbuildResult, installer_env
from support.index import IndexServer

from envbuild.commands.ui import live_wanted
from envbuild.installer.progress import InstallProgress

pytest.importorskip("pyte")
from ptyscreen import Screen, run_on_terminal  # needs pyte
from test_wheelhouse_build import (  # needs pyte first
    PACKAGES,
    build_python,  # noqa: F401 - the fixture (real torch venv)
)

BIG = 3 * 1024 * 1024  # uv announces downloads above 1 MiB


def _terminal_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = installer_env(tmp_path / "home", extra)
    if "NO_COLOR" not in extra:
        env.pop("NO_COLOR", None)
    env.setdefault("TERM", "xterm-256color")
    return env


def _provision_args(stack: Path, tmp_path: Path, backend: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "envbuild",
        "provision",
        "--stack",
        str(stack),
        "--root",
        str(tmp_path / "data"),
        "--home",
        str(tmp_path / "home"),
        "--python",
        sys.executable,
        "--backend",
        backend,
    ]


def _stack(
    write_stack: Callable[..., Path],
    wheel_factory: Callable[..., Path],
    index_server: Callable[[Mapping[str, Path]], IndexServer],
) -> Path:
    """The nightly baseline, then a step downloading a 3 MB wheel (big enough for uv to
    announce)."""
    folder = wheel_factory(
        "bulky-data", "1.0", files={"bulky_data/blob.bin": os.urandom(BIG)}
    ).parent
    server = index_server({"bulk": folder})
    return write_stack(
        [{"name": "bulky", "packages": ["bulky-data==1.0"], "index_url": server.simple_url("bulk")}]
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_a_person_sees_each_step_download_and_end_ok(
    write_stack: Callable[..., Path],
    wheel_factory: Callable[..., Path],
    index_server: Callable[[Mapping[str, Path]], IndexServer],
    tmp_path: Path,
    backend: str,
) -> None:
    stack = _stack(write_stack, wheel_factory, index_server)
    screen = run_on_terminal(_provision_args(stack, tmp_path, backend), env=_terminal_env(tmp_path))
    assert screen.rc == 0, screen.text
    # while it ran: the step's live line, its phase read from the installer, with sizes and elapsed
    # time
    live = screen.saw(
        r"step 2/2 bulky .*downloading \d/\d · [\d.]+ [kMG]?B of [\d.]+ MB.* \d:\d\d:\d\d"
    )
    assert live, "\n".join(sorted(screen.seen))
    assert screen.saw(r"step 1/2 torch .*(resolv|download|install)"), "\n".join(sorted(screen.seen))
    # at the end: permanent lines only; the live lines are gone
    assert any(line.startswith("ok step bulky (") for line in screen.final), screen.text
    assert any(line.startswith("ok step torch (") for line in screen.final), screen.text
    assert not [line for line in screen.final if "downloading" in line], screen.text
    assert screen.final[-2].startswith("activate: ") or screen.final[-1].startswith("receipt: "), (
        screen.text
    )


def test_plain_where_no_person_watches(tmp_path: Path) -> None:
    """Not a terminal, --quiet, --json, NO_COLOR, TERM=dumb: no live display."""
    assert live_wanted(quiet=False, json_mode=False, environ={"TERM": "xterm"}, isatty=True)
    assert not live_wanted(quiet=False, json_mode=False, environ={"TERM": "xterm"}, isatty=False)
    assert not live_wanted(quiet=True, json_mode=False, environ={"TERM": "xterm"}, isatty=True)
    assert not live_wanted(quiet=False, json_mode=True, environ={"TERM": "xterm"}, isatty=True)
    assert not live_wanted(
        quiet=False, json_mode=False, environ={"TERM": "xterm", "NO_COLOR": "1"}, isatty=True
    )
    assert not live_wanted(quiet=False, json_mode=False, environ={"TERM": "dumb"}, isatty=True)


def _check_lock_on_terminal(tmp_path: Path, *extra: str, **env: str) -> Screen:
    return run_on_terminal(
        [sys.executable, "-m", "envbuild", *extra, "check-lock", "--profile", "cpu", "--offline"],
        env=_terminal_env(tmp_path, **env),
    )


def test_live_line_on_a_terminal_plain_lines_under_no_color_dumb_quiet(tmp_path: Path) -> None:
    live = _check_lock_on_terminal(tmp_path)
    assert live.rc == 0 and live.saw(r"checking the lock of cpu .*\d:\d\d:\d\d$"), sorted(live.seen)
    assert b"\x1b[?25l" in live.raw  # the live display hides the cursor while it redraws
    for screen in (
        _check_lock_on_terminal(tmp_path, NO_COLOR="1"),
        _check_lock_on_terminal(tmp_path, TERM="dumb"),
        _check_lock_on_terminal(tmp_path, "--quiet"),
    ):
        assert screen.rc == 0, screen.text
        assert not screen.saw(r"\d:\d\d:\d\d$") and b"\x1b[?25l" not in screen.raw, screen.text
        assert "ok cpu: lock ok" in screen.text
    quiet = _check_lock_on_terminal(tmp_path, "--quiet")
    assert "note: dry-run resolution skipped" not in quiet.text  # informational lines are left out


def test_json_on_a_terminal_is_only_the_document(tmp_path: Path) -> None:
    screen = run_on_terminal(
        [sys.executable, "-m", "envbuild", "check-lock", "--profile", "cpu", "--offline", "--json"],
        env=_terminal_env(tmp_path),
    )
    assert screen.rc == 0 and b"\x1b[?25l" not in screen.raw
    piped = subprocess.run(
        [sys.executable, "-m", "envbuild", "check-lock", "--profile", "cpu", "--offline", "--json"],
        capture_output=True,
        text=True,
        env=_terminal_env(tmp_path),
    )
    assert json.loads(piped.stdout)["ok"] is True


def test_install_phases_read_from_pip_and_uv_output() -> None:
    pip = InstallProgress(clock=100.0)
    for line in [
        "Collecting torch==2.13.0+cpu (from -r req.txt (line 1))",
        "  Downloading torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl (180.2 MB)",
    ]:
        pip.feed(line)
    pip.clock = 110.0
    pip.feed("Progress 90100000 of 180200000")
    assert pip.describe().startswith(
        "downloading 0/1 · 90.1 MB of 180.2 MB · 9.0 MB/s · torch-2.13.0"
    )
    pip.feed("Installing collected packages: torch")
    assert pip.describe() == "installing torch" and pip.finished == 1
    uv = InstallProgress(clock=1.0)
    for line in [
        "Resolved 3 packages in 12ms",
        "Downloading numpy (16.0MiB)",
        "Downloading torch (176.3MiB)",
    ]:
        uv.feed(line)
    uv.clock = 3.0
    uv.feed(" Downloaded numpy")
    assert uv.describe().startswith("downloading 1/2 · 16.8 MB of 201.6 MB · 8.4 MB/s")
    uv.feed("Prepared 3 packages in 2.1s")
    assert uv.describe() == "installing 3 packages"
    uv.feed("Installed 3 packages in 40ms")
    assert uv.phase == "installed"


@pytest.mark.slow
def test_mirror_draws_a_transfer_bar(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    wheel_factory: Callable[..., Path],
    index_server: Callable[[Mapping[str, Path]], IndexServer],
    tmp_path: Path,
) -> None:
    stack = _stack(write_stack, wheel_factory, index_server)
    locked = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert locked.rc == 0, locked.output
    screen = run_on_terminal(
        [
            sys.executable,
            "-m",
            "envbuild",
            "wheelhouse",
            "mirror",
            "--lock",
            str(stack.parent),
            "--out",
            str(tmp_path / "wh"),
        ],
        env=_terminal_env(tmp_path, **lock_env(tmp_path)),
    )
    assert screen.rc == 0, screen.text
    bars = screen.saw(r"bulky_data-1\.0-py3-none-any\.whl .*[\d.]+/[\d.]+ MB")
    assert bars, "\n".join(sorted(screen.seen))
    assert (tmp_path / "wh" / "bulky_data-1.0-py3-none-any.whl").is_file()


@pytest.mark.slow
def test_a_wheel_build_shows_its_last_log_line_and_elapsed_time(
    tmp_path: Path,
    build_python: Path,  # noqa: F811
) -> None:
    """`wheelhouse build` of a real C extension (tests/packages/c_ext) against the real CPU
    torch."""
    spec = tmp_path / "c-ext.toml"
    spec.write_text(
        'schema = 1\nname = "c-ext"\nversion = "1.2.0"\n\n[source]\npath ='
        f' "{PACKAGES / "c_ext"}"\n\n[build]\nrequires = ["setuptools", "wheel"]\n'
    )
    screen = run_on_terminal(
        [
            sys.executable,
            "-m",
            "envbuild",
            "wheelhouse",
            "build",
            str(spec),
            "--python",
            str(build_python),
            "--out",
            str(tmp_path / "out"),
            "--cache",
            str(tmp_path / "cache"),
        ],
        env=_terminal_env(tmp_path),
    )
    assert screen.rc == 0, screen.text
    log = next((tmp_path / "out" / "logs").glob("*.log")).read_text()
    live = [
        line
        for line in screen.saw(r"^\S c-ext .* \d:\d\d:\d\d$")
        if (shown := line.split(" ", 3)[3].rsplit(" ", 1)[0].strip()[-40:])
        and shown != "starting"
        and shown in log
    ]  # the line shown is one the build printed
    assert live, "\n".join(sorted(screen.seen))
    assert any("built c_ext-1.2.0+cputorch2.13.0" in line for line in screen.final), screen.text


@pytest.mark.slow
def test_real_pip_reports_bytes_when_asked_and_the_line_follows_them(
    wheel_factory: Callable[..., Path],
    index_server: Callable[[Mapping[str, Path]], IndexServer],
    tmp_path: Path,
    base_venv_template: Path,
) -> None:
    """pip >= 24.1 prints `Progress N of M` with PIP_PROGRESS_BAR=raw (only asked for while a
    display is live, and only of a venv whose pip knows it); its real output moves the step's
    line."""
    from envbuild import events
    from envbuild.plan import progress_env

    wheel = wheel_factory("bulky-data", "1.0", files={"bulky_data/blob.bin": os.urandom(BIG)})
    server = index_server({"bulk": wheel.parent})
    here = Path(sys.executable)  # this venv's pip is new enough
    old = base_venv_template / "bin" / "python"  # a bare venv's bundled pip
    events.set_live(True)
    try:
        asked = progress_env("pip", here)
        bundled = subprocess.run(
            [str(old), "-m", "pip", "--version"], capture_output=True, text=True
        ).stdout
        knows_raw = Version(bundled.split()[1]) >= Version("24.1")
        assert progress_env("pip", old) == ({"PIP_PROGRESS_BAR": "raw"} if knows_raw else {})
        assert progress_env("uv", here) == {}
    finally:
        events.set_live(False)
    # not without a display
    assert asked == {"PIP_PROGRESS_BAR": "raw"} and progress_env("pip", here) == {}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",
            "-d",
            str(tmp_path / "dl"),
            "--index-url",
            server.simple_url("bulk"),
            "bulky-data==1.0",
        ],
        capture_output=True,
        text=True,
        env=installer_env(tmp_path / "home", asked),
    )
    assert out.returncode == 0, out.stderr
    state = InstallProgress()
    seen = []
    for line in out.stdout.splitlines():
        if state.feed(line) and state.phase == "downloading":
            seen.append(state.bytes_done)
    # several steps, never backwards
    assert len(seen) >= 3 and seen == sorted(seen), out.stdout[-2000:]
    assert seen[-1] == wheel.stat().st_size
