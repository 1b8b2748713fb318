"""Shared test set-up: the host's installer config is cut off, real venvs and wheels are cached.

PIP_* and UV_* variables are stripped so the developer's shell cannot leak into a test; pip's
own config files (/etc/pip.conf) stay, since the `cpu` profile relies on them for the local
torch CPU wheel on machines without the PyTorch index.
"""

from __future__ import annotations

import compileall
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cachedir import TEST_CACHE
from support.thorough import THOROUGH

REPO = Path(__file__).resolve().parents[1]
CACHE = TEST_CACHE
TORCH_VERSION = "2.13.0"

pytest_plugins = ["support.fixtures", "support.twin", "support.gatelocks", "support.buildbackends"]

# Fixtures that install real packages from the host's pip sources (PyPI, or the mirror pip.conf
# names), once per machine into the test cache (~/.cache/envbuild-tests, support/cachedir.py): a
# test that uses one is marked pip_sources (and so network).
PIP_SOURCES_FIXTURES = frozenset({"torch_venv", "build_python", "cpu_torch_index", "build_index"})
# The local indexes' wheel sets and real venvs: a test that uses one runs real pip/uv (seconds
# each, a minute for some), so it is marked slow and stays out of `make check`; so does the strict
# mkdocs build of the documentation site (test_docs.py's `site`, 7 s).
SLOW_FIXTURES = frozenset(
    {"scenario_wheels", "gate_index", "build_index", "index_server", "base_venv_template", "site"}
)
# Whole runs that may take longer than the default per-test timeout on 2 loaded cores (an image
# build is 10-25 minutes; the seed twin provisions the h200 stack, its first test builds the twin).
LONG_TIMEOUTS = {"image": 3600, "seed_twin": 1800}


def pytest_configure(config: pytest.Config) -> None:
    """Write envbuild's bytecode once, before the workers start: the tests start its CLI (``python
    -m envbuild``) about 500 times, and under ``PYTHONDONTWRITEBYTECODE`` (set in the sandbox and
    on CI hosts) no run writes it, so each start compiled every module it imports again (0.3
    CPU-seconds of each). Up-to-date files are skipped; a source changed mid-run is compiled in
    memory as without a cache."""
    if not hasattr(config, "workerinput"):  # the controller, or a run without pytest-xdist
        compileall.compile_dir(REPO / "envbuild", quiet=1)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what a test needs from the fixtures it uses, so that a new test of a real install
    needs no mark to stay out of `make check`: slow and pip_sources for the fixtures above,
    network for every pip_sources test; and the longer timeouts above. Then the slowest files first.
    """
    for item in items:
        if _thorough(item.nodeid) and not item.get_closest_marker("thorough"):
            item.add_marker(pytest.mark.thorough)  # support/thorough.py: left to test-thorough
        used = frozenset(getattr(item, "fixturenames", ()))
        if used & SLOW_FIXTURES and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
        if used & PIP_SOURCES_FIXTURES and not item.get_closest_marker("pip_sources"):
            item.add_marker(pytest.mark.pip_sources)
        if item.get_closest_marker("pip_sources") and not item.get_closest_marker("network"):
            item.add_marker(pytest.mark.network)
        if not item.get_closest_marker("timeout"):  # longer than the 10 minutes of pyproject.toml
            for mark, seconds in LONG_TIMEOUTS.items():
                if item.get_closest_marker(mark):
                    item.add_marker(pytest.mark.timeout(seconds))
                    break
    # pytest-xdist hands out whole files in this order (--dist loadfile): the heaviest files first
    # (a slow test counts 1, one that installs real torch or the twin 4), so that a run does not
    # end on one worker still in a long file while the other waits. The sort is stable: files
    # stay whole and a file's tests keep their order.
    weight: Counter[Path] = Counter()
    for item in items:
        weight[item.path] += (
            4 if item.get_closest_marker("network") else 1 if item.get_closest_marker("slow") else 0
        )
    items.sort(key=lambda item: -weight[item.path])


def _thorough(nodeid: str) -> bool:
    """Whether ``support.thorough`` names ``nodeid``: itself, its test (every parameter), its
    file, or the start of its parameters (``test_x[pure`` for one value of several)."""
    test = nodeid.split("[", 1)[0]
    return (
        nodeid in THOROUGH
        or test in THOROUGH
        or nodeid.split("::", 1)[0] in THOROUGH
        or any("[" in key and nodeid.startswith(key) for key in THOROUGH)
    )


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
        if key.startswith(("PIP_", "UV_")) or key in (
            "PYTHONPATH",
            "VIRTUAL_ENV",
            "ENVBUILD_LOCKFILES",
        ):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    yield


def _python311() -> str:
    """An interpreter for which the local torch CPU wheel exists (cp311), else this one."""
    for candidate in ("python3.11", "/usr/bin/python3.11", sys.executable):
        try:
            out = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == "True":
            return candidate
    return sys.executable


@pytest.fixture(scope="session")
def torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the real torch 2.13.0 CPU build, made once and reused across runs; checked
    (torch imports, at its version) once per run, by the first worker that asks.

    Returns the venv folder; its interpreter is ``<venv>/bin/python``.
    """
    # imported here, not at the top: support.fixtures is a plugin (pytest_plugins), rewritten first
    from support.fixtures import cache_lock, run_folder

    venv = CACHE / f"torch-{TORCH_VERSION}-venv"
    python = venv / "bin" / "python"
    check = [
        str(python),
        "-c",
        f"import torch; assert torch.__version__.startswith('{TORCH_VERSION}')",
    ]
    checked = run_folder(tmp_path_factory) / f"{venv.name}.checked"
    with cache_lock(venv):
        if checked.exists():
            return venv
        if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
            checked.touch()
            return venv
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
        subprocess.run([_python311(), "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}", "numpy"],
            check=True,
            env=env,
        )
        subprocess.run(check, check=True)
        checked.touch()
    return venv


@pytest.fixture(scope="session")
def cpu_torch_index() -> str:
    """ENVBUILD_TORCH_INDEX for the cpu profile: the PyTorch CPU index when it answers, else ""
    (pip's configured sources, which hold the CPU wheel on machines without that index).

    "Answers" is provision's own rule (``net.probe`` of the torch page, retried within its
    deadline), so a slow first answer picks the index rather than a source the tests did not mean.
    """
    if "ENVBUILD_TORCH_INDEX" in os.environ:
        return os.environ["ENVBUILD_TORCH_INDEX"]
    from envbuild.index.net import probe

    url = "https://download.pytorch.org/whl/cpu"
    return url if probe(url, project="torch").ok else ""
