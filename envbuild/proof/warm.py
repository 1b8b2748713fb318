"""The data root's kernel caches warmed after a provision (``provision --warm-kernels``).

The checks that compile kernels on their first run (Triton's, torch.compile's inductor, fla's
autotuned Triton kernels, flash-attn 4's CuTe DSL) write them into the caches under
``<root>/cache`` (``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ...), which every later smoke
worker and training process of that environment reads. ``warm_kernels`` runs those checks once,
on one GPU, with the environment smoke gives its workers, so the first ``envbuild smoke`` after
the provision, on every GPU, finds them compiled (bench/README.md: the warm column). Without a
GPU there is nothing to compile for and it returns at once: a CPU provision costs nothing.
It is opt-in: the compile moves from the first smoke to the provision, about as long either way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild.nvidia import GPU
from envbuild.proof.smoke import run_smoke
from envbuild.proof.smoke.gpus import visible_gpus

# the checks whose first run compiles into the data root's caches
WARM_CHECKS = ("triton", "torch.compile", "fla", "flash_attn_4")

__all__ = ["WARM_CHECKS", "Warmed", "warm_kernels"]


@dataclass(frozen=True)
class Warmed:
    """What the warm-up did: the checks run on ``gpu`` (none: ``skipped`` says why)."""

    checks: tuple[str, ...]
    gpu: GPU | None
    seconds: float
    results: list[dict[str, Any]]
    skipped: str | None = None

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r.get("verdict") == "fail"]

    @property
    def compiled(self) -> list[str]:
        return [str(r.get("name")) for r in self.results if r.get("verdict") == "pass"]

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": None if self.gpu is None else self.gpu.to_json(),
            "checks": list(self.checks),
            "compiled": self.compiled,
            "failed": [{"name": r.get("name"), "reason": r.get("reason")} for r in self.failed],
            "seconds": round(self.seconds, 3),
            "skipped": self.skipped,
        }


def warm_kernels(
    python: Path,
    env: Mapping[str, str],
    *,
    selection: Sequence[str] | None = None,
    checks: Sequence[str] = WARM_CHECKS,
    log_file: Path | None = None,
    timeout: float = 900.0,
) -> Warmed:
    """Run ``checks`` (those of ``selection`` where given: the checks a lock's smoke runs) with
    ``python`` on the first visible GPU, in ``env`` (the one smoke's workers get: the data root's
    caches). Never raises for a failed check (``Warmed.failed``: smoke will say it again)."""
    wanted = tuple(c for c in checks if selection is None or c in selection)
    if not wanted:
        return Warmed((), None, 0.0, [], "none of its checks compiles a kernel")
    gpus = visible_gpus(env)
    if not gpus:
        return Warmed(wanted, None, 0.0, [], "no GPU visible: nothing to compile for")
    start = time.monotonic()
    res = run_smoke(
        python,
        only=wanted,
        log_file=log_file,
        env=dict(env),
        timeout=timeout,
        gpus=gpus[:1],
        slow_margin=None,
    )
    return Warmed(wanted, gpus[0], time.monotonic() - start, res.checks)
