"""Progress events: library code reports, the CLI renders (rich) or ignores.

Library modules never print. They call ``emit(...)``; the CLI installs a sink with
``set_sink``. Tests can install a list-appending sink to assert on what happened.

What the CLI draws as live progress (``envbuild.commands.ui``), by event:

- ``step`` opens a task's live line, ``ok``/``fail`` closes it;
- ``debug`` lines in between are the task's output (an installer's, a build's, torchrun's): the
  live line shows the install phase read from them, or the last line; ``progress=(done, total)``
  is a build's ninja counter;
- ``debug``/``ok``/``fail`` with ``download=FILE`` (``completed``, ``total`` bytes) drive a
  transfer bar per file.

``live()`` tells the library a person is watching a live display, so it may ask a tool for
machine-readable progress (pip's ``--progress-bar raw``) that plain logs would not want.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

Level = Literal["debug", "info", "warn", "error", "step", "ok", "fail"]


@dataclass(frozen=True)
class Event:
    level: Level
    message: str
    data: dict[str, Any] = field(default_factory=dict)


Sink = Callable[[Event], None]


def _null_sink(event: Event) -> None:
    return None


_sink: Sink = _null_sink


def set_sink(sink: Sink | None) -> Sink:
    """Install ``sink`` (None: discard events); returns the previous one."""
    global _sink
    previous = _sink
    _sink = sink or _null_sink
    return previous


@contextlib.contextmanager
def sink(s: Sink) -> Iterator[None]:
    previous = set_sink(s)
    try:
        yield
    finally:
        set_sink(previous)


def emit(level: Level, message: str, **data: Any) -> None:
    _sink(Event(level, message, data))


_live = False


def set_live(on: bool) -> None:
    global _live
    _live = on


def live() -> bool:
    """True while the CLI draws a live display of the events."""
    return _live
