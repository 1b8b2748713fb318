"""The torch.compile check in a process of its own, beside the other checks (standalone: no
envbuild, no torch import).

A warm smoke worker spends most of its time importing: torch (about 1.8 s), then dynamo, inductor
and Triton for the torch.compile check (about 2.4 s on an H200 host), all of it Python holding the
GIL, so no thread overlaps one import with the other. ``start`` runs that check in a second
process, started by ``checks.py`` before it imports torch: both import torch at once on two
cores, the second goes on to dynamo and inductor while the first runs the GPU checks, and each
worker takes about the longer of the two instead of their sum. The second process writes its
result beside the worker's (``<out>.compile.json``) and prints its own ``ENVBUILD_SMOKE`` line
on the worker's output; ``Part.collect`` waits for that file (not for the process's exit: its
CUDA teardown overlaps the worker's) and says why when there is none.

On where a GPU is there (``/dev/nvidiactl``, ``CUDA_VISIBLE_DEVICES`` not empty); on CPU the
check stays in the worker. ``ENVBUILD_SMOKE_SPLIT=0``: never; ``=1``: also without a GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

PART_ENV = "ENVBUILD_SMOKE_PART"  # set in the second process: the check it runs
SPLIT_ENV = "ENVBUILD_SMOKE_SPLIT"  # "0": off; "1": on without a GPU too
CHECK = "torch.compile"
OWN_PART_ENV = "ENVBUILD_SMOKE_HAS_PART"  # smoke_early's: this worker started one


class Part:
    """The second process and the result file it writes."""

    def __init__(self, proc: subprocess.Popen[bytes], out: str) -> None:
        self.proc, self.out = proc, out

    def collect(self) -> dict[str, Any]:
        """Its result document, or one whose check failed with the reason there is none."""
        while True:
            ended = self.proc.poll() is not None
            if os.path.exists(self.out):
                try:
                    with open(self.out, encoding="utf-8") as f:
                        doc: dict[str, Any] = json.load(f)
                    os.unlink(self.out)
                    return doc
                except (OSError, ValueError):
                    pass  # not all there yet (its writer replaces it whole: another's might not)
            if ended:
                break
            time.sleep(0.005)
        code = self.proc.wait()
        reason = (
            f"the {CHECK} check's process (pid {self.proc.pid}) exited with {code} before "
            "writing a result; its output is in the smoke log"
        )
        return {"checks": [{"name": CHECK, "verdict": "fail", "reason": reason}], "lost": True}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def wanted(argv: list[str], env: Mapping[str, str]) -> bool:
    """Whether this worker runs the torch.compile check in a second process (see above)."""
    if env.get(PART_ENV) or "--fla-part" in argv or "--out" not in argv:
        return False
    only = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--only"]
    if only and (CHECK not in only or set(only) == {CHECK}):
        return False  # not asked for, or the only thing to do
    split = env.get(SPLIT_ENV, "")
    if split in ("0", "1"):
        return split == "1"
    return env.get("CUDA_VISIBLE_DEVICES") != "" and os.path.exists("/dev/nvidiactl")


def start(script: str, argv: list[str]) -> Part | None:
    """Start the second process where ``wanted``; None otherwise (the worker runs the check)."""
    if not wanted(argv, os.environ):
        return None
    out = argv[argv.index("--out") + 1] + ".compile.json"
    args = [sys.executable, script, "--only", CHECK, "--out", out]
    args += ["--quick"] if "--quick" in argv else []
    # its output is the worker's: its ENVBUILD_SMOKE line reaches smoke as the others do
    proc = subprocess.Popen(args, env={**os.environ, PART_ENV: CHECK}, stdin=subprocess.DEVNULL)
    os.environ[OWN_PART_ENV] = "1"  # NVML's count of processes on the GPU includes it
    return Part(proc, out)


def release_output() -> None:
    """In the second process, once its result is written: let go of the worker's output, so the
    worker's end does not wait for this process's CUDA teardown."""
    if os.environ.get(PART_ENV):
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                os.close(fd)
