"""The interpreter probe, against real interpreters and things that are not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment

from envbuild.errors import PreflightError
from envbuild.installer import find_interpreter, probe_python


def test_probe_answers_version_executable_and_markers_in_one_run() -> None:
    info = probe_python(sys.executable)
    assert info is not None
    assert info.version == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert Path(info.executable).exists()
    # the same marker variables packaging computes in-process for this interpreter
    assert info.marker_env == {k: str(v) for k, v in default_environment().items()}


def test_probe_of_something_that_does_not_run_is_none(tmp_path: Path) -> None:
    assert probe_python(tmp_path / "missing-python") is None
    broken = tmp_path / "python3"
    broken.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    broken.chmod(0o755)
    assert probe_python(broken) is None
    liar = tmp_path / "python-liar"
    liar.write_text("#!/bin/sh\necho not json\n")
    liar.chmod(0o755)
    assert probe_python(liar) is None


def test_find_interpreter_override(tmp_path: Path) -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    info = find_interpreter(version, sys.executable)
    assert info.version == version
    with pytest.raises(PreflightError, match="no such interpreter"):
        find_interpreter(version, str(tmp_path / "nope"))
