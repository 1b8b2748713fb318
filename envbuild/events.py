"""Progress events: library code reports, the CLI renders (rich) or ignores.

Library modules never print. They call ``emit(...)``; the CLI installs a sink with
``set_sink``. Tests can install a list-appending sink to assert on what happened.
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
