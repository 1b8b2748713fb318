"""The pip backend: ``<venv>/bin/python -m pip``, configured by pip.conf and ``PIP_*``; a lock
stage's ``pylock.toml`` is installed by envbuild's own pip run against the venv (``pylock_pip``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from envbuild.index.pipconf import pip_config_values
from envbuild.installer.base import StepRun, create_venv_with, run_step_commands
from envbuild.plan import Backend, InstallerSources, PlannedStep
from envbuild.spec import StackSpec

__all__ = ["PipInstaller", "pip_config_sources", "pylock_pip", "refuse_without_pip"]

# the first pip that installs from a pylock.toml (``pip install -r pylock.toml``)
PIP_READS_PYLOCK = (26, 1)


def pylock_pip(python: Path, version: str) -> tuple[str, ...] | None:
    """The argv of a pip that installs a lock stage's ``pylock.toml`` into the venv of ``python``
    (its Python ``version``, ``X.Y``): envbuild's own pip, run against the venv (``pip --python``),
    when it reads pylock files and runs on that Python; None otherwise (the stage's index files then
    install as ``name==version`` lines from their index, ``plan.step_commands``), or where
    ``ENVBUILD_PIP_PYLOCK=0`` asks for those lines. The venv's own pip (from ensurepip, 23.2 on
    Python 3.11) reads none."""
    import os
    from importlib.metadata import PackageNotFoundError, metadata

    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        meta = metadata("pip")
        own = Version(meta["Version"])
        fits = SpecifierSet(meta["Requires-Python"] or "").contains(f"{version}.0")
    except (PackageNotFoundError, InvalidVersion, InvalidSpecifier):
        return None
    off = os.environ.get("ENVBUILD_PIP_PYLOCK", "1").strip() in ("0", "no", "false", "off")
    if own.release[:2] < PIP_READS_PYLOCK or not fits or off:
        return None
    return (sys.executable, "-m", "pip", "--python", str(python))


def refuse_without_pip(python: Path, backend: str) -> None:
    """``--backend pip`` runs the venv's own pip; a venv the uv backend made (bare, as ``uv sync``
    makes one) or a ``--venv`` without pip has none: ConfigError (exit 2) before anything runs,
    rather than a step failing on "No module named pip". The one check, for ``provision`` and
    ``provision --lock`` alike."""
    from envbuild.errors import ConfigError

    venv = python.parent.parent
    if (
        backend != "pip"
        or not python.exists()
        or any(venv.glob("lib/python3*/site-packages/pip/__init__.py"))
    ):
        return
    raise ConfigError(
        f"--backend pip: the venv at {venv} has no pip (the uv backend makes a venv "
        "bare, as uv sync does), and the pip backend installs with the venv's own "
        "pip; nothing was changed",
        hint=(
            "Keep the backend that made it (--backend uv, the default), or move the "
            "venv away to have it made again with pip (`--backend pip` seeds a new one)."
        ),
    )


def pip_config_sources(env: Mapping[str, str] | None = None) -> InstallerSources:
    """The index, extra indexes and find-links pip is configured with (pip.conf and PIP_*; read and
    cached by ``index.pipconf``)."""
    values = pip_config_values(env)
    index = values.get("index-url") or []
    return InstallerSources(
        index_url=index[0] if index else None,
        extra_index_urls=tuple(values.get("extra-index-url") or ()),
        find_links=tuple(values.get("find-links") or ()),
    )


class PipInstaller:
    name: Backend = "pip"

    def default_sources(self, wheelhouse: str | None) -> InstallerSources:
        return InstallerSources()  # pip reads its own configuration

    def venv_argv(
        self, python: Path, venv: Path, *, offline_wheelhouse: str | None = None, seed: bool = True
    ) -> list[str]:
        # ensurepip: no index needed, offline or not; always seeded (this backend runs the venv's
        # pip)
        return [str(python), "-m", "venv", str(venv)]

    def create_venv(
        self,
        python: Path,
        venv: Path,
        *,
        log_file: Path,
        offline_wheelhouse: str | None = None,
        pass_fds: Sequence[int] = (),
        seed: bool = True,
    ) -> None:
        create_venv_with(
            self.venv_argv(python, venv, offline_wheelhouse=offline_wheelhouse),
            venv,
            log_file,
            pass_fds,
        )

    def compiles_bytecode(self, option: str, *, adopted: bool = False) -> bool:
        return False  # pip writes .pyc files at install by itself: nothing to ask

    def install_env(
        self, env: Mapping[str, str], python: Path, *, compile_option: str, adopted: bool = False
    ) -> dict[str, str]:
        return dict(env)

    def run_step(
        self,
        planned: PlannedStep,
        *,
        spec: StackSpec,
        python: Path,
        steps_dir: Path,
        constraints: Path | None,
        log_file: Path,
        env: Mapping[str, str],
        pass_fds: Sequence[int] = (),
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> StepRun:
        return run_step_commands(
            self,
            planned,
            spec=spec,
            python=python,
            uv=None,
            pylock_pip=pylock_pip(python, spec.python),
            steps_dir=steps_dir,
            constraints=constraints,
            log_file=log_file,
            env=env,
            pass_fds=pass_fds,
            timeout=timeout,
            on_line=on_line,
        )

    def download_argv(
        self,
        planned: PlannedStep,
        *,
        python: Path,
        scratch: Path,
        sources: Sequence[str],
        requirements: Sequence[str],
    ) -> list[str] | None:
        # the wheel responses land in pip's HTTP cache, where the real install of the same URL finds
        # them: the pip that installs the stage's pylock.toml, where one does (a pip before 23.3
        # keeps another cache format in another folder)
        venv_lib = sorted(python.parent.parent.glob("lib/python3.*"))
        pip = pylock_pip(python, venv_lib[-1].name[6:]) if venv_lib else None
        return [
            *(pip or (str(python), "-m", "pip")),
            "download",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "-d",
            str(scratch),
            *sources,
            *requirements,
        ]

    def dry_run_argv(
        self, python: Path, *, args: Sequence[str], requirements_file: Path, report: Path | None
    ) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--dry-run",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
        ]
        if report is not None:
            argv += ["--report", str(report)]
        return [*argv, *args, "-r", str(requirements_file)]
