"""Run a command on a real pseudo-terminal and keep what a person would have seen (pyte emulates the
screen)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyte

_PIECE = re.compile(rb"(?<=[\r\n])")  # redraws start with a carriage return or a new line


@dataclass
class Screen:
    rc: int
    final: list[str]  # the screen at the end, trailing blanks stripped
    seen: set[str] = field(default_factory=set)  # every line that was on the screen at some moment
    raw: bytes = b""

    def saw(self, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        return sorted(line for line in self.seen if rx.search(line))

    @property
    def text(self) -> str:
        return "\n".join(self.final)


def run_on_terminal(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    cols: int = 150,
    rows: int = 80,
    timeout: float = 600,
) -> Screen:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        list(argv),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=dict(env),
        cwd=cwd,
        close_fds=True,
        start_new_session=True,
    )
    os.close(slave)
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    seen: set[str] = set()
    raw = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child side is closed
                break
            if not data:
                break
            raw += data
            for piece in _PIECE.split(data):
                stream.feed(piece)
                seen.update(line.rstrip() for line in screen.display if line.strip())
        else:
            proc.kill()
    finally:
        os.close(master)
    rc = proc.wait(timeout=30)
    final = [line.rstrip() for line in screen.display]
    while final and not final[-1]:
        final.pop()
    return Screen(rc, final, seen, bytes(raw))
