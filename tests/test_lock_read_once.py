"""One command reads a project's lock once: the envbuild process opens the lock and its
``pyproject.toml`` one time each (``gate.lockfile.ProjectLock`` is read once and handed down).

Measured with an audit hook (``sys.addaudithook``, the ``open`` event) in a subprocess that runs the
real CLI on the README's example lock, ``lockfiles/examples/vision/uv.lock``. What uv's own
subprocesses read (``uv export``) is theirs, not counted. The hook is shown to count: the
command's second read of the lock in a planted run counts two.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.fixtures import installer_env

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "examples" / "vision" / "uv.lock"
PYPROJECT = LOCK.parent / "pyproject.toml"

# the CLI run under a hook that counts the opens of the files named on its command line
COUNTING = """
import atexit, json, os, sys

out, lock, pyproject, planted, *argv = sys.argv[1:]
counts = {os.path.realpath(lock): 0, os.path.realpath(pyproject): 0}


def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.realpath(os.fsdecode(args[0]))
        if path in counts:
            counts[path] += 1


def write():
    with open(out, "w") as f:
        json.dump({"lock": counts[os.path.realpath(lock)],
                   "pyproject": counts[os.path.realpath(pyproject)]}, f)


sys.addaudithook(hook)
atexit.register(write)
if planted == "1":  # a second read of the lock, as a command that read it twice would make
    open(lock, "rb").close()
from envbuild.commands.parser import main

sys.exit(main(argv))
"""


def opens(tmp_path: Path, *argv: str, planted: bool = False) -> tuple[dict[str, int], str]:
    """How many times the CLI's own process opens the lock and the pyproject running ``argv``."""
    out = tmp_path / "opens.json"
    res = subprocess.run(
        [sys.executable, "-c", COUNTING, str(out), str(LOCK), str(PYPROJECT)]
        + ["1" if planted else "0", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=installer_env(tmp_path / "home"),
        timeout=600,
    )
    counted: dict[str, int] = json.loads(out.read_text())
    return counted, res.stdout + res.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--lock", str(LOCK), "--json"],
        ["check-lock", str(LOCK), "--offline"],
    ],
    ids=["plan --lock", "check-lock"],
)
def test_a_command_opens_the_lock_and_its_pyproject_once(tmp_path: Path, argv: list[str]) -> None:
    counted, output = opens(tmp_path, *argv)
    assert "Traceback" not in output, output
    assert counted == {"lock": 1, "pyproject": 1}, (counted, output)


def test_the_count_sees_a_second_read(tmp_path: Path) -> None:
    counted, output = opens(tmp_path, "check-lock", str(LOCK), "--offline", planted=True)
    assert counted == {"lock": 2, "pyproject": 1}, (counted, output)
