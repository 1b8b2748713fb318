"""Which of the files a change touches are lockfiles (``python -m envbuild.commands.check_changed``
runs the gate on them).

What the pre-commit hook (``.pre-commit-hooks.yaml``) and the GitHub Action (``action.yml``) run
on the files a commit or a pull request changed. It keeps the ones that are lockfiles and runs
``envbuild check-lock`` on them with the options given; the others are left out, and a
requirements file left out is named, with the reason:

- by name (``LOCK_NAME``, the hook's ``files`` pattern): ``uv.lock``, ``poetry.lock``,
  ``pixi.lock``,
  ``pylock.toml``, ``pylock.<name>.toml`` (PEP 751) and ``requirements*.txt``;
- a requirements file only when it is a resolution: at least one requirement, and every one pinned
  to one version (``==``) or to a URL, as pip-compile, ``uv pip compile`` and ``pip freeze`` write
  them. An input file (``torch>=2.4``) is not a lock, and judging it as one would fail the change
  on a rule that is not meant for it (one exact torch per environment).

With no lockfile among the files it says so and exits 0: ``envbuild check-lock`` with no FILE
would check envbuild's own profile locks instead, which is not what a hook on a project means.
To judge files of other names, run ``envbuild check-lock FILE...`` on them directly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LOCK_NAME", "lock_candidates", "not_a_lock"]

# A path (relative, "/"-separated) whose file name a lock may have; the hook's `files` pattern.
LOCK_NAME = (
    r"(^|/)(uv\.lock|poetry\.lock|pixi\.lock|pylock(\.[^/]+)?\.toml" r"|requirements[^/]*\.txt)$"
)


def lock_candidates(paths: Sequence[str]) -> list[str]:
    """The paths whose file name a lockfile may have, in order."""
    return [p for p in paths if re.search(LOCK_NAME, p.replace("\\", "/"))]


def not_a_lock(path: Path) -> str | None:
    """Why the requirements file at ``path`` is no lock (None: it is one, or it is no requirements
    file)."""
    from envbuild.gate.formats import requirements
    from envbuild.gate.model import LockParseError

    if not path.name.endswith(".txt"):
        return None
    try:
        entries = requirements.parse(
            path, path.read_text(encoding="utf-8", errors="replace")
        ).entries
    except LockParseError:
        return None  # check-lock reports where it cannot be read
    if not entries:
        return "it names no package"
    loose = [e.raw for e in entries if e.version is None and e.url is None]
    if loose:
        more = f" and {len(loose) - 1} more requirement(s)" if len(loose) > 1 else ""
        return f"`{loose[0]}`{more} not pinned with =="
    return None
