"""Arguments shared by several commands."""

from __future__ import annotations

import argparse
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


def add_stack_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--profile", metavar="NAME",
                       help="a profile: lockfiles/NAME/stack.toml (default: cpu)")
    group.add_argument("--stack", metavar="FILE", type=path_arg, help="any stack spec file")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")


def load_stack(args: argparse.Namespace) -> StackSpec:
    return resolve_spec(getattr(args, "profile", None), getattr(args, "stack", None))
