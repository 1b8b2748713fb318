"""The uv backend: ``uv pip install --python <venv>``; uv does not read pip.conf, so the sources
pip is configured with are handed to it explicitly (``default_sources``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from envbuild.errors import PreflightError
from envbuild.installer.base import StepRun, create_venv_with, run_step_commands
from envbuild.installer.pip import pip_config_sources
from envbuild.plan import Backend, InstallerSources, PlannedStep
from envbuild.spec import StackSpec

__all__ = ["UvInstaller", "compiles_at_install"]

# uv writes no .pyc files unless asked; then the first `import torch` of every process compiles
# what it loads (2-4 s for torch). `uv pip install --compile-bytecode` compiles every file of every
# package in parallel: measured in bench/ (results-gpu-h100-torch-cu130-warmup.json), it costs
# 0.9 s on a warm 16-core provision and gains nothing cold against the import warm-up
# (provision/warmup.py), which writes the bytecode `import torch` needs beside the later steps.
# So `auto` leaves it off everywhere; `yes` asks for it (an image that should carry every .pyc).


class UvInstaller:
    name: Backend = "uv"

    def __init__(self, uv: str) -> None:
        self.uv = uv

    def default_sources(self, wheelhouse: str | None) -> InstallerSources:
        return InstallerSources() if wheelhouse else pip_config_sources()

    def venv_argv(
        self, python: Path, venv: Path, *, offline_wheelhouse: str | None = None, seed: bool = True
    ) -> list[str]:
        if not seed:
            return [self.uv, "venv", "--python", str(python), str(venv)]
        # --seed puts pip in the venv; offline, uv must get it from the wheelhouse, not its default
        # index
        source = ["--no-index", "--find-links", offline_wheelhouse] if offline_wheelhouse else []
        return [self.uv, "venv", "--seed", *source, "--python", str(python), str(venv)]

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
        argv = self.venv_argv(python, venv, offline_wheelhouse=offline_wheelhouse, seed=seed)
        create_venv_with(argv, venv, log_file, pass_fds)

    def compiles_bytecode(self, option: str, *, adopted: bool = False) -> bool:
        """Only when asked (``yes``): ``auto`` and ``no`` leave bytecode to the import warm-up and
        the import check (see above)."""
        return option == "yes"

    def install_env(
        self, env: Mapping[str, str], python: Path, *, compile_option: str, adopted: bool = False
    ) -> dict[str, str]:
        out = dict(env)
        if self.compiles_bytecode(compile_option, adopted=adopted):
            out["UV_COMPILE_BYTECODE"] = "1"
        elif compile_option == "no":
            out.pop("UV_COMPILE_BYTECODE", None)
        return out

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
            uv=self.uv,
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
        # uv has no download-only mode (astral-sh/uv#3163): installing into a throw-away prefix
        # downloads and unpacks each wheel into uv's cache, which the real step then links from;
        # a prefix, not a target, lays the files out as in a venv (``lib/python3.X/site-packages``,
        # ``bin``, data and headers beside them, RECORD rows as a venv's), so that a lock's
        # prepared tree can be moved into the venv as it is (``provision.movein``); index files go
        # through a pylock.toml as in the real step (uv caches them by index, not by URL), what a
        # pylock cannot hold is left to the real step
        requirements = _as_pylock(requirements)
        return [
            self.uv,
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--python",
            str(python),
            "--prefix",
            str(scratch),
            *sources,
            *requirements,
        ]

    def dry_run_argv(
        self, python: Path, *, args: Sequence[str], requirements_file: Path, report: Path | None
    ) -> list[str]:
        if report is not None:
            raise PreflightError(
                "uv's dry run writes no JSON report; use the pip backend for a report"
            )
        return [
            self.uv,
            "pip",
            "install",
            "--dry-run",
            "--python",
            str(python),
            *args,
            "-r",
            str(requirements_file),
        ]


def compiles_at_install(env: Mapping[str, str]) -> bool:
    """Whether uv, run with ``env``, writes bytecode as it installs: ``UV_COMPILE_BYTECODE`` set
    (``install_env`` with ``--compile-bytecode yes``, or the user's own), read as uv reads a
    boolean (``0``, ``false``, ``no``, ``off``: not set)."""
    return env.get("UV_COMPILE_BYTECODE", "").strip().lower() not in ("", "0", "false", "no", "off")


def _as_pylock(requirements: Sequence[str]) -> list[str]:
    """``-r FILE`` of a lock stage's lines as the real step reads them: its index files in a
    ``pylock.toml`` beside it (``spec.stepfile.stage_pylock``); anything else as it is."""
    from envbuild.spec.stagefile import stage_pylock

    if len(requirements) != 2 or requirements[0] != "-r":
        return list(requirements)
    path = Path(requirements[1])
    try:
        split = stage_pylock(path.read_text(encoding="utf-8"), str(path))
    except OSError:
        return list(requirements)
    if split.pylock is None:
        return list(requirements)
    out = path.with_name(f"pylock.{path.stem}.toml")
    out.write_text(split.pylock, encoding="utf-8")
    rest = rest_file(out)  # what a pylock cannot hold: the prefetch's second run (``rest_file``)
    if split.rest:
        rest.write_text(split.rest, encoding="utf-8")
    else:
        rest.unlink(missing_ok=True)
    return ["-r", str(out)]


def rest_file(pylock: Path) -> Path:
    """The lines of a lock stage a ``pylock.NAME.toml`` cannot hold (editables, folders, git),
    written beside it as ``NAME.rest.txt``: the run after it, as the real step's
    (``plan._uv_pylock_runs``)."""
    return pylock.with_name(f"{pylock.name[len('pylock.') : -len('.toml')]}.rest.txt")
