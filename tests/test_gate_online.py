"""check-lock online: an index that does not answer costs seconds and is named once; offline
verdicts say what they took from the metadata cache; --no-cache judges from the lock alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult
from support.gatelocks import GateIndex, uv_platform_lock
from support.index import BlackHole

pytestmark = pytest.mark.slow


def test_an_index_that_never_answers_is_named_once_and_costs_seconds(
    run_envbuild: Callable[..., EnvbuildResult], gate_index: GateIndex, tmp_path: Path
) -> None:
    lock = uv_platform_lock(
        tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE"
    )
    cache = {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache")}
    with BlackHole() as hole:
        # the lock's packages now say they come from a host that accepts connections and never
        # answers
        dead = hole.url.removesuffix("/simple")
        lock.write_text(lock.read_text().replace(gate_index.server.url, dead))
        t0 = time.monotonic()
        offline = run_envbuild("check-lock", str(lock), "--offline", env=cache)
        t_offline = time.monotonic() - t0
        t0 = time.monotonic()
        online = run_envbuild("check-lock", str(lock), env=cache)
        t_online = time.monotonic() - t0
    assert offline.rc == 0 and online.rc == 0, online.output
    host = dead.removeprefix("http://")
    notes = [ln for ln in online.stdout.splitlines() if f"index at {host} did not answer" in ln]
    assert len(notes) == 1, online.output
    assert "package(s) not checked" in notes[0] and "torch 2.10.0+cu128" in notes[0]
    # the host is the reason, said once
    assert "no metadata in the lock or on its index" not in online.stdout
    assert t_online - t_offline < 10, (t_online, t_offline)


def test_offline_says_what_came_from_the_cache_and_no_cache_ignores_it(
    run_envbuild: Callable[..., EnvbuildResult], gate_index: GateIndex, tmp_path: Path
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index)
    cache = {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache")}
    # reads torch's metadata from the index, caches it
    online = run_envbuild("check-lock", str(lock), env=cache)
    assert online.rc == 0, online.output
    offline = run_envbuild("check-lock", str(lock), "--offline", env=cache)
    assert (
        offline.rc == 0 and "judged with requirements from the metadata cache" in offline.stdout
    ), offline.output
    lone = run_envbuild("check-lock", str(lock), "--offline", "--no-cache", env=cache)
    assert lone.rc == 0 and "metadata cache" not in lone.stdout, lone.output
    assert "torch's runtime requirements were not checked" in lone.stdout


# ----------------------------------------------------------------------------- a lock's shape vs
# envbuild's bugs


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            'name = "torch"\nversion = "2.10.0+cu128"',
            'name = "torch"\nversion = 2',
            "`version` is a int, where uv writes a string",
        ),
        ("source = { registry = ", "source = { registry = 7, x = ", "`registry` is a int"),
        (
            "resolution-markers = [",
            "resolution-markers = [1, ",
            "`resolution-markers` is not an array of strings",
        ),
    ],
)
def test_a_lock_shaped_wrong_is_a_located_finding(
    run_envbuild: Callable[..., EnvbuildResult],
    gate_index: GateIndex,
    tmp_path: Path,
    old: str,
    new: str,
    said: str,
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index)
    text = lock.read_text()
    assert old in text
    lock.write_text(text.replace(old, new, 1))
    r = run_envbuild("check-lock", str(lock), "--offline")
    assert r.rc == 8 and "Traceback" not in r.output, r.output
    assert "[broken-lock]" in r.stdout and said in r.stdout, r.output


def test_a_parser_bug_is_an_internal_error_not_a_finding(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    """An exception of the reader itself (here: a TypeError planted in it) must not read as the
    user's broken lock: exit 1, the traceback, "this is a bug"."""
    import subprocess
    import sys

    lock = uv_platform_lock(tmp_path, gate_index)
    prog = (
        "import sys; import envbuild.gate.formats.uvlock as u\n"
        "def bug(data): raise TypeError('planted bug')\n"
        "u._shape = bug\n"
        "from envbuild.cli import main\n"
        "sys.exit(main(['check-lock', '--offline', sys.argv[1]]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", prog, str(lock)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        "this is a bug" in r.stderr and "planted bug" in r.stderr and "broken-lock" not in r.stdout
    )


def test_a_person_reads_findings_in_100_columns(
    run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    """On a terminal (FORCE_COLOR stands for one) a finding wraps at 100 columns under its
    ``FILE:LINE: PACKAGE:`` head; in a pipe it stays one line for grep, editors and CI logs."""
    from support.fixtures import REPO_ROOT

    twin = REPO_ROOT / "lockfiles" / "examples" / "vision-mismatch" / "uv.lock"
    tty = run_envbuild(
        "check-lock", "--offline", str(twin), env={"FORCE_COLOR": "1", "NO_COLOR": ""}
    )
    piped = run_envbuild("check-lock", "--offline", str(twin))
    assert tty.rc == piped.rc == 8
    import re

    plain = re.sub(r"\x1b\[[0-9;]*m", "", tty.stdout)
    finding = [
        ln
        for ln in plain.splitlines()
        if ("flash-attn" in ln or ln.startswith("    ")) and not ln.startswith("note: ")
    ]
    assert finding and all(len(ln) <= 100 for ln in finding), finding
    assert any(len(ln) > 100 and ": flash-attn: " in ln for ln in piped.stdout.splitlines())
