"""``python -m envbuild.commands.check_changed [CHECK-LOCK OPTIONS] [FILE...]``: the gate on the
files a change touches, as the pre-commit hook (``.pre-commit-hooks.yaml``) and the GitHub Action
(``action.yml``) run it. Which files are lockfiles is decided by ``envbuild.gate.changed``; this
front end parses the options as ``check-lock`` does and runs it on them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from envbuild.gate.changed import lock_candidates, not_a_lock

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    from envbuild.commands.check_lock import CheckLockArgs
    from envbuild.commands.common import typed
    from envbuild.commands.parser import build_parser
    from envbuild.commands.parser import main as run_cli

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        parsed = typed(CheckLockArgs, build_parser("check_lock").parse_args(["check-lock", *args]))
    except SystemExit as exc:  # a usage error, already printed by argparse
        return int(exc.code or 0)
    files = [str(f) for f in parsed.files]
    keep = lock_candidates(files)
    skipped: list[str] = []
    for f in keep:
        reason = not_a_lock(Path(f))
        if reason is not None:
            print(f"note: {f} left out, not a lock: {reason}", file=sys.stderr)
            skipped.append(f)
    locks = [f for f in keep if f not in skipped]
    if not locks:
        print(f"ok: no lockfile among the {len(files)} file(s) given; nothing to check")
        return 0
    # pre-commit and the action put the files last
    options = [a for a in args if str(Path(a)) not in set(files)]
    return run_cli(["check-lock", *options, *locks])


if __name__ == "__main__":
    sys.exit(main())
