"""torchrun, as its console script runs it, minus the interpreter's teardown (standalone: no
envbuild import).

``python agent.py ARGS`` is ``torchrun ARGS``: the ``torchrun`` script is ``sys.exit(main())``
with torch's ``torch.distributed.run.main``, and so is this; the same agent, rendezvous and
worker processes. Two things differ, both after and around torch's own code:

* when ``main`` has returned or raised (its traceback printed as Python prints it) and the exit
  handlers have run, the process ends with ``os._exit``: the interpreter's teardown frees the
  objects ``import torch`` made one at a time, about a CPU second that the launcher waited for
  after every run (bench/README.md);
* no garbage collection runs during that import (it makes objects, no garbage).

Exit status: 0 when ``main`` returns, a ``SystemExit``'s code, 1 after an exception.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits 1
    return 1


def main() -> int:
    gc.disable()
    try:
        torchrun = importlib.import_module("torch.distributed.run").main
    finally:
        gc.enable()
    sys.argv[0] = "torchrun"
    try:
        torchrun()
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException:  # noqa: BLE001 - reported as an uncaught exception would be
        sys.excepthook(*sys.exc_info())
        return 1


if __name__ == "__main__":
    code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
