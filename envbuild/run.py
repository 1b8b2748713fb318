"""The one way envbuild runs a subprocess and waits for it: timeouts, process groups, redacted
logs (after nox's ``command.run``).

Six modules start a child otherwise, each listed in tests/test_one_owner.py with its reason:
``index/pipconf.py`` (``pip config list``: the package sources sit below this runner, which
imports their redaction), ``provision/warmup.py`` (a background child left running while the
steps go on, stopped or reaped later: nothing here waits for it), ``proof/smoke/__init__.py``
(the planted competing loads, left running while the smoke workers run), and
``proof/smoke/smoke_early.py``, ``proof/smoke/smoke_fla.py`` and ``proof/smoke/smoke_part.py``
(standalone, in the target interpreter).

argv lists only, never a shell; the exact command is logged (credentials in URLs redacted);
output goes to a log file (and, line by line, to an optional callback for progress).

Timeouts that work on a silent child: the output is read on a thread, and the calling thread
waits on that reader with the deadline, so a child that prints nothing (an NCCL collective
that never returns, ``import torch`` blocked on a dead driver, an installer stuck on a
socket) is stopped all the same. Stopping means the child's whole process group (it runs in
its own session): SIGTERM, then SIGKILL after ``grace`` seconds. A timed-out run is a result
of its own (``RunResult.timed_out``) that callers turn into their own error with
``RunResult.hung_message``; it is never reported as a crash with a signal number.

On Ctrl-C the group is stopped the same way and ``Interrupted`` is raised. A ``cancel`` event
stops a run from another thread (the prefetcher's background downloads).
"""

from __future__ import annotations

import contextlib
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from envbuild.errors import Interrupted
from envbuild.index.net import redact

__all__ = ["GRACE_SECONDS", "RunResult", "format_argv", "open_private", "run"]

TAIL_LINES = 30
GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL of a timed-out or interrupted child's group
DRAIN_SECONDS = 2.0  # after the child exits, how long a grandchild may keep its output pipe open


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int
    seconds: float
    tail: str
    log_file: Path | None
    # the whole output (stdout, and stderr unless separate), when capture=True
    output: str | None = None
    stderr: str | None = None  # only with separate_stderr=True
    # stopped at its deadline: ``returncode`` is then the signal's, not the child's
    timed_out: bool = False
    timeout: float | None = None
    cancelled: bool = False  # stopped through ``cancel``
    grace: float = GRACE_SECONDS

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.cancelled

    def hung_message(self, what: str) -> str:
        """One sentence for a timed-out run: what hung, for how long, how it was stopped."""
        last = self.tail.strip().splitlines()[-1:] if self.tail.strip() else []
        said = f" Its last output: {redact(last[0])[:300]!r}." if last else " It printed nothing."
        where = f" Full log: {self.log_file}." if self.log_file else ""
        return (
            f"{what} did not finish within {self.timeout:g} s and was stopped (its process group"
            f" was sent SIGTERM, then SIGKILL after {self.grace:g} s).{said}{where}"
        )

    def describe(self, what: str) -> str:
        """``what`` hung / was cancelled / exited N: the words for any unsuccessful run."""
        if self.timed_out:
            return self.hung_message(what)
        if self.cancelled:
            return f"{what} was cancelled"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"{what} was killed by {name}"
        return f"{what} failed (exit {self.returncode})"


def format_argv(argv: Sequence[str]) -> str:
    return shlex.join(str(a) for a in argv)


