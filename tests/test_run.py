"""The one subprocess runner: deadlines that hold on a silent child, the whole group stopped,
Ctrl-C, cancellation from another thread, secrets kept out of the log. Real processes only."""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from envbuild.errors import Interrupted
from envbuild.run import run


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_silent_child_is_stopped_at_its_deadline() -> None:
    res = run(["sh", "-c", "sleep 30; echo done"], timeout=1, capture=True)
    assert res.timed_out and not res.ok
    assert res.output == ""  # it never got to print
    # stopped at the 1 s deadline the caller set, not waited for: the run's contract, and 30 s is
    # far above any noise of a loaded machine (the bound on speed is in bench/, not here)
    assert res.seconds < 30
    message = res.hung_message("the sleeper")
    assert "the sleeper did not finish within 1 s" in message and "printed nothing" in message
    assert "exit -15" not in message and "crashed" not in message


def test_the_whole_process_group_goes_even_when_it_ignores_sigterm(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"trap '' TERM; (trap '' TERM; sleep 60) & echo $! > {pids}; echo started; wait"
    res = run(["sh", "-c", script], timeout=1, grace=0.5)
    assert res.timed_out and res.returncode == -signal.SIGKILL
    grandchild = int(pids.read_text())
    assert not _alive(grandchild)


def test_a_grandchild_holding_the_pipe_does_not_hold_the_caller() -> None:
    res = run(["sh", "-c", "sleep 60 & echo started"], capture=True)
    assert res.ok and res.output == "started\n"


def test_output_separate_stderr_and_exit_status(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "x.log"
    res = run(
        [
            sys.executable,
            "-c",
            "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
        ],
        capture=True,
        separate_stderr=True,
        log_file=log,
    )
    assert res.returncode == 3 and not res.ok and not res.timed_out
    assert res.output == "out\n" and res.stderr == "err\n"
    text = log.read_text()
    assert "out" in text and "err" in text and "[envbuild] exit status 3" in text
    assert res.describe("the thing") == "the thing failed (exit 3)"


def test_on_line_is_called_on_the_calling_thread() -> None:
    seen: list[tuple[str, str]] = []
    run(
        [sys.executable, "-c", "print('a'); print('b')"],
        on_line=lambda line: seen.append((line, threading.current_thread().name)),
    )
    assert seen == [("a", threading.current_thread().name), ("b", threading.current_thread().name)]


def test_cancel_from_another_thread_stops_the_child() -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    res = run(["sleep", "60"], cancel=cancel)
    assert res.cancelled and not res.ok and res.describe("sleep") == "sleep was cancelled"


def test_ctrl_c_stops_the_child_and_raises_interrupted(tmp_path: Path) -> None:
    pids = tmp_path / "pid"
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(Interrupted) as info:
        run(["sh", "-c", f"echo $$ > {pids}; sleep 60"], interrupt_hint="try again")
    assert info.value.hint == "try again"
    deadline = time.monotonic() + 5
    while _alive(int(pids.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(pids.read_text()))


def test_the_log_is_private_and_has_no_credentials(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    url = "https://alice:s3cret-token@index.example/simple"
    res = run(["sh", "-c", f"echo fetching {url}", "--index-url", url], log_file=log)
    assert res.ok
    text = log.read_text()
    assert "s3cret-token" not in text and "https://***@index.example/simple" in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_a_missing_program_raises_and_the_log_says_so(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    with pytest.raises(FileNotFoundError):
        run(["/nonexistent/program"], log_file=log)
    assert "could not start" in log.read_text()
