"""Helpers for lock/check-lock tests: make locks with the real CLI, then hand-edit them
coherently."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envbuild.spec import load_spec


def lock_env(tmp_path: Path) -> dict[str, str]:
    return {"ENVBUILD_CACHE_DIR": str(tmp_path / "envbuild-cache")}


def manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "lock.json").read_text())
    return data


def save_manifest(folder: Path, data: dict[str, Any]) -> None:
    (folder / "lock.json").write_text(json.dumps(data, indent=2) + "\n")


def resync(
    folder: Path, stack: Path | None = None, edit: Callable[[dict[str, Any]], None] | None = None
) -> None:
    """After a hand edit: make lock.json agree with the spec and the step files (digest, file
    sha256)."""
    data = manifest(folder)
    if edit:
        edit(data)
    if stack is not None:
        data["spec_digest"] = load_spec(stack, {}).digest
    for s in data["steps"]:
        if s.get("file") and (folder / s["file"]).is_file():
            s["file_sha256"] = hashlib.sha256((folder / s["file"]).read_bytes()).hexdigest()
    save_manifest(folder, data)


def step_file(folder: Path, step: str) -> Path:
    entry = next(s for s in manifest(folder)["steps"] if s["name"] == step)
    file: str = entry["file"]
    return folder / file


_GIT_BACKEND = '''
"""A PEP 517 backend with no dependencies: the package folder into a wheel."""
import base64, hashlib, os, zipfile

NAME, VERSION = "gitpkg_like", "0.1"
DIST = f"{NAME}-{VERSION}.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {f"{NAME}/__init__.py": open(os.path.join(NAME, "__init__.py"), "rb").read(),
             f"{DIST}/METADATA": b"Metadata-Version: 2.1\\nName: gitpkg-like\\nVersion: 0.1\\n\\n",
             f"{DIST}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    rows = []
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{rel},sha256={digest},{len(data)}")
        zf.writestr(f"{DIST}/RECORD", "\\n".join(rows + [f"{DIST}/RECORD,,"]) + "\\n")
    return name
'''  # noqa: E501 (embedded backend source: the text is the value)


def make_git_repo(tmp_path: Path) -> Path:
    """A git repository (branch ``main``) of ``gitpkg-like`` 0.1 with an in-tree PEP 517 backend:
    building it needs nothing from an index."""
    import subprocess

    from support.fixtures import installer_env

    repo = tmp_path / "gitpkg"
    (repo / "gitpkg_like").mkdir(parents=True)
    (repo / "gitpkg_like" / "__init__.py").write_text("FROM_GIT = True\n")
    (repo / "backend.py").write_text(_GIT_BACKEND)
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "gitpkg-like"\nversion = "0.1"\n'
    )
    env = {
        **installer_env(tmp_path / "home"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for cmd in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    return repo
