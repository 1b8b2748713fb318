"""``provision --compile-bytecode``: uv writes .pyc files at install when asked, and only then.

Real uv, a real venv and the stand-in wheels from the test index. (The final import check
compiles what `import torch` loads by itself; the package checked here is one it never imports.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, Venv

from envbuild.installer import COMPILE_MIN_CPUS, PipInstaller, UvInstaller

pytestmark = pytest.mark.slow


def test_auto_compiles_on_many_cores_only_and_never_for_pip() -> None:
    uv, pip = UvInstaller("uv"), PipInstaller()
    assert uv.compiles_bytecode("auto", cpus=COMPILE_MIN_CPUS)
    assert not uv.compiles_bytecode("auto", cpus=2)
    assert uv.compiles_bytecode("yes", cpus=2)
    assert not uv.compiles_bytecode("no", cpus=128)
    assert not pip.compiles_bytecode("yes", cpus=128)  # pip compiles by itself
    assert not uv.compiles_bytecode("auto", adopted=True, cpus=128)  # not our environment
    assert uv.compiles_bytecode("yes", adopted=True, cpus=2)  # unless asked


@pytest.mark.parametrize(("choice", "compiled"), [("yes", True), ("no", False)])
def test_uv_compile_bytecode(write_stack: Callable[..., Path], provision: Callable[..., EnvbuildResult],
                             provisioned_venv: Venv, choice: str, compiled: bool) -> None:
    stack = write_stack([{"name": "helpers", "packages": ["einops-like==0.8.1"]}])
    result = provision(stack, "--backend", "uv", "--compile-bytecode", choice)
    assert result.rc == 0, result.stderr
    pyc = list((provisioned_venv.site_packages / "einops_like").rglob("*.pyc"))
    assert bool(pyc) is compiled, pyc
    assert provisioned_venv.dists()["einops-like"].version == "0.8.1"
