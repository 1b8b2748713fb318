"""uv sync's selection flags as envbuild's own command line parses them (``commands.selection``)."""

from __future__ import annotations

import argparse

from envbuild.commands.common import typed
from envbuild.commands.selection import SelectionArgs, add_selection_args, sync_flags
from envbuild.gate.uvsync import SyncFlags

__all__ = ["flags_of"]


def flags_of(argv: list[str]) -> SyncFlags:
    """``argv`` (``["--extra", "cu128", "--no-dev"]``) parsed as ``plan --lock`` parses it."""
    parser = argparse.ArgumentParser()
    add_selection_args(parser)
    return sync_flags(typed(SelectionArgs, parser.parse_args(argv)))
