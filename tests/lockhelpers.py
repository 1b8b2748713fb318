"""Helpers for lock/check-lock tests: make locks with the real CLI, then hand-edit them coherently."""

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


def resync(folder: Path, stack: Path | None = None, edit: Callable[[dict[str, Any]], None] | None = None) -> None:
    """After a hand edit: make lock.json agree with the spec and the step files (digest, file sha256)."""
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
    return folder / entry["file"]
