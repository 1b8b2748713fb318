"""Shared test set-up: the host's installer config is cut off, real venvs and wheels are cached.

PIP_* and UV_* variables are stripped so the developer's shell cannot leak into a test; pip's
own config files (/etc/pip.conf) stay, since the `cpu` profile relies on them for the local
torch CPU wheel on machines without the PyTorch index.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "tests"
TORCH_VERSION = "2.13.0"

pytest_plugins = ["support.fixtures", "support.twin", "support.gatelocks"]


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_as_at_a_terminal() -> Iterator[None]:
    """A shell starts a background job (`make test &`, some CI runners) with SIGINT ignored, and
    every process it starts inherits that: Python then installs no KeyboardInterrupt handler, and
    the tests of Ctrl-C would see a program that cannot be interrupted. Restore the terminal's
    behaviour for the test process and (through exec) every process it starts."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(autouse=True)
def _clean_installer_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in list(os.environ):
        if key.startswith(("PIP_", "UV_")) or key in ("PYTHONPATH", "VIRTUAL_ENV", "ENVBUILD_LOCKFILES"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    yield


def _python311() -> str:
    """An interpreter for which the local torch CPU wheel exists (cp311), else this one."""
    for candidate in ("python3.11", "/usr/bin/python3.11", sys.executable):
        try:
            out = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == "True":
            return candidate
    return sys.executable


@pytest.fixture(scope="session")
def torch_venv() -> Path:
    """A venv holding the real torch 2.13.0 CPU build, made once and reused across runs.

    Returns the venv folder; its interpreter is ``<venv>/bin/python``.
    """
    venv = CACHE / f"torch-{TORCH_VERSION}-venv"
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import torch; assert torch.__version__.startswith('{TORCH_VERSION}')"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return venv
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    subprocess.run([_python311(), "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}", "numpy"],
                   check=True, env=env)
    subprocess.run(check, check=True)
    return venv


@pytest.fixture(scope="session")
def cpu_torch_index() -> str:
    """ENVBUILD_TORCH_INDEX for the cpu profile: the PyTorch CPU index when it answers, else ""
    (pip's configured sources, which hold the CPU wheel on machines without that index).

    "Answers" is provision's own rule (``net.probe`` of the torch page, retried within its
    deadline), so a slow first answer picks the index rather than a source the tests did not mean."""
    if "ENVBUILD_TORCH_INDEX" in os.environ:
        return os.environ["ENVBUILD_TORCH_INDEX"]
    from envbuild.net import probe

    url = "https://download.pytorch.org/whl/cpu"
    return url if probe(url, project="torch").ok else ""
