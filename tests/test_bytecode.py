"""``provision --compile-bytecode``: uv writes .pyc files at install when asked, and only then.

Real uv, a real venv and the stand-in wheels from the test index. (The final import check
compiles what `import torch` loads by itself; the package checked here is one it never imports.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, Venv

from envbuild.installer import PipInstaller, UvInstaller

pytestmark = pytest.mark.slow


def test_only_yes_compiles_and_never_for_pip() -> None:
    uv, pip = UvInstaller("uv"), PipInstaller()
    assert not uv.compiles_bytecode("auto")  # the import warm-up writes what `import torch` needs
    assert uv.compiles_bytecode("yes")
    assert not uv.compiles_bytecode("no")
    assert not pip.compiles_bytecode("yes")  # pip compiles by itself
    assert uv.compiles_bytecode("yes", adopted=True)  # asked for, even in an adopted environment


@pytest.mark.parametrize(("choice", "compiled"), [("yes", True), ("no", False)])
def test_uv_compile_bytecode(
    write_stack: Callable[..., Path],
    provision: Callable[..., EnvbuildResult],
    provisioned_venv: Venv,
    choice: str,
    compiled: bool,
) -> None:
    stack = write_stack([{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    result = provision(stack, "--backend", "uv", "--compile-bytecode", choice)
    assert result.rc == 0, result.stderr
    pyc = list((provisioned_venv.site_packages / "einops_like").rglob("*.pyc"))
    assert bool(pyc) is compiled, pyc
    assert provisioned_venv.dists()["einops-like"].version == "0.8.1"
