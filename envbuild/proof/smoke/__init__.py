"""Kernel smoke tests: ``checks.py`` runs inside the target venv; this side launches it.

The checks import torch and the CUDA extensions, so they run as a subprocess of the venv's
interpreter (``<venv>/bin/python checks.py``); envbuild itself never imports torch.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild.errors import PreflightError, VerifyError
from envbuild.run import run

CHECKS_SCRIPT = Path(__file__).resolve().parent / "checks.py"
INVENTORY_SCRIPT = Path(__file__).resolve().parents[1] / "inventory.py"
RESULT_MARK = "ENVBUILD_SMOKE "
CHECK_NAMES = ("matmul", "sdpa", "triton", "torch.compile", "flash_attn", "causal_conv1d",
               "mamba_ssm.selective_scan", "fla", "flash_attn_4")

__all__ = ["CHECK_NAMES", "SmokeResult", "describe", "rate", "run_smoke"]
NAME_WIDTH = max(map(len, CHECK_NAMES)) + 2
REASON_CHARS = 160  # a failure's reason in its line; the whole of it is in --json, the receipt and the log


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    checks: list[dict[str, Any]]  # name, verdict, rel_err, tol, seconds, reason, ...
    environment: dict[str, Any]  # torch / CUDA / cuDNN / NCCL versions and the device, as torch saw them
    seconds: float
    returncode: int
    log_file: Path | None
    started: float = 0.0  # time.time() at the launch: with ``timeline``, where the seconds went
    timeline: list[Any] = field(default_factory=list)  # checks.py's phases: [name, time.time(), CPU s]


def describe(res: dict[str, Any]) -> tuple[events.Level, str]:
    """One check's result as one line, printed once when it finishes: pass (``ok``) with its error
    against the tolerance, time and measured rate; fail with its reason; skip (``info``) with its
    reason. The names line up under the CLI's prefixes (``ok ``, ``FAIL ``, and ``skip`` here)."""
    verdict, name = str(res.get("verdict")), str(res.get("name"))
    err, tol = res.get("rel_err"), res.get("tol")
    parts = []
    if isinstance(err, (int, float)) and isinstance(tol, (int, float)):
        parts.append(f"rel err {err:.1e} (tol {tol:.1e})")
    if verdict == "skip":
        return "info", f"skip {name:<{NAME_WIDTH}}{res.get('reason') or ''}"
    parts.append(f"{float(res.get('seconds') or 0):.2f} s")
    if verdict == "fail":
        reason = " ".join(str(res.get("reason") or "").split())
        parts.append(reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 3] + "...")
        return "fail", f"{name:<{NAME_WIDTH}}" + "  ".join(parts)
    shown_rate = rate(res.get("tflops"), res.get("datasheet_tflops"))
    if shown_rate:
        parts.append(shown_rate)
    if res.get("version"):
        parts.append(f"version {res['version']}")
    return "ok", f"  {name:<{NAME_WIDTH}}" + "  ".join(parts)


def rate(tflops: Any, datasheet: Any = None) -> str:
    """A measured throughput, or "" where none was measured (no figure of 0)."""
    if not isinstance(tflops, (int, float)) or not tflops > 0 or tflops != tflops or tflops == float("inf"):
        return ""
    shown = f"{tflops:.0f} TFLOP/s" if tflops >= 10 else f"{tflops:.2g} TFLOP/s" if tflops >= 0.01 else \
        f"{tflops * 1e3:.2g} GFLOP/s"
    if isinstance(datasheet, (int, float)) and datasheet > 0:
        shown += f" ({100 * tflops / datasheet:.0f}% of {datasheet:g})"
    return shown


def run_smoke(
    python: Path,
    *,
    only: tuple[str, ...] = (),
    imports: tuple[str, ...] = (),
    quick: bool = False,
    log_file: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900.0,
) -> SmokeResult:
    """Run the checks with ``python`` (``only``: these checks; ``imports``: also import each of these
    distributions' modules); raises ``PreflightError`` when it or torch is missing,
    ``VerifyError`` when the checks crashed without a result. Failed checks are returned."""
    if not python.exists():
        raise PreflightError(
            f"no Python interpreter at {python}: the venv is missing or incomplete",
            hint="Provision it first (envbuild provision), or point --venv at an existing venv.",
        )
    with tempfile.TemporaryDirectory(prefix="envbuild-smoke-") as tmp:
        out = Path(tmp) / "smoke.json"
        argv: list[str] = [str(python), str(CHECKS_SCRIPT), "--out", str(out)]
        for name in only:
            argv += ["--only", name]
        for dist in imports:
            argv += ["--import", dist]
        if quick:
            argv.append("--quick")

        def on_line(line: str) -> None:
            if line.startswith(RESULT_MARK):
                try:
                    res = json.loads(line[len(RESULT_MARK):])
                except ValueError:
                    return
                level, text = describe(res)
                events.emit(level, text, result=res)
            else:
                events.emit("debug", line)

        run_env = dict(os.environ if env is None else env)
        # inductor's cache in this run's temporary folder when the overlay names none (no /tmp leftovers)
        run_env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tmp) / "inductor"))
        start, started = time.monotonic(), time.time()
        try:
            res = run(argv, log_file=log_file, env=run_env, timeout=timeout, on_line=on_line)
        except FileNotFoundError as exc:
            raise PreflightError(f"cannot run {python}") from exc
        if res.timed_out:
            raise VerifyError(res.hung_message(f"the smoke checks ({python} checks.py)"),
                              hint="A hang in `import torch` or a first CUDA call is usually the driver or a GPU "
                                   "held by another process (see nvidia-smi); raise --timeout for a slow first compile.")
        if not out.is_file():
            if "No module named 'torch'" in res.tail:
                raise PreflightError(f"torch is not installed in {python}; smoke needs the venv's torch")
            where = f"; full log: {log_file}" if log_file else ""
            raise VerifyError(
                f"the smoke checks crashed (exit {res.returncode}) before writing a result{where}. "
                f"Last lines:\n{res.tail}"
            )
        doc = json.loads(out.read_text(encoding="utf-8"))
    return SmokeResult(ok=bool(doc.get("ok")) and res.returncode == 0, checks=doc.get("checks", []),
                       environment=doc.get("environment", {}), seconds=time.monotonic() - start,
                       returncode=res.returncode, log_file=log_file, started=started,
                       timeline=doc.get("timeline", []))
