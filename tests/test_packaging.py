"""Installing envbuild: no setuptools warnings, and the profiles ship inside the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild._io import parse_toml

REPO = Path(__file__).resolve().parents[1]


def test_every_profile_folder_that_looks_like_a_package_is_listed() -> None:
    """setuptools treats lockfiles/<name>/ as the package envbuild._lockfiles.<name> when <name>
    is an identifier and package data comes from it, and warns at every install unless it is in
    `packages`. A folder that is no profile (lockfiles/examples/: check-lock's example locks, for
    a checkout only) is deliberately not shipped: nothing directly in it matches the data globs."""
    setuptools = parse_toml((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = setuptools["packages"]
    # "*/*.toml" -> "*.toml"
    data_globs = [g.split("/", 1)[1] for g in setuptools["package-data"]["envbuild._lockfiles"]]
    folders = [p for p in (REPO / "lockfiles").iterdir() if p.is_dir() and p.name.isidentifier()]
    profiles = [p.name for p in folders if (p / "stack.toml").is_file()]
    assert "cpu" in profiles, "the cpu profile is expected under lockfiles/"
    shipped = [p.name for p in folders if any(any(p.glob(g)) for g in data_globs)]
    missing = [
        f"envbuild._lockfiles.{name}"
        for name in sorted({*profiles, *shipped})
        if f"envbuild._lockfiles.{name}" not in packages
    ]
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert (REPO / "lockfiles" / "examples") in folders and "examples" not in shipped


def test_every_envbuild_package_is_listed() -> None:
    """`packages` is an explicit list: a package left out is missing from every non-editable
    install (the wheel, the GitHub Action's `pip install`), while an editable one still works."""
    packages = parse_toml((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = sorted(
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "envbuild").rglob("__init__.py")
    )
    missing = [name for name in found if name not in packages]
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"


# make test-thorough: a full pip install of the project; test_packaging's package list check stays
@pytest.mark.thorough
@pytest.mark.slow
@pytest.mark.pip_sources  # the build backend (setuptools), from pip's sources
def test_pip_install_prints_no_package_data_warning(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-v",
            "--no-deps",
            "--no-cache-dir",
            str(REPO),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert "Successfully installed envbuild" in text
    assert "is absent from the `packages` configuration" not in text, text[-3000:]
    # the profiles are data of the installed package: `--profile cpu` works without the checkout
    listing = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            (
                "import importlib.resources as r; print(' '.join(sorted(p.name for p in "
                "r.files('envbuild._lockfiles').joinpath('cpu').iterdir())))"
            ),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert listing.returncode == 0, listing.stderr
    assert "stack.toml" in listing.stdout.split() and "lock.json" in listing.stdout.split()