def open_private(path: Path, mode: str = "a") -> IO[str]:
    """Open a text file that may hold secrets (logs: an installer's argv and output): mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)  # an older file made before this rule
    return os.fdopen(fd, mode, encoding="utf-8", errors="replace")


_EOF = None
# why a run was stopped; None: it ended by itself
Outcome = Literal["timed_out", "cancelled"] | None


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    capture: bool = False,
    separate_stderr: bool = False,
    on_line: Callable[[str], None] | None = None,
    pass_fds: Sequence[int] = (),
    cancel: threading.Event | None = None,
    grace: float = GRACE_SECONDS,
    interrupt_hint: str | None = None,
) -> RunResult:
    """Run ``argv`` to completion or to its deadline; never raises on a non-zero exit or a
    timeout (the caller decides: ``result.ok``, ``result.timed_out``, ``result.describe``).

    ``log_file`` is appended to (a resumed step keeps its earlier attempts), mode 0600, with
    URL credentials redacted from the command line and every output line. ``on_line`` is
    called on the calling thread. ``pass_fds`` are inherited by the child (provision passes
    its state lock, so an installer orphaned by a SIGKILL keeps the data root locked until it
    exits). ``separate_stderr`` keeps stderr out of ``output``/``tail`` (for a child whose
    stdout is data, e.g. JSON); it still goes to the log.
    Raises ``Interrupted`` on KeyboardInterrupt after stopping the child, and
    ``FileNotFoundError``/``PermissionError`` if the program cannot be started.

    The concerns, one piece each: ``_Output`` (stream and log), ``_spawn`` / ``_Child`` (the
    process and its reader threads), ``_Limit`` with ``_follow`` and ``_await_exit`` (deadline
    and cancellation), ``_stop`` (the process group), ``_result``.
    """
    args = tuple(str(a) for a in argv)
    output = _Output(log_file, capture=capture, separate_stderr=separate_stderr, on_line=on_line)
    output.command(args)
    start = time.monotonic()
    child = _spawn(
        args, output, env=env, cwd=cwd, separate_stderr=separate_stderr, pass_fds=pass_fds
    )
    limit = _Limit(None if timeout is None else start + timeout, cancel)
    outcome: Outcome = None
    try:
        outcome = _follow(child, output, limit)
        if outcome is None:
            outcome = _await_exit(child.proc, limit)
        if outcome is not None:
            _stop(child.proc, grace)
        child.drain(output)  # what the readers had queued before the stop
    except KeyboardInterrupt as exc:
        _stop(child.proc, grace)
        output.note("\n[envbuild] interrupted by the user\n")
        raise Interrupted(
            f"interrupted while running: {redact(format_argv(args))}", hint=interrupt_hint
        ) from exc
    finally:
        returncode = child.returncode()
        output.close(_footer(outcome, timeout, returncode))
        child.join()
    return _result(
        args, returncode, start, output, outcome, timeout=timeout, grace=grace, log_file=log_file
    )


# ----------------------------------------------------------------------------- stream and log


class _Output:
    """Where the child's lines go: the log (redacted), the tail, the capture, ``on_line``."""

    def __init__(
        self,
        log_file: Path | None,
        *,
        capture: bool,
        separate_stderr: bool,
        on_line: Callable[[str], None] | None,
    ) -> None:
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.captured: list[str] | None = [] if capture else None
        self.errors: list[str] | None = [] if separate_stderr else None
        self.on_line = on_line
        self.log = open_private(log_file) if log_file is not None else None

    def command(self, args: tuple[str, ...]) -> None:
        if self.log is not None:
            self.log.write(f"$ {redact(format_argv(args))}\n")
            self.log.flush()

    def line(self, is_err: bool, line: str) -> None:
        text = line.rstrip("\n")
        if self.log is not None:
            self.log.write(redact(line) if line.endswith("\n") else redact(line) + "\n")
        if is_err:
            assert self.errors is not None
            self.errors.append(line)
            return
        self.tail.append(text)
        if self.captured is not None:
            self.captured.append(line)
        if self.on_line is not None:
            self.on_line(text)

    def note(self, text: str) -> None:
        """A line of envbuild's own in the log."""
        if self.log is not None and not self.log.closed:
            self.log.write(text)

    def close(self, footer: str | None = None) -> None:
        if self.log is not None and not self.log.closed:
            if footer:
                self.log.write(footer)
            self.log.close()


def _footer(outcome: Outcome, timeout: float | None, returncode: int | None) -> str:
    if outcome == "timed_out":
        return f"\n[envbuild] no result within {timeout:g} s: stopped (exit status {returncode})\n"
    if outcome == "cancelled":
        return f"\n[envbuild] cancelled (exit status {returncode})\n"
    return f"[envbuild] exit status {returncode}\n"


# ----------------------------------------------------------------------------- spawn


