"""A wheelhouse build's own requirements: what the spec's ``build.requires`` names and the target
environment lacks (ninja, psutil, einops for flash-attn) is installed into a folder of its own
under the build cache and put on the build's ``PYTHONPATH`` and ``PATH``, never into the target
environment, whose packages (torch first) stay the ones installed.

They are installed by uv (``uv pip install --target DIR --no-deps``: no requirement can bring
another torch), from the sources pip is configured with (pip.conf, ``PIP_*``), since uv reads no
pip.conf. A folder is reused while its requirements and the target's Python are the same. When
they cannot be installed (no source answers, an offline build host), the error gives the exact
command that installs them into the target environment instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envbuild import events
from envbuild.errors import WheelhouseError
from envbuild.installer import find_uv, pip_config_sources
from envbuild.run import run

__all__ = ["BuildRequires", "provide"]

_DONE = ".envbuild-complete"
_FOUND = (
    "import importlib.util, json, sys\n"
    "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))"
)


@dataclass(frozen=True)
class BuildRequires:
    """The folder a build's missing requirements went into, and how the build sees it."""

    folder: Path
    names: tuple[str, ...]

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with the folder first on ``PYTHONPATH`` and its ``bin`` first on ``PATH``."""
        out = dict(base)
        for key, value in (("PYTHONPATH", self.folder), ("PATH", self.folder / "bin")):
            out[key] = os.pathsep.join(p for p in (str(value), base.get(key, "")) if p)
        return out


def provide(
    label: str,
    python: Path,
    missing: Sequence[str],
    cache: Path,
    environ: Mapping[str, str] | None = None,
) -> BuildRequires:
    """Install ``missing`` for a build with ``python`` into a folder under ``cache``; raise
    ``WheelhouseError`` with the exact command for the target environment when that fails."""
    names = tuple(sorted(dict.fromkeys(missing)))
    key = hashlib.sha256(json.dumps([str(python), names]).encode()).hexdigest()[:16]
    found = BuildRequires(cache / "requires" / key, names)
    if not (found.folder / _DONE).is_file():
        _install(label, python, found, environ)
    still = _still_missing(python, found)
    if still:
        raise WheelhouseError(
            f"{label}: the build requirements {', '.join(still)} are not importable after"
            f" installing them into {found.folder}",
            hint=_by_hand(python, names),
        )
    return found


def _install(
    label: str, python: Path, found: BuildRequires, environ: Mapping[str, str] | None
) -> None:
    uv = find_uv()
    if uv is None:
        raise WheelhouseError(
            f"{label}: the target environment lacks build requirements: {', '.join(found.names)}"
            " (the build runs without isolation), and uv, which installs them for the build, is"
            " not there",
            hint=_by_hand(python, found.names),
        )
    events.emit(
        "info",
        f"{label}: installing its build requirements {', '.join(found.names)} for the build"
        f" into {found.folder} (not into the target environment)",
    )
    sources = pip_config_sources(environ)
    argv = [uv, "pip", "install", "--no-deps", "--target", str(found.folder)]
    argv += ["--python", str(python)]
    if sources.index_url:
        argv += ["--index-url", sources.index_url]
    for url in sources.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in sources.find_links:
        argv += ["--find-links", link]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
    out = run([*argv, *found.names], capture=True, env=env, timeout=600)
    if not out.ok:
        tail = (out.output or "").strip().splitlines()[-5:]
        raise WheelhouseError(
            f"{label}: the target environment lacks build requirements: {', '.join(found.names)}"
            " (the build runs without isolation), and installing them for the build failed:\n"
            + "\n".join(f"  {line}" for line in tail),
            hint=_by_hand(python, found.names),
        )
    (found.folder / _DONE).write_text(json.dumps({"requires": list(found.names)}) + "\n")


def _still_missing(python: Path, found: BuildRequires) -> list[str]:
    out = run(
        [str(python), "-c", _FOUND, *found.names],
        capture=True,
        separate_stderr=True,
        env=found.env(os.environ),
        timeout=60,
    )
    if not out.ok:
        return list(found.names)
    return list(json.loads((out.output or "[]").strip().splitlines()[-1]))


def _by_hand(python: Path, names: Sequence[str]) -> str:
    """The command that installs ``names`` into the target environment, leaving its packages (and
    torch) as they are: ``--no-deps``, so nothing already there is replaced."""
    uv = find_uv()
    argv = (
        [uv, "pip", "install", "--python", str(python), "--no-deps", *names]
        if uv
        else [str(python), "-m", "pip", "install", "--no-deps", *names]
    )
    return f"Install them into the target environment, then build again: {shlex.join(argv)}"
