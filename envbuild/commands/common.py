"""Arguments shared by several commands.

Every check of an argument happens while argparse reads the command line (a ``type=`` here), so
a bad argument is exit 2 before anything looks at the host (exit 3) or the disk.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from envbuild.spec import StackSpec, resolve_spec


def path_arg(text: str) -> Path:
    """``type=`` of every path option: an empty value (``--root "$UNSET"``) is refused, where
    ``Path("")`` would quietly mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?); give a path, or leave the option out")
    return Path(text)


def nonempty_arg(text: str) -> str:
    """``type=`` of a path-or-URL option kept as text (``--python``, ``--wheelhouse``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty value (an unset shell variable?); give one, or leave the option out")
    return text


WEEK = 7 * 24 * 3600.0  # the longest duration any option takes: beyond it a number is a typo


def seconds_arg(*, maximum: float = WEEK, zero: bool = False) -> Callable[[str], float]:
    """``type=`` of a duration in seconds: a finite number above 0 (or 0 with ``zero``) and at most
    ``maximum``; ``nan``, ``inf``, negative and absurd values are usage errors."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
        low_ok = value >= 0 if zero else value > 0
        if not low_ok or value > maximum:
            low = "0" if zero else "above 0"
            raise argparse.ArgumentTypeError(f"{text} seconds is out of range: give {low}, at most {maximum:g}")
        return value

    parse.__name__ = "seconds"
    return parse


def count_arg(minimum: int, maximum: int, *, special: tuple[int, ...] = ()) -> Callable[[str], int]:
    """``type=`` of a whole number from ``minimum`` to ``maximum`` (or one of ``special``, such as
    ``0`` for "choose for me"): anything else is a usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value not in special and not minimum <= value <= maximum:
            also = f" (or {', '.join(map(str, special))})" if special else ""
            raise argparse.ArgumentTypeError(f"{value} is out of range: give {minimum} to {maximum}{also}")
        return value

    parse.__name__ = "count"
    return parse


def amount_arg(minimum: float, maximum: float, *, special: tuple[float, ...] = ()) -> Callable[[str], float]:
    """``type=`` of a finite number from ``minimum`` to ``maximum`` (or one of ``special``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or (value not in special and not minimum <= value <= maximum):
            also = f" (or {', '.join(f'{v:g}' for v in special)})" if special else ""
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {minimum:g} to {maximum:g}{also}")
        return value

    parse.__name__ = "number"
    return parse


def add_stack_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--profile", metavar="NAME",
                       help="a profile: lockfiles/NAME/stack.toml (default: cpu)")
    group.add_argument("--stack", metavar="FILE", type=path_arg, help="any stack spec file")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")


def load_stack(args: argparse.Namespace) -> StackSpec:
    return resolve_spec(getattr(args, "profile", None), getattr(args, "stack", None))
