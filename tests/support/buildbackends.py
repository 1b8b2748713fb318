"""The common PEP 517 build backends as real wheels (setuptools, hatchling, flit-core, pdm-backend,
poetry-core, uv_build and what they need), served beside the gate's stand-in packages: the index a
generated project builds from, as ``uv sync`` builds a real one.

The wheels are downloaded from the package index pip is configured with once per user, into the
test cache (``TEST_CACHE/build-backends``); later runs need no network. A test that needs them is
skipped where they cannot be had (no network and nothing cached).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.cachedir import TEST_CACHE
from support.gatelocks import REPOS, GateIndex
from support.index import IndexServer

__all__ = ["BACKENDS", "Backend", "backend_wheels", "build_index", "write_package", "write_sdist"]

_FOLDER = TEST_CACHE / "build-backends"
_STAMP = "complete-3"  # bump when the list below changes


@dataclass(frozen=True)
class Backend:
    """One build backend as a project names it."""

    name: str  # the distribution (`flit-core`)
    requires: str  # the project's build-system.requires entry
    build_backend: str


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("setuptools", "setuptools>=61", "setuptools.build_meta"),
        Backend("hatchling", "hatchling", "hatchling.build"),
        Backend("flit-core", "flit_core>=3.4,<5", "flit_core.buildapi"),
        Backend("pdm-backend", "pdm-backend", "pdm.backend"),
        Backend("poetry-core", "poetry-core>=2", "poetry.core.masonry.api"),
        Backend("uv-build", "uv_build>=0.8,<0.20", "uv_build"),
    )
}


# what a backend asks for beyond its build-system.requires (PEP 517's get_requires_for_build_*):
# hatchling's editable build wants `editables`
_DYNAMIC = ("editables",)


def backend_wheels() -> Path:
    """The folder of the backends' wheels (and their dependencies'), downloaded once per user."""
    from support.fixtures import cache_lock

    with cache_lock(_FOLDER):
        if not (_FOLDER / _STAMP).exists():
            tmp = _FOLDER.with_name(_FOLDER.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--only-binary",
                    ":all:",
                    "--disable-pip-version-check",
                    "-d",
                    str(tmp),
                    *(b.name for b in BACKENDS.values()),
                    *_DYNAMIC,
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if out.returncode != 0:
                pytest.skip(
                    f"the build backends' wheels could not be downloaded: {out.stderr[-300:]}"
                )
            shutil.rmtree(_FOLDER, ignore_errors=True)
            tmp.rename(_FOLDER)
            (_FOLDER / _STAMP).write_text("")
    return _FOLDER


@pytest.fixture(scope="session")
def build_index(
    gate_index: GateIndex, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GateIndex]:
    """The gate's stand-in repos, its ``pypi`` also serving the real build backends."""
    root = tmp_path_factory.mktemp("build-index")
    for repo in REPOS:
        if repo != "pypi":
            (root / repo).symlink_to(gate_index.root / repo)
    shutil.copytree(gate_index.root / "pypi", root / "pypi")
    for wheel in backend_wheels().glob("*.whl"):
        shutil.copy(wheel, root / "pypi")
    write_sdist(root / "pypi", "sdist-only", "1.0")
    # PyPI's cache headers on files: uv's cache may then serve a prefetched step offline
    with IndexServer({repo: root / repo for repo in REPOS}, immutable_files=True) as server:
        yield GateIndex(server=server, root=root)


def write_package(folder: Path, name: str, backend: str) -> str:
    """The package source of ``name`` under ``folder`` (``src/<module>/__init__.py``, the layout
    every
    backend finds by itself); returns the ``[build-system]`` table of ``backend``."""
    module = name.replace("-", "_")
    (folder / "src" / module).mkdir(parents=True, exist_ok=True)
    (folder / "src" / module / "__init__.py").write_text(
        f'"""{name}: a generated test package."""\n'
    )
    return _build_system(backend)


def write_sdist(folder: Path, name: str, version: str, backend: str = "setuptools") -> Path:
    """An sdist only (no wheel), built by ``backend``, as ``antlr4-python3-runtime`` is
    published."""
    import io
    import tarfile

    module = name.replace("-", "_")
    base = f"{module}-{version}"
    pyproject = (
        _build_system(backend)
        + f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = ">=3.8"\n'
    )
    files = {
        "pyproject.toml": pyproject,
        f"src/{module}/__init__.py": f'"""{name}."""\n',
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    out = folder / f"{base}.tar.gz"
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{base}/{path}")
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            tf.addfile(info, io.BytesIO(data))
    return out


def _build_system(backend: str) -> str:
    b = BACKENDS[backend]
    return f'[build-system]\nrequires = ["{b.requires}"]\nbuild-backend = "{b.build_backend}"\n\n'
