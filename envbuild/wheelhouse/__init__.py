"""Wheelhouse: the public surface, kept light (the ABI guard imports it after every step).

What lives where:

- ``wheelhouse_spec``   ``wheelhouse_specs/*.toml``: load, validate, freeze (``WheelSpec``).
- ``wheelhouse_build``  fetch the source, patch, build with the target venv's python (no build
                        isolation, against the torch installed there), content-addressed cache.
- ``wheelhouse_repack`` strip ``Requires-Dist``, retag ``+cu132torch2.12.0.dev...``, add the
                        provenance record, rewrite RECORD, refuse unsafe archives.
- ``mirror``            download every locked artifact (hash-checked, resumable, parallel).
- ``wheelhouse_index``  PEP 503 pages over a folder.

This module holds only what the ABI guard needs: where the provenance record lives inside a
wheel's dist-info, how to read it, and how to tell whether it fits the installed torch.
No imports beyond the standard library and ``packaging``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "PROVENANCE_FILE",
    "PROVENANCE_SCHEMA",
    "local_tag",
    "provenance_mismatch",
    "read_provenance",
]

PROVENANCE_FILE = "envbuild_provenance.json"
PROVENANCE_SCHEMA = 1


def local_tag(torch_version: str, torch_cuda: str | None) -> str:
    """The local version label of a wheel built against ``torch_version``.

    ``("2.12.0.dev20260405+cu132", "13.2")`` -> ``"cu132torch2.12.0.dev20260405"``;
    a CPU torch (``torch.version.cuda`` is None) gives ``"cputorch2.13.0"``.
    Written by ``envbuild.abitag.format_label``, the one writer of the labels
    ``envbuild.abitag.parse_claim`` reads back.
    """
    from envbuild.abitag import format_label

    return format_label(torch_version, torch_cuda)


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
    fix = (
        f"rebuild it against the installed torch (envbuild wheelhouse build "
        f"{provenance.get('spec', {}).get('file', name) if isinstance(provenance.get('spec'), dict) else name} --venv VENV), "
        "or install the torch it was built for"
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
            f"{what} was built against torch {built} (build {built_git[:12]}), but the installed "
            f"torch {installed_torch_version} is another build ({installed_torch_git_version[:12]}); {fix}"
        )
    return None
