"""The import warm-up: ``import torch`` in the background while the later steps install.

A fresh venv made by uv has no bytecode: its first ``import torch`` compiles a few thousand
modules (3-4 s on a GPU host; bare uv pays the same on the user's first import). That compile
does not depend on the packages installed after the baseline, so once the baseline step is in,
envbuild starts one ``python -c "import torch"`` beside the remaining steps. The
``.pyc`` files it writes are what any first import would write; when the final import check
runs, torch's bytecode is (mostly) in place and the check costs what a second import costs.

The warm-up is never a verdict: its exit status is ignored, and the final check is a fresh
``import torch`` in the finished environment as before. Files a later step replaces are
recompiled by that check (Python checks each ``.pyc`` against its source's mtime and size), and
the guard never looks at ``__pycache__``. It is skipped where it cannot help: the installer
compiles bytecode itself (pip; uv with ``--compile-bytecode yes``), ``PYTHONDONTWRITEBYTECODE``
is set, only one step runs (``--step``), or ``ENVBUILD_IMPORT_WARMUP=0``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from envbuild import events

__all__ = ["Warmup", "wanted"]

_CODE = "import {module}\n"


def wanted(*, install_env: Mapping[str, str], import_env: Mapping[str, str], compiles_at_install: bool,
           single_step: bool) -> bool:
    """Whether a warm-up can shorten this run's final import check."""
    if import_env.get("ENVBUILD_IMPORT_WARMUP", "1").strip() in ("0", "no", "false", "off"):
        return False
    if compiles_at_install or install_env.get("UV_COMPILE_BYTECODE") or single_step:
        return False
    return not import_env.get("PYTHONDONTWRITEBYTECODE")  # nothing would be written


class Warmup:
    """One background import; ``stop`` ends it (it has usually finished by then)."""

    def __init__(self, python: Path, module: str, env: Mapping[str, str], log_file: Path) -> None:
        self.python, self.module, self.env, self.log_file = python, module, dict(env), log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.seconds: float | None = None  # how long it ran, once stopped
        self.finished: bool | None = None  # whether it ended by itself before the check needed it

    def start(self, after_step: str) -> None:
        try:
            log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child, closed below
        except OSError:
            return
        try:
            self.proc = subprocess.Popen([str(self.python), "-c", _CODE.format(module=self.module)],
                                         env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         close_fds=True)
        except OSError:
            self.proc = None
            return
        finally:
            log.close()
        self.started = time.monotonic()
        events.emit("debug", f"import warm-up: `import {self.module}` in the background after step "
                    f"{after_step} (writes its bytecode while the later steps install)")

    def at_check(self) -> None:
        """The final check starts now: note whether the warm-up is already done."""
        if self.proc is not None and self.finished is None:
            self.finished = self.proc.poll() is not None

    def stop(self) -> None:
        """End it (kill if still running) and reap it; never raises."""
        proc = self.proc
        if proc is None or self.seconds is not None:
            return
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        self.seconds = round(time.monotonic() - self.started, 3)

    def to_json(self) -> dict[str, object]:
        return {"module": self.module, "seconds": self.seconds, "finished_before_check": self.finished}


def env_for_import(overlay: Mapping[str, str]) -> dict[str, str]:
    """The environment the final import check runs with (the process's, plus the overlay)."""
    env = dict(os.environ)
    env.update(overlay)
    return env