@dataclass
class _Child:
    """The running process and the threads that read its output into ``lines``."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[tuple[bool, str] | None]
    readers: list[threading.Thread]

    def drain(self, output: _Output) -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                item = self.lines.get_nowait()
                if item is not _EOF:
                    output.line(*item)

    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc.returncode is not None else self.proc.poll()

    def join(self) -> None:
        for t in self.readers:
            # a reader still blocked (a grandchild holds the pipe) closes it at EOF
            t.join(timeout=0.5)


def _spawn(
    args: tuple[str, ...],
    output: _Output,
    *,
    env: Mapping[str, str] | None,
    cwd: Path | None,
    separate_stderr: bool,
    pass_fds: Sequence[int],
) -> _Child:
    """Start ``args`` in a session of its own (Ctrl-C reaches us, and we stop the whole child
    group), stdin closed, and one reader thread per output stream."""
    try:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if separate_stderr else subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except OSError:
        output.note("[envbuild] could not start the command\n")
        output.close()
        raise
    lines: queue.Queue[tuple[bool, str] | None] = queue.Queue()
    readers = [
        threading.Thread(
            target=_pump, args=(proc.stdout, False, lines), daemon=True, name="envbuild-run-stdout"
        )
    ]
    if separate_stderr:
        readers.append(
            threading.Thread(
                target=_pump,
                args=(proc.stderr, True, lines),
                daemon=True,
                name="envbuild-run-stderr",
            )
        )
    for t in readers:
        t.start()
    return _Child(proc, lines, readers)


def _pump(stream: IO[str] | None, is_err: bool, out: queue.Queue[tuple[bool, str] | None]) -> None:
    """The reader thread: every line of ``stream`` into ``out``, then ``_EOF``."""
    try:
        if stream is not None:
            for line in stream:
                out.put((is_err, line))
    except (OSError, ValueError):
        pass  # the stream was closed under us after a stop
    finally:
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()  # else a ResourceWarning when the Popen object is collected
        out.put(_EOF)


# ----------------------------------------------------------------------------- deadline


@dataclass(frozen=True)
class _Limit:
    """When a run must stop: its deadline (monotonic seconds) and a cancel event."""

    deadline: float | None
    cancel: threading.Event | None

    def reached(self, now: float) -> Outcome:
        if self.deadline is not None and now >= self.deadline:
            return "timed_out"
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        return None


def _follow(child: _Child, output: _Output, limit: _Limit) -> Outcome:
    """Hand the child's lines to ``output`` until its output closes, it has exited and a
    grandchild keeps the pipe open past ``DRAIN_SECONDS``, or the limit is reached.

    The calling thread waits on the readers' queue with the deadline, so a child that prints
    nothing is stopped all the same."""
    open_streams = len(child.readers)
    exited_at: float | None = None
    while open_streams:
        now = time.monotonic()
        reached = limit.reached(now)
        if reached is not None:
            return reached
        if exited_at is None and child.proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > DRAIN_SECONDS:
            break  # a grandchild holds the pipe open; the command itself is done
        wait = 0.2 if limit.cancel is not None or exited_at is not None else 1.0
        if limit.deadline is not None:
            wait = min(wait, max(0.0, limit.deadline - now))
        try:
            item = child.lines.get(timeout=wait)
        except queue.Empty:
            continue
        if item is _EOF:
            open_streams -= 1
            continue
        output.line(*item)
    return None


def _await_exit(proc: subprocess.Popen[str], limit: _Limit) -> Outcome:
    """The output has closed; wait for the child itself to exit, within the limit."""
    while proc.poll() is None:
        remaining = None if limit.deadline is None else limit.deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return "timed_out"
        if limit.cancel is not None and limit.cancel.is_set():
            return "cancelled"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.2 if remaining is None else min(0.2, remaining))
    return None


# ----------------------------------------------------------------------------- result


def _result(
    args: tuple[str, ...],
    returncode: int | None,
    start: float,
    output: _Output,
    outcome: Outcome,
    *,
    timeout: float | None,
    grace: float,
    log_file: Path | None,
) -> RunResult:
    return RunResult(
        argv=args,
        returncode=returncode if returncode is not None else -int(signal.SIGKILL),
        seconds=time.monotonic() - start,
        tail="\n".join(output.tail),
        log_file=log_file,
        output="".join(output.captured) if output.captured is not None else None,
        stderr="".join(output.errors) if output.errors is not None else None,
        timed_out=outcome == "timed_out",
        timeout=timeout,
        cancelled=outcome == "cancelled",
        grace=grace,
    )


# ----------------------------------------------------------------------------- stop


def _stop(proc: subprocess.Popen[str], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left of it after ``grace``
    seconds."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        proc.poll()
        return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if proc.poll() is not None and not _group_alive(proc.pid):
            return
        time.sleep(0.05)
    # the leader or a grandchild ignored SIGTERM: the group goes either way
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. Zombies do not count: an orphan's zombie
    waits for PID 1 to reap it, which in a container can take seconds."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc (macOS): the group exists, zombie or not
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
