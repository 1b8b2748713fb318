"""What is installed in this interpreter, for a receipt (standalone: no envbuild, no torch import).

Prints one JSON document: the Python version, every distribution with its version, installer,
the sha256 of its dist-info RECORD (catches a reinstall of the same version) and of its files
wherever the environment lives (``files_sha256``: what ``receipt diff`` compares), and torch's
version / CUDA / git revision read from ``torch/version.py`` as text, plus the versions of the
cuDNN and NCCL runtime wheels where torch uses them. Importing torch would cost seconds and
initialise CUDA; the receipt must be cheap.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import platform
import re
import sys
from pathlib import Path
from typing import Any


def _record(dist: md.Distribution) -> str | None:
    try:
        return dist.read_text("RECORD")
    except OSError:
        return None


def record_sha256(dist: md.Distribution) -> str | None:
    text = _record(dist)
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def files_sha256(dist: md.Distribution) -> str | None:
    """A digest of the distribution's own files as RECORD lists them, independent of where the
    environment lives: rows outside the install folder (``../../../bin/torchrun``: console scripts,
    whose shebang names the interpreter's absolute path) and ``direct_url.json`` (the absolute path
    of a local wheel) are left out, and the rows are sorted (pip and uv order them differently)."""
    text = _record(dist)
    if text is None:
        return None
    rows = sorted(line for line in text.splitlines()
                  if line and not line.startswith(("../", "/")) and ".dist-info/direct_url.json," not in line)
    return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()


def torch_versions(dists: dict[str, md.Distribution]) -> dict[str, Any] | None:
    dist = dists.get("torch")
    if dist is None:
        return None
    info: dict[str, Any] = {"version": dist.version}
    version_py = Path(str(dist.locate_file("torch/version.py")))
    if version_py.is_file():
        text = version_py.read_text(encoding="utf-8", errors="replace")
        for key in ("cuda", "git_version", "hip", "xpu"):
            m = re.search(rf"^{key}\s*(?::[^=]*)?=\s*['\"]?([^'\"\n]*)['\"]?", text, re.M)
            if m and m.group(1) not in ("None", ""):
                info[key] = m.group(1)
    for prefix, key in (("nvidia-cudnn-cu", "cudnn"), ("nvidia-nccl-cu", "nccl"),
                        ("nvidia-cuda-runtime-cu", "cuda_runtime"), ("pytorch-triton", "triton"),
                        ("triton", "triton")):
        for name, d in dists.items():
            if name == prefix or (prefix.endswith("-cu") and name.startswith(prefix)):
                info.setdefault(key, d.version)
    return info


def main() -> int:
    dists: dict[str, md.Distribution] = {}
    rows = []
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        canon = re.sub(r"[-_.]+", "-", name).lower()
        if canon in dists:  # shadowed: the first on sys.path is what imports
            continue
        dists[canon] = dist
        installer = (dist.read_text("INSTALLER") or "").strip() or None
        rows.append({"name": canon, "version": dist.version, "record_sha256": record_sha256(dist),
                     "files_sha256": files_sha256(dist), "installer": installer})
    rows.sort(key=lambda r: r["name"])
    doc = {"python": platform.python_version(), "implementation": sys.implementation.name,
           "executable": sys.executable, "prefix": sys.prefix,
           "distributions": rows, "torch": torch_versions(dists)}
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
