"""The floors in pyproject.toml are true: envbuild installed with every dependency at its floor, on
the oldest Python it supports, runs the README's commands and prints what the README shows; a uv
below its floor is refused, naming the version needed (uv 0.5.31 took `plan --lock` for a bad lock).

Installed with pip from pip's sources (PyPI, or the mirror pip is configured with), each floor
pinned exactly as a constraint: what `--resolution lowest-direct` would pick.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from support import tour
from support.cachedir import TEST_CACHE
from support.fixtures import cache_lock

from envbuild._io import parse_toml

# A fresh venv built from the checkout at the floors: about a minute on a quiet machine (3 under
# load): make test-thorough runs it (make test's README walk covers the commands at today's pins).
pytestmark = [pytest.mark.slow, pytest.mark.pip_sources, pytest.mark.thorough]


def floors() -> dict[str, str]:
    """{dependency: its floor} from pyproject.toml (every dependency has one)."""
    project = parse_toml((tour.REPO / "pyproject.toml").read_text())["project"]
    out = {}
    for raw in project["dependencies"]:
        req = Requirement(raw)
        lows = [s.version for s in req.specifier if s.operator == ">="]
        assert len(lows) == 1, f"{raw}: a dependency without one floor (>=)"
        out[req.name] = lows[0]
    return out


def _oldest_python() -> str:
    """The oldest CPython envbuild supports (3.10) where pyenv has one, else this one."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10.*/bin/python3.10")))
    return found[-1] if found else sys.executable


def _pip_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}


@pytest.fixture(scope="module")
def floor_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with envbuild (this checkout, not editable) and every dependency at its floor."""
    venv = tmp_path_factory.mktemp("floors") / "venv"
    pins = tmp_path_factory.mktemp("pins") / "floors.txt"
    pins.write_text("".join(f"{name}=={v}\n" for name, v in floors().items()))
    subprocess.run([_oldest_python(), "-m", "venv", str(venv)], check=True, capture_output=True)
    with cache_lock(TEST_CACHE / "floors-build"):  # one wheel build of the checkout at a time
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(pins)]
            + ["--disable-pip-version-check", str(tour.REPO)],
            capture_output=True,
            text=True,
            env=_pip_env(),
            timeout=900,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def _readme_blocks(prefixes: tuple[str, ...]) -> str:
    """The README's tour blocks whose commands all start with one of ``prefixes``."""
    text = (tour.REPO / "README.md").read_text()
    kept = [
        text[b.start - 4 : b.end] + "```\n"
        for b in tour.blocks(text)
        if b.steps and all(s.command.startswith(prefixes) for s in b.steps)
    ]
    assert kept, prefixes
    return "\n".join(kept)


def test_envbuild_at_its_floors_runs_the_readmes_gate_and_plan(
    floor_venv: Path, tmp_path: Path
) -> None:
    """At the floors: the README's check-lock blocks and `plan --lock` (which reads uv's export)
    print what the README shows."""
    python = floor_venv / "bin" / "python"
    shown = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, sys; "
            "print(' '.join(f'{n}=={m.version(n)}' for n in sys.argv[1:]))",
            *floors(),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [Version(x.split("==")[1]) for x in shown] == [Version(v) for v in floors().values()]
    text = _readme_blocks(("envbuild check-lock", "envbuild plan --lock"))
    found = tour.run(text, tmp_path, venv=floor_venv)
    assert len([s for b in found for s in b.steps]) >= 3
    problems = tour.differences(found)
    assert not problems, "\n\n".join(problems)


def test_envbuild_at_its_floors_walks_the_whole_readme(floor_venv: Path, tmp_path: Path) -> None:
    """The whole tour at the floors: provision (uv's venv and installs), smoke, dist-step."""
    text = (tour.REPO / "README.md").read_text()
    with tour.private_roots(tour.roots(text)) as paths:
        found = tour.run(text, tmp_path, paths=paths, venv=floor_venv)
    problems = tour.differences(found)
    assert not problems, "\n\n".join(problems)


def test_a_uv_below_the_floor_is_refused_naming_the_version(
    floor_venv: Path, tmp_path: Path
) -> None:
    """uv one release below the floor (it lacks `uv export --format requirements.txt`): the error
    names the uv and the version needed, and how to upgrade it. Last in the file: it leaves the
    older uv in the module's venv."""
    floor = floors()["uv"]
    major, minor, patch = (int(x) for x in floor.split("."))
    older = f"{major}.{minor}.{patch - 1}" if patch else f"{major}.{minor - 1}.0"
    subprocess.run(
        [str(floor_venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
        + ["--disable-pip-version-check", f"uv=={older}"],
        check=True,
        capture_output=True,
        env=_pip_env(),
        timeout=600,
    )
    lock = tour.REPO / "lockfiles" / "examples" / "vision" / "uv.lock"
    out = subprocess.run(
        [str(floor_venv / "bin" / "envbuild"), "plan", "--lock", str(lock)],
        capture_output=True,
        text=True,
        env={**_pip_env(), "NO_COLOR": "1"},
        timeout=300,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"uv {older} (" in out.stderr and f"uv {floor} or newer" in out.stderr, out.stderr
    assert f"'uv>={floor}'" in out.stderr and "Traceback" not in out.stderr
