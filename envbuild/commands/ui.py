"""Rendering for the CLI: rich on a terminal, plain text otherwise, JSON with --json.

Honours NO_COLOR and non-TTY output. Library events (envbuild.events) are drawn here.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from envbuild import events
from envbuild.errors import EnvbuildError

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)
_verbose = False
_json_mode = False

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


def configure(*, verbose: bool = False, json_mode: bool = False) -> None:
    global _out, _err, _verbose, _json_mode
    no_color = bool(os.environ.get("NO_COLOR"))
    # Not a terminal (CI logs, pipes, golden tests): a fixed, wide layout instead of 80 columns.
    width = None if sys.stdout.isatty() else 160
    _out = Console(highlight=False, soft_wrap=True, no_color=no_color, width=width)
    _err = Console(stderr=True, highlight=False, soft_wrap=True, no_color=no_color)
    _verbose = verbose
    _json_mode = json_mode
    events.set_sink(_render_event)


def close() -> None:
    events.set_sink(None)


def _render_event(event: events.Event) -> None:
    if event.level == "debug" and not _verbose:
        return
    # With --json, stdout carries only the JSON document: progress goes to stderr.
    console = _err if (_json_mode or event.level in ("warn", "error", "fail")) else _out
    style = _STYLE.get(event.level, "")
    text = _PREFIX.get(event.level, "") + event.message
    console.print(text, style=style or None, markup=False)


def error(exc: EnvbuildError) -> None:
    _err.print(f"error: {exc.message}", style="red", markup=False)
    if exc.hint:
        _err.print(exc.hint, markup=False)


def error_text(message: str) -> None:
    _err.print(f"error: {message}", style="red", markup=False)


def error_text_plain(message: str) -> None:
    _err.print(message, markup=False)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def print_text(text: str = "", style: str | None = None) -> None:
    _out.print(text, style=style, markup=False)


def print_table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    table = Table(title=title, show_lines=False, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    _out.print(table)
