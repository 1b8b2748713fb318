"""Interpreters: find the Python a venv is made with, and ask one what it is.

Every question is one subprocess through the runner, with a timeout: a broken pyenv shim or
an interpreter that hangs on start-up is a "does not run", never a hang.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild import abi, events
from envbuild.errors import PreflightError
from envbuild.run import run

__all__ = ["Interpreter", "find_interpreter", "find_python", "find_uv", "probe_python", "python_version_of",
           "run_python_json"]


@dataclass(frozen=True)
class Interpreter:
    """What one run of an interpreter says about itself."""

    executable: Path  # sys.executable: the interpreter behind a launcher (pyenv shim, symlink)
    version: str  # major.minor
    marker_env: dict[str, str]  # PEP 508 marker variables: a venv made from it has the same


_PROBE_SCRIPT = abi.MARKER_ENV_CODE + (
    "print(json.dumps({'executable': sys.executable, 'version': '%d.%d' % sys.version_info[:2], "
    "'marker_env': marker_env()}))\n"
)


def probe_python(python: str | Path) -> Interpreter | None:
    """One subprocess: version, real executable and marker environment; None if it does not run.

    ``-I -S``: no user site, no ``PYTHON*`` variables, no site import (a third of the start-up);
    none of what is asked depends on them.
    """
    try:
        out = run([str(python), "-I", "-S", "-c", _PROBE_SCRIPT], capture=True, separate_stderr=True, timeout=20)
        data = json.loads((out.output or "").strip().splitlines()[-1]) if out.ok else None
    except (OSError, ValueError, IndexError):
        return None
    if not isinstance(data, dict) or not data.get("executable"):
        return None
    return Interpreter(executable=Path(data["executable"]), version=str(data["version"]),
                       marker_env={k: str(v) for k, v in data["marker_env"].items()})


def python_version_of(python: str | Path) -> str | None:
    """``major.minor`` of an interpreter, or None if it does not run (e.g. a broken pyenv shim)."""
    info = probe_python(python)
    return info.version if info else None


def find_python(version: str, override: str | None = None) -> Path:
    """The interpreter a venv is made with: ``--python`` or the first python<version> that runs."""
    return find_interpreter(version, override).executable


def _candidates(version: str) -> Iterator[str]:
    if w := shutil.which(f"python{version}"):
        yield w
    yield from (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}")
    yield from sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")), reverse=True)
    yield from sorted(glob.glob(f"/opt/python/cp{version.replace('.', '')}*/bin/python{version}"))
    if w := shutil.which("python3"):
        yield w


def find_interpreter(version: str, override: str | None = None) -> Interpreter:
    """Like ``find_python``, with what the probe learnt (one subprocess per candidate tried)."""
    if override is not None:
        if not override.strip():
            raise PreflightError("--python is empty (an unset shell variable?); give the path of an interpreter")
        found = shutil.which(override) or (override if Path(override).exists() else None)
        if found is None:
            raise PreflightError(f"--python {override}: no such interpreter")
        info = probe_python(found)
        if info is None:
            raise PreflightError(f"--python {override}: the interpreter does not run")
        if info.version != version:
            events.emit("warn", f"--python {override} is Python {info.version}; the stack asks for {version}")
        return info
    seen: set[str] = set()
    for c in _candidates(version):
        real = os.path.realpath(c)
        if real in seen or not os.path.exists(real):
            continue
        seen.add(real)
        info = probe_python(c)
        if info is not None and info.version == version:
            return info
    uv = find_uv()
    if uv:
        out = run([uv, "python", "find", version], capture=True, separate_stderr=True, timeout=30)
        found = (out.output or "").strip()
        if out.ok and found:
            info = probe_python(found)
            if info is not None and info.version == version:
                return info
    raise PreflightError(
        f"Python {version}, which the stack asks for, was not found (looked for python{version} on PATH, "
        "in /usr/bin, /usr/local/bin and ~/.pyenv, and asked uv)",
        hint=f"Install it (Ubuntu: the deadsnakes PPA, `apt install python{version} python{version}-venv`; "
        f"or `uv python install {version}`), or pass --python PATH.",
    )


def find_uv() -> str | None:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def run_python_json(python: Path, code: str, timeout: float = 120, what: str | None = None,
                    env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` with ``python`` and parse the JSON object its last stdout line prints.

    Raises ``TimeoutError`` (naming ``what`` and the timeout) when it hangs, ``RuntimeError``
    with its last error line when it fails.
    """
    out = run([str(python), "-c", code], capture=True, separate_stderr=True, timeout=timeout, env=env)
    if out.timed_out:
        raise TimeoutError(out.hung_message(what or f"{python} -c ..."))
    if not out.ok:
        err = (out.stderr or "").strip()
        raise RuntimeError(err.splitlines()[-1] if err else out.describe(what or str(python)))
    data = json.loads((out.output or "").strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data
