"""The one way envbuild runs a subprocess (after nox's ``command.run``).

argv lists only, never a shell; the exact command is logged; output goes to a log file
(and, line by line, to an optional callback for progress); on Ctrl-C the child is
terminated, then killed, and ``Interrupted`` is raised.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envbuild.errors import Interrupted

TAIL_LINES = 30


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int
    seconds: float
    tail: str
    log_file: Path | None
    output: str | None = None  # the whole output, only when capture=True

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def format_argv(argv: Sequence[str]) -> str:
    return shlex.join(str(a) for a in argv)


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    capture: bool = False,
    on_line: Callable[[str], None] | None = None,
    pass_fds: Sequence[int] = (),
) -> RunResult:
    """Run ``argv`` to completion; never raises on a non-zero exit (the caller decides).

    ``log_file`` is appended to (a resumed step keeps its earlier attempts). ``pass_fds`` are
    inherited by the child (provision passes its state lock, so an installer orphaned by a
    SIGKILL keeps the data root locked until it exits).
    Raises ``Interrupted`` on KeyboardInterrupt after stopping the child, and
    ``FileNotFoundError`` if the program does not exist.
    """
    args = tuple(str(a) for a in argv)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    captured: list[str] | None = [] if capture else None
    log = None
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log = log_file.open("a", encoding="utf-8", errors="replace")
        log.write(f"$ {format_argv(args)}\n")
        log.flush()
    start = time.monotonic()
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
        start_new_session=True,  # Ctrl-C reaches us, and we stop the whole child group
        pass_fds=tuple(pass_fds),
    )
    try:
        assert proc.stdout is not None
        deadline = None if timeout is None else start + timeout
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if log is not None:
                log.write(line)
            if captured is not None:
                captured.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
            if deadline is not None and time.monotonic() > deadline:
                _stop(proc)
                break
        returncode = proc.wait(timeout=None if deadline is None else max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _stop(proc)
        returncode = -signal.SIGKILL
    except KeyboardInterrupt:
        _stop(proc)
        if log is not None:
            log.write("\n[envbuild] interrupted by the user\n")
            log.close()
        raise Interrupted(f"interrupted while running: {format_argv(args)}",
                          hint="The state is saved: run the same command again to resume.") from None
    finally:
        if log is not None and not log.closed:
            log.write(f"[envbuild] exit status {proc.returncode}\n")
            log.close()
        if proc.stdout is not None:
            proc.stdout.close()  # else a ResourceWarning when the Popen object is collected
    return RunResult(
        argv=args,
        returncode=returncode,
        seconds=time.monotonic() - start,
        tail="\n".join(tail),
        log_file=log_file,
        output="".join(captured) if captured is not None else None,
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    """Terminate the child's process group, then kill it if it does not go."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
