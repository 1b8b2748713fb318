"""The fleet build cache's fixture: a small C++ torch extension (``tests/packages/torch_ext``,
CUDA with ``cuda=True``) packed into a reproducible sdist, and a uv.lock that leaves torch to the
environment it is provisioned onto (``--venv``) and builds the extension there without isolation.

Used by ``tests/test_build_cache.py``, ``bench/bench_build_cache.py`` and
``bench/gpu_build_cache.sh`` (which has no network: nothing here reaches an index but the one the
caller names).
"""

from __future__ import annotations

import json
from pathlib import Path

from support.wheels import build_sdist

PACKAGE = Path(__file__).resolve().parents[1] / "packages" / "torch_ext"
NAME = "torch-ext-tiny"
VERSION = "0.1.0"


def torch_ext_sdist(dest: Path, *, cuda: bool = False) -> Path:
    """``torch_ext_tiny-0.1.0.tar.gz`` in ``dest`` (the same bytes every time for one ``cuda``)."""
    files = {
        f"torch_ext_tiny/{f.name}": f.read_text()
        for f in sorted((PACKAGE / "torch_ext_tiny").iterdir())
        if f.is_file()
    }
    if cuda:
        files["torch_ext_tiny/kernel.cu"] = (PACKAGE / "kernel.cu.in").read_text()
    return build_sdist(
        dest,
        NAME,
        VERSION,
        requires=["torch"],
        files=files,
        backend="setuptools",
        setup_py=(PACKAGE / "setup.py").read_text(),
    )


def pyproject(sdist_url: str, index_url: str | None) -> str:
    """A virtual project that depends on the extension sdist (by URL), leaves torch to the base
    environment (``override-dependencies``: never installed) and builds the extension without
    isolation, against that torch; ``index_url``: where uv looks for anything else."""
    index = (
        f'\n[[tool.uv.index]]\nname = "local"\nurl = "{index_url}"\ndefault = true\n'
        if index_url
        else ""
    )
    return f"""[project]
name = "fleet-app"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = [{json.dumps(f"{NAME} @ {sdist_url}")}]

[tool.uv]
package = false
override-dependencies = ["torch; sys_platform == 'never'"]
no-build-isolation-package = [{json.dumps(NAME)}]
environments = ["sys_platform == 'linux'"]
{index}"""
