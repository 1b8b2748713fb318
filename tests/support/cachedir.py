"""Where the tests keep what speeds the next run: one folder per user, shared by every checkout.

The real torch CPU venv, the wheel build venv, the seed twin, Poetry's and pre-commit's
environments (about 1.5 GB) are built once per machine, not once per clone: a fresh clone (CI's,
a worktree) finds them built. Each is checked before it is used (torch imports at its version,
the twin's folder is named by its version, pre-commit's by envbuild's snapshot) and rebuilt when
it does not fit. ``ENVBUILD_TEST_CACHE`` moves it; ``make clean`` removes it.
"""

from __future__ import annotations

import os
from pathlib import Path


def _default() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuild-tests"


TEST_CACHE = Path(os.environ.get("ENVBUILD_TEST_CACHE") or _default())
