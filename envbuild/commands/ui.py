"""Rendering for the CLI: rich on a terminal, plain text otherwise, JSON with --json.

Honours NO_COLOR and non-TTY output. Library events (envbuild.events) are drawn here.

On a terminal (stdout a TTY, no ``--quiet``/``--json``, no ``NO_COLOR``, ``TERM`` not ``dumb``) a
live display (``LiveDisplay``) keeps one line per running task under the permanent lines: an install
step's phase read from pip's or uv's output (``progress.InstallProgress``), a wheel build's or
torchrun's last log line, a transfer bar per mirrored file; each with its elapsed time. Everywhere
else the output is the plain, line-based one CI logs keep.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from envbuild import events
from envbuild.errors import EnvbuildError
from envbuild.installer.progress import InstallProgress

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

    from envbuild.commands.documents import Document


class _Writer(Protocol):
    def print(self, text: Any = "", *, style: str | None = None, markup: bool = False) -> None: ...


class PlainConsole:
    """Lines as they are, for logs, pipes and NO_COLOR: what rich would print there, without
    importing rich (a tenth of a second of every command's start on a small machine)."""

    def __init__(self, stderr: bool = False) -> None:
        self.stderr = stderr

    @property
    def file(self) -> TextIO:
        return sys.stderr if self.stderr else sys.stdout  # looked up each time: pytest swaps them

    width = 160  # a table's width where no terminal says (print_table's max_width lowers it)

    def print(self, text: Any = "", *, style: str | None = None, markup: bool = False) -> None:
        # a rich renderable (a table): let rich lay it out, uncoloured
        if not isinstance(text, str):
            from rich.console import Console

            Console(
                file=self.file, width=self.width, no_color=True, highlight=False, soft_wrap=True
            ).print(text)
            return
        self.file.write(text + "\n")
        self.file.flush()


def rich_wanted(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Colour (rich) only on a terminal that can show it; FORCE_COLOR asks for it anywhere."""
    env = os.environ if environ is None else environ
    if env.get("FORCE_COLOR"):
        return True
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty and not env.get("NO_COLOR") and env.get("TERM", "") != "dumb"


def _console(stderr: bool) -> _Writer:
    stream = sys.stderr if stderr else sys.stdout
    if not rich_wanted(stream):
        return PlainConsole(stderr)
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


WIDTH = 100  # the columns a command's own tables are laid out for (print_table's max_width)

_out: _Writer = PlainConsole()
_err: _Writer = PlainConsole(stderr=True)
_verbose = False
_json_mode = False
_quiet = False


def live_wanted(
    *,
    quiet: bool,
    json_mode: bool,
    environ: dict[str, str] | None = None,
    isatty: bool | None = None,
) -> bool:
    """A live display only for a person at a terminal that can redraw lines."""
    env = os.environ if environ is None else environ
    tty = sys.stdout.isatty() if isatty is None else isatty
    return (
        tty
        and not quiet
        and not json_mode
        and not env.get("NO_COLOR")
        and env.get("TERM", "") != "dumb"
    )


class LiveDisplay:
    """Live lines for running tasks, fed by events; permanent lines print above them."""

    def __init__(self, console: Console) -> None:
        from rich.console import Group
        from rich.live import Live
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )
        from rich.table import Column

        self.console = console
        self.tasks = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", table_column=Column(no_wrap=True)),
            TextColumn(
                "{task.fields[detail]}",
                style="cyan",
                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
            ),
            TimeElapsedColumn(),
            console=console,
            expand=True,
        )
        self.transfers = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self.live = Live(
            Group(self.tasks, self.transfers),
            console=console,
            refresh_per_second=8,
            transient=True,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self.lock = threading.RLock()
        self.current: TaskID | None = None
        self.install: InstallProgress | None = None
        self.files: dict[str, TaskID] = {}
        self.started = False

    def _start(self) -> None:
        if not self.started:
            self.live.start()
            self.started = True

    def stop(self) -> None:
        with self.lock:
            if self.started:
                self.live.stop()
                self.started = False

    def _finish_current(self) -> None:
        if self.current is not None:
            self.tasks.remove_task(self.current)
            self.current, self.install = None, None

    def handle(self, event: events.Event) -> bool:
        """Update the live lines; True when the event is fully shown by them (not printed)."""
        with self.lock:
            data = event.data
            if "download" in data:
                return self._transfer(event)
            if event.level == "step":
                self._finish_current()
                self._start()
                self.current = self.tasks.add_task(
                    event.message.split(": ", 1)[0], detail="starting"
                )
                self.install = InstallProgress() if event.message.startswith("step ") else None
                self.live.refresh()
                return False
            if event.level in ("ok", "fail") and self.current is not None:
                self._finish_current()
                return False
            if event.level == "debug" and self.current is not None:
                line = event.message.strip()
                if "progress" in data:
                    done, total = data["progress"]
                    self.tasks.update(self.current, detail=f"[{done}/{total}] {line[-80:]}")
                elif self.install is not None and self.install.feed(event.message):
                    self.tasks.update(self.current, detail=self.install.describe())
                    self.live.refresh()  # every phase is drawn at least once, however short
                elif line and (self.install is None or self.install.phase == "starting"):
                    # a build's or torchrun's last line
                    self.tasks.update(self.current, detail=line[-100:])
                return not _verbose
            return False

    def _transfer(self, event: events.Event) -> bool:
        name = str(event.data["download"])
        if event.level == "debug":
            self._start()
            total = event.data.get("total")
            new = name not in self.files
            if new:
                self.files[name] = self.transfers.add_task(name, total=total)
            completed = event.data.get("completed", 0)
            self.transfers.update(self.files[name], completed=completed, total=total)
            if new or (total is not None and completed >= total):
                self.live.refresh()  # a file's bar is drawn at least once, however fast it came
            return not _verbose
        if name in self.files:
            self.transfers.remove_task(self.files.pop(name))
        return False


_live: LiveDisplay | None = None

_STYLE = {
    "debug": "dim",
    "info": "",
    "warn": "yellow",
    "error": "red",
    "step": "bold",
    "ok": "green",
    "fail": "bold red",
}
_PREFIX = {"warn": "warning: ", "error": "error: ", "fail": "FAIL ", "ok": "ok ", "step": "==> "}


def configure(*, verbose: bool = False, json_mode: bool = False, quiet: bool = False) -> None:
    global _out, _err, _verbose, _json_mode, _quiet, _live
    # Not a terminal (CI logs, pipes, golden tests) or NO_COLOR: plain lines, rich never imported.
    _out, _err = _console(stderr=False), _console(stderr=True)
    _verbose = verbose
    _json_mode = json_mode
    _quiet = quiet
    _live = None
    if live_wanted(quiet=quiet, json_mode=json_mode):
        from rich.console import Console

        assert isinstance(_out, Console)  # a live display implies a terminal that rich_wanted takes
        _live = LiveDisplay(_out)
    events.set_live(_live is not None)
    events.set_sink(_render_event)


def _stop_live() -> None:
    if _live is not None:
        _live.stop()


def close() -> None:
    global _live
    _stop_live()
    _live = None
    events.set_live(False)
    events.set_sink(None)


def _render_event(event: events.Event) -> None:
    global _live
    if _live is not None:
        try:
            if _live.handle(event):
                return
        except Exception:  # noqa: BLE001 - a display problem must never stop the work: go plain
            _stop_live()
            _live = None
            events.set_live(False)
    if event.level == "debug" and not _verbose:
        return
    if event.level == "info" and _quiet:
        return
    # With --json, stdout carries only the JSON document: progress goes to stderr. A failure goes to
    # stderr, except one that is a command's result (a smoke check's line): results stay together.
    problem = event.level in ("warn", "error", "fail") and "result" not in event.data
    console = _err if (_json_mode or problem) else _out
    style = _STYLE.get(event.level, "")
    text = _PREFIX.get(event.level, "") + event.message
    console.print(text, style=style or None, markup=False)


def error(exc: EnvbuildError, *, causes: bool = False) -> None:
    """The one paragraph of a user error (and its hint); ``causes`` (``-v``): the chain of
    exceptions under it, one line each, innermost last."""
    _stop_live()
    _err.print(f"error: {exc.message}", style="red", markup=False)
    if exc.hint:
        _err.print(exc.hint, markup=False)
    if causes:
        seen: set[int] = {id(exc)}
        cause = _cause_of(exc)
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            text = str(cause).splitlines()[0] if str(cause) else ""
            _err.print(
                f"  caused by {type(cause).__module__}.{type(cause).__qualname__}: {text}",
                markup=False,
            )
            cause = _cause_of(cause)


def _cause_of(exc: BaseException) -> BaseException | None:
    """What Python's own traceback shows as the cause: ``raise ... from X`` names X; ``from None``
    hides the exception being handled; otherwise that exception is the context."""
    return exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def error_text(message: str) -> None:
    _stop_live()
    _err.print(f"error: {message}", style="red", markup=False)


def error_text_plain(message: str) -> None:
    _err.print(message, markup=False)


def print_json(data: Document) -> None:
    """A ``--json`` document (``envbuild.commands.documents``) on stdout."""
    _stop_live()
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def print_raw(text: str) -> None:
    """Text as it is (markdown for a PR comment): no wrapping, no markup."""
    _stop_live()
    sys.stdout.write(text)


def print_text(text: str = "", style: str | None = None) -> None:
    _out.print(text, style=style, markup=False)


def print_table(
    title: str | None,
    columns: list[str],
    rows: list[list[str]],
    *,
    max_width: int | None = None,
    keep: int = 0,
) -> None:
    """A table; with ``max_width`` no wider than that (long cells wrap), on a terminal too. The
    first ``keep`` columns (names, keys) are never wrapped: the others make room."""
    from rich.table import Table

    table = Table(title=title, show_lines=False, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, overflow="fold", no_wrap=i < keep)
    for row in rows:
        table.add_row(*row)
    if max_width is None:
        _out.print(table)
    elif isinstance(_out, PlainConsole):
        plain = PlainConsole(_out.stderr)
        plain.width = min(plain.width, max_width)
        plain.print(table)
    else:
        from rich.console import Console

        assert isinstance(_out, Console)  # what _console makes where PlainConsole is not wanted
        _out.print(table, width=min(_out.width, max_width))
