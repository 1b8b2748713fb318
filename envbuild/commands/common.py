"""Arguments shared by several commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from envbuild.spec import StackSpec, resolve_spec


def add_stack_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--profile", metavar="NAME",
                       help="a profile: lockfiles/NAME/stack.toml (default: cpu)")
    group.add_argument("--stack", metavar="FILE", type=Path, help="any stack spec file")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")


def load_stack(args: argparse.Namespace) -> StackSpec:
    return resolve_spec(getattr(args, "profile", None), getattr(args, "stack", None))
