"""The interpreter probe and the bytecode warm-up, against real interpreters and processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from packaging.markers import default_environment

from envbuild.errors import PreflightError
from envbuild.install import ImportWarmup, find_interpreter, probe_python


def test_probe_answers_version_executable_and_markers_in_one_run() -> None:
    info = probe_python(sys.executable)
    assert info is not None
    assert info.version == "%d.%d" % sys.version_info[:2]
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
    version = "%d.%d" % sys.version_info[:2]
    info = find_interpreter(version, sys.executable)
    assert info.version == version
    with pytest.raises(PreflightError, match="no such interpreter"):
        find_interpreter(version, str(tmp_path / "nope"))


def _package(tmp_path: Path) -> tuple[Path, str]:
    pkg = tmp_path / "site" / "warmpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from warmpkg import heavy\n")
    (pkg / "heavy.py").write_text("VALUE = 1\n" * 2000)
    (pkg / "unused.py").write_text("VALUE = 2\n")
    code = f"import sys; sys.path.insert(0, {str(pkg.parent)!r}); import warmpkg"
    return pkg, code


def test_warmup_writes_bytecode_for_what_the_import_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    pkg, code = _package(tmp_path)
    warm = ImportWarmup()
    warm.start(Path(sys.executable), code)
    warm.wait(timeout=60)
    cached = sorted(p.name.split(".")[0] for p in (pkg / "__pycache__").glob("*.pyc"))
    assert cached == ["__init__", "heavy"]  # only the modules the import needs, not `unused`


def test_warmup_respects_dont_write_bytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    pkg, code = _package(tmp_path)
    warm = ImportWarmup()
    warm.start(Path(sys.executable), code)
    warm.wait(timeout=60)
    assert not (pkg / "__pycache__").exists()


def test_warmup_stop_cancels_the_whole_process_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    pidfile = tmp_path / "child.pid"
    code = (f"import os, subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f" open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    warm = ImportWarmup()
    warm.start(Path(sys.executable), code)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    t = time.monotonic()
    warm.stop()
    assert time.monotonic() - t < 5
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break  # gone
        if state == "Z":
            break  # dead, waiting to be reaped by whoever adopted it
        time.sleep(0.05)
    else:
        pytest.fail("the warm-up's child outlived stop()")
