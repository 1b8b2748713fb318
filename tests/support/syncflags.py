"""uv sync's selection flags as envbuild's own command line parses them (``fromlock.cli.add_selection_args``)."""

from __future__ import annotations

import argparse

from envbuild.commands.lockfile import add_selection_args
from envbuild.fromlock.uvsync import SyncFlags

__all__ = ["flags_of"]


def flags_of(argv: list[str]) -> SyncFlags:
    """``argv`` (``["--extra", "cu128", "--no-dev"]``) parsed as ``plan --lock`` parses it."""
    parser = argparse.ArgumentParser()
    add_selection_args(parser)
    ns = parser.parse_args(argv)
    return SyncFlags(extras=tuple(ns.extra), all_extras=ns.all_extras, no_extras=tuple(ns.no_extra),
                     groups=tuple(ns.group), only_groups=tuple(ns.only_group), no_groups=tuple(ns.no_group),
                     all_groups=ns.all_groups, no_default_groups=ns.no_default_groups, no_dev=ns.no_dev,
                     only_dev=ns.only_dev, packages=tuple(ns.package), all_packages=ns.all_packages,
                     no_editable=ns.no_editable, no_install_project=ns.no_install_project,
                     no_install_workspace=ns.no_install_workspace)
