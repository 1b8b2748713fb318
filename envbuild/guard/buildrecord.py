"""The provenance record of a wheel ``envbuild wheelhouse build`` made: where it lives in the
wheel's dist-info, how to read it, and whether it fits the installed torch.

The wheelhouse writes the record (``wheelhouse/build.py``, ``wheelhouse/repack.py``); the ABI guard
(``guard/``) and the lock's wheelhouse check (``stacklock/changes.py``) read it. It lives here,
below all three, so the guard reads it without importing the wheelhouse (imports run downhill:
spec -> plan -> installer -> guard -> stacklock -> wheelhouse -> proof). ``envbuild.wheelhouse``
re-exports these names. Not to be confused with ``proof/provenance.py``, a receipt's record of
who ran what where.

No imports beyond the standard library.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["PROVENANCE_FILE", "PROVENANCE_SCHEMA", "provenance_mismatch", "read_provenance"]

PROVENANCE_FILE = "envbuild_provenance.json"
PROVENANCE_SCHEMA = 1


def read_provenance(dist_info_dir: Path) -> dict[str, Any] | None:
    """The provenance record of an installed distribution, or None when it has none.

    A record that exists but cannot be read comes back as ``{"_invalid": reason}`` so that
    ``provenance_mismatch`` reports it instead of the guard silently skipping the wheel.
    """
    path = Path(dist_info_dir) / PROVENANCE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"_invalid": f"cannot read {path}: {exc.strerror}"}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"_invalid": f"{path} is not valid JSON: {exc}"}
    if not isinstance(data, dict):
        return {"_invalid": f"{path} is not a JSON object"}
    return data


def provenance_mismatch(
    provenance: dict[str, Any] | None,
    installed_torch_version: str | None,
    installed_torch_git_version: str | None = None,
) -> str | None:
    """Why a wheel built by envbuild does not fit the installed torch, or None when it does.

    The torch version must match exactly, local tag included (``2.12.0.dev20260405+cu132``).
    When both sides know torch's ``git_version`` (the build hash), it must match too: the same
    version string from two different builds is still two ABIs.
    """
    if provenance is None:
        return None
    name = str(provenance.get("name", "?"))
    version = str(provenance.get("version", "?"))
    what = f"{name} {version}"
    if "_invalid" in provenance:
        return f"{what}: provenance record unreadable: {provenance['_invalid']}"
    torch = provenance.get("torch")
    if not isinstance(torch, dict) or not isinstance(torch.get("version"), str):
        return f"{what}: provenance record has no torch.version"
    spec = provenance.get("spec")
    spec_file = spec.get("file", name) if isinstance(spec, dict) else name
    fix = (
        "rebuild it against the installed torch (envbuild wheelhouse build"
        f" {spec_file}"
        " --venv VENV), or install the torch it was built for"
    )
    built = torch["version"]
    if installed_torch_version is None:
        return f"{what} was built against torch {built}, but torch is not installed; {fix}"
    if built != installed_torch_version:
        return (
            f"{what} was built against torch {built}, but torch {installed_torch_version} "
            f"is installed; {fix}"
        )
    built_git = torch.get("git_version")
    if built_git and installed_torch_git_version and built_git != installed_torch_git_version:
        return (
            f"{what} was built against torch {built} (build {built_git[:12]}), but the installed"
            f" torch {installed_torch_version} is another build"
            f" ({installed_torch_git_version[:12]}); {fix}"
        )
    return None
