"""The ``envbuild`` console script: ``main`` is ``commands/parser.py``'s (the parser, the command
table, and the one place where errors become exit statuses); nothing under ``commands/`` imports
this module.
"""

from __future__ import annotations

import sys

from envbuild.commands.parser import COMMAND_MODULES, COMMAND_NAMES, build_parser, main

__all__ = ["COMMAND_MODULES", "COMMAND_NAMES", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
