"""The pip backend: ``<venv>/bin/python -m pip``, configured by pip.conf and ``PIP_*``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from envbuild._io import atomic_write_json
from envbuild.index.net import redact
from envbuild.installer.base import StepRun, create_venv_with, run_step_commands
from envbuild.plan import Backend, InstallerSources, PlannedStep
from envbuild.run import run
from envbuild.spec import StackSpec

__all__ = ["PipInstaller", "pip_config_sources"]


_READER = 2  # how ``_ask_pip`` reads the listing: a change makes every cached answer stale


def _config_key(env: Mapping[str, str]) -> str:
    """What ``pip config list`` depends on: the ``PIP_*`` and XDG variables, the interpreter and
    pip, and the state (mtime, size) of every file pip documents that it reads
    (https://pip.pypa.io/en/stable/topics/configuration/). Only a cache key: pip still parses."""
    home = Path(env.get("HOME") or Path.home())
    files = [env.get("PIP_CONFIG_FILE") or "", "/etc/pip.conf", str(Path(sys.prefix) / "pip.conf"),
             str(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"),
             str(home / ".pip" / "pip.conf"), str(home / "Library" / "Application Support" / "pip" / "pip.conf")]
    files += [str(Path(d) / "pip" / "pip.conf") for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":") if d]
    state = []
    for f in files:
        try:
            st = os.stat(f) if f else None
            state.append(f"{f}:{st.st_mtime_ns}:{st.st_size}" if st else f"{f}:-")
        except OSError:
            state.append(f"{f}:missing")
    variables = sorted((k, v) for k, v in env.items() if k.startswith(("PIP_", "XDG_")) or k in ("HOME", "VIRTUAL_ENV"))
    pip = next(iter(Path(sys.prefix).glob("lib/python3*/site-packages/pip-*.dist-info")), None)
    return hashlib.sha256(json.dumps([_READER, sys.executable, str(pip), state, variables]).encode()).hexdigest()


def _cache_file() -> Path:
    from envbuild.index.client import (
        cache_dir,  # the one cache folder ($ENVBUILD_CACHE_DIR, else XDG)
    )

    return cache_dir() / "pip-config-sources.json"


def pip_config_sources(env: Mapping[str, str] | None = None) -> InstallerSources:
    """The index, extra indexes and find-links pip is configured with (pip.conf and PIP_*).

    ``pip config list`` imports pip (half a second, more on a loaded host, paid by every uv
    provision): its answer is kept in ``~/.cache/envbuild/`` under a key of everything it reads
    (``_config_key``), and asked again when any of it changes; never when a URL carries credentials.
    """
    key = _config_key(os.environ if env is None else env)
    cache = _cache_file()
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        doc = json.loads(cache.read_text(encoding="utf-8"))
        if doc.get("key") == key:
            return InstallerSources(index_url=doc["index_url"], extra_index_urls=tuple(doc["extra_index_urls"]),
                                    find_links=tuple(doc["find_links"]))
    sources = _ask_pip(env)
    urls = [sources.index_url or "", *sources.extra_index_urls, *sources.find_links]
    if any(redact(u) != u for u in urls):
        return sources  # a URL with credentials is never written down: ask pip every time
    with contextlib.suppress(OSError):
        atomic_write_json(cache, {"key": key, "index_url": sources.index_url,
                                  "extra_index_urls": list(sources.extra_index_urls),
                                  "find_links": list(sources.find_links)}, private=True)
    return sources


_SECTION_RANK = {"global": 0, "install": 1, ":env:": 2}  # `pip config list` names PIP_* variables ":env:"


def _ask_pip(env: Mapping[str, str] | None) -> InstallerSources:
    out = run([sys.executable, "-m", "pip", "config", "list"], capture=True, separate_stderr=True, timeout=30, env=env)
    values: dict[str, tuple[int, list[str]]] = {}
    for line in (out.output or "").splitlines():
        m = re.match(r"^([^.]*)\.(index-url|extra-index-url|find-links)='(.*)'$", line.strip())
        if m:
            section, key, raw = m.groups()
            # pip's precedence, not the listing's (alphabetical) order: PIP_* variables (":env:")
            # over the [install] section over [global]
            rank = _SECTION_RANK.get(section, -1)
            if rank >= 0 and rank >= values.get(key, (-1, []))[0]:
                values[key] = (rank, raw.split())
    index = values.get("index-url", (0, [None]))[1][0]
    return InstallerSources(
        index_url=index,
        extra_index_urls=tuple(values.get("extra-index-url", (0, []))[1]),
        find_links=tuple(values.get("find-links", (0, []))[1]),
    )


class PipInstaller:
    name: Backend = "pip"

    def default_sources(self, wheelhouse: str | None) -> InstallerSources:
        return InstallerSources()  # pip reads its own configuration

    def venv_argv(self, python: Path, venv: Path, *, offline_wheelhouse: str | None = None,
                  seed: bool = True) -> list[str]:
        # ensurepip: no index needed, offline or not; always seeded (this backend runs the venv's pip)
        return [str(python), "-m", "venv", str(venv)]

    def create_venv(self, python: Path, venv: Path, *, log_file: Path, offline_wheelhouse: str | None = None,
                    pass_fds: Sequence[int] = (), seed: bool = True) -> None:
        create_venv_with(self.venv_argv(python, venv, offline_wheelhouse=offline_wheelhouse), venv, log_file, pass_fds)

    def compiles_bytecode(self, option: str, *, adopted: bool = False) -> bool:
        return False  # pip writes .pyc files at install by itself: nothing to ask

    def install_env(self, env: Mapping[str, str], python: Path, *, compile_option: str,
                    adopted: bool = False) -> dict[str, str]:
        return dict(env)

    def run_step(self, planned: PlannedStep, *, spec: StackSpec, python: Path, steps_dir: Path,
                 constraints: Path | None, log_file: Path, env: Mapping[str, str], pass_fds: Sequence[int] = (),
                 timeout: float | None = None) -> StepRun:
        return run_step_commands(self, planned, spec=spec, python=python, uv=None, steps_dir=steps_dir,
                                 constraints=constraints, log_file=log_file, env=env, pass_fds=pass_fds,
                                 timeout=timeout)

    def download_argv(self, planned: PlannedStep, *, python: Path, scratch: Path,
                      sources: Sequence[str], requirements: Sequence[str]) -> list[str] | None:
        # the wheel responses land in pip's HTTP cache, where the real install of the same URL finds them
        return [str(python), "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
                "--no-input", "-d", str(scratch), *sources, *requirements]

    def dry_run_argv(self, python: Path, *, args: Sequence[str], requirements_file: Path,
                     report: Path | None) -> list[str]:
        argv = [sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--quiet",
                "--disable-pip-version-check", "--no-input"]
        if report is not None:
            argv += ["--report", str(report)]
        return [*argv, *args, "-r", str(requirements_file)]
