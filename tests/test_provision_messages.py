"""What a user reads when provision meets a common snag: the exact fix, printed once."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, ScenarioIndex
from support.index import UnreachablePort

from envbuild.errors import ExitCode

pytestmark = pytest.mark.slow


def test_unreachable_default_index_gives_the_exact_fix_and_the_fix_works(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    scenario_index: ScenarioIndex,
    tmp_path: Path,
) -> None:
    """A step reads ``${ENVBUILD_T_INDEX-<default URL>}`` and the default does not answer (the
    PyPI CPU index on a machine without it): the error gives the command with the variable empty,
    and that very command provisions from pip's configured sources."""
    with UnreachablePort() as dead:
        stack = write_stack(
            [
                {
                    "name": "helpers",
                    "packages": ["einops-like==0.8.1"],
                    "index_url": "${ENVBUILD_T_INDEX-" + dead.url + "}",
                }
            ]
        )
        args = [
            "provision",
            "--stack",
            str(stack),
            "--root",
            str(tmp_path / "data"),
            "--home",
            str(tmp_path / "home"),
            "--python",
            sys.executable,
            "--backend",
            "pip",
        ]
        failed = run_envbuild(*args)
    assert failed.rc == ExitCode.PREFLIGHT, failed.output
    m = re.search(r"`ENVBUILD_T_INDEX= (envbuild [^`]+)`", failed.stderr)
    assert m, failed.stderr
    assert shlex.split(m.group(1))[1:] == args
    ok = run_envbuild(
        *shlex.split(m.group(1))[1:],
        env={"ENVBUILD_T_INDEX": "", "PIP_INDEX_URL": scenario_index.pypi_url},
    )
    assert ok.rc == 0, ok.output


def test_force_links_says_once_where_it_moved_things(
    write_stack: Callable[..., Path], provision: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / "venv").mkdir(parents=True)
    (home / "venv" / "mine.txt").write_text("mine")
    result = provision(write_stack([]), "--force-links")
    assert result.rc == 0, result.output
    lines = [line for line in result.output.splitlines() if "aside to" in line]
    assert len(lines) == 1, result.output
    aside = Path(lines[0].split(" aside to ")[1].strip())
    assert (aside / "mine.txt").read_text() == "mine"
    assert (home / "venv").is_symlink()
