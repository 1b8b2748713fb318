"""``smoke`` after ``provision --lock`` picks its checks from what the lock installed.

A real ``uv lock`` of the real torch CPU build and two stand-in extensions (binary wheels that
depend on torch): ``causal-conv1d``, which imports, and ``bad-ext``, whose import fails the way an
extension built against another torch does (``undefined symbol``). After the provision, ``smoke``
(finding the environment from ``--root`` alone) runs torch's checks, the kernel check of the
extension the lock installed and none of the others (no fla, mamba, flash-attn), and an import of
each extension: the one that does not load fails the smoke (exit 7), on a host with no GPU too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cachedir import TEST_CACHE
from support.fixtures import EnvbuildResult, cache_lock
from support.gatelocks import _run, uv_bin
from support.wheels import build_wheel

from envbuild.wheelhouse.pages import write_index

TORCH_VERSION = "2.13.0"
CACHE = TEST_CACHE
PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"


@pytest.fixture(scope="session")
def torch_wheels() -> Path:
    """torch 2.13.0 (the CPU build pip's configuration serves) and its dependencies, as wheels,
    once."""
    folder = CACHE / f"torch-{TORCH_VERSION}-{PY}-wheels"
    with cache_lock(folder):
        if not list(folder.glob(f"torch-{TORCH_VERSION}*.whl")):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--only-binary",
                    ":all:",
                    "-d",
                    str(folder),
                    f"torch=={TORCH_VERSION}",
                ],
                check=True,
                env=env,
                timeout=900,
            )
    return folder


def lock_on_wheelhouse(project: Path, wheelhouse: Path, deps: list[str], tmp: Path) -> Path:
    """uv.lock (real ``uv lock``) of a virtual project of torch and ``deps``, for this Python, from
    the PEP 503 pages of ``wheelhouse`` alone."""
    project.mkdir(exist_ok=True)
    (project / "pyproject.toml").write_text(f"""[project]
name = "trainer"
version = "0.1.0"
requires-python = "=={sys.version_info[0]}.{sys.version_info[1]}.*"
dependencies = {json.dumps([f"torch=={TORCH_VERSION}", *deps])}

[tool.uv]
package = false

[[tool.uv.index]]
url = "{(wheelhouse / "simple").as_uri()}"
default = true
""")
    _run(
        [uv_bin(), "lock", "--no-cache", "--python", sys.executable],
        project,
        tmp,
        project_config=True,
    )
    return project / "uv.lock"


# make test-thorough: a lock provision, then smoke (test_smoke's real smoke run stays)
@pytest.mark.thorough
@pytest.mark.slow
def test_smoke_after_a_lock_provision_checks_what_the_lock_installed(
    torch_wheels: Path, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    wheelhouse = tmp_path / "index"
    wheelhouse.mkdir()
    for wheel in torch_wheels.glob("*.whl"):
        (wheelhouse / wheel.name).symlink_to(wheel)
    plat = "linux_x86_64"
    build_wheel(
        wheelhouse,
        "causal-conv1d",
        "1.5.0",
        requires=["torch"],
        python_tag=PY,
        abi_tag=PY,
        platform_tag=plat,
        files={"causal_conv1d/__init__.py": "import torch\n"},
    )
    build_wheel(
        wheelhouse,
        "bad-ext",
        "1.0",
        requires=["torch"],
        python_tag=PY,
        abi_tag=PY,
        platform_tag=plat,
        files={
            "bad_ext/__init__.py": (
                "import torch\nraise ImportError("
                "'bad_ext/_C.so: undefined symbol: _ZN3c104cuda9SetDeviceEi')\n"
            )
        },
    )
    write_index(wheelhouse)
    lock = lock_on_wheelhouse(
        tmp_path / "project", wheelhouse, ["causal-conv1d==1.5.0", "bad-ext==1.0"], tmp_path
    )

    res = run_envbuild(
        "provision", "--lock", lock, "--root", tmp_path / "data", "--python", sys.executable
    )
    assert res.rc == 0, res.output
    assert "smoke, verify and receipt then find this environment" in res.stdout

    res = run_envbuild("smoke", "--root", tmp_path / "data", "--json")
    assert res.rc == 7, res.output
    doc = json.loads(res.stdout)
    by = {c["name"]: c for c in doc["checks"]}
    assert list(by) == [
        "matmul",
        "sdpa",
        "triton",
        "torch.compile",
        "causal_conv1d",
        "import bad-ext",
        "import causal-conv1d",
    ]
    assert (
        by["import causal-conv1d"]["verdict"] == "pass"
        and by["import causal-conv1d"]["version"] == "1.5.0"
    )
    bad = by["import bad-ext"]
    assert (
        bad["verdict"] == "fail" and "undefined symbol: _ZN3c104cuda9SetDeviceEi" in bad["reason"]
    )
    assert by["matmul"]["verdict"] == "pass"
    assert doc["selection"] == {
        "lock_file": str(lock),
        "checks": list(by)[:5],
        "imports": ["bad-ext", "causal-conv1d"],
    }
    receipt = json.loads(Path(doc["receipt"]).read_text())
    assert receipt["payload"]["selection"]["imports"] == ["bad-ext", "causal-conv1d"]


def test_an_adopted_venv_is_checked_for_what_it_already_held() -> None:
    """provision --lock into a base image keeps what the image has at the locked version (``kept``
    in the venv's record): smoke checks those extensions as if the lock had installed them."""
    from envbuild.projectlock.record import smoke_selection

    lock = {
        "lock_file": "uv.lock",
        "stack": {"steps": [{"name": "rest", "packages": ["certifi==2026.1"]}]},
        "kept": {"fla-core": "rest", "causal-conv1d": "extensions", "einops": "rest"},
    }
    chosen = smoke_selection(lock)
    assert chosen.only == ("matmul", "sdpa", "triton", "torch.compile", "causal_conv1d", "fla")
    assert chosen.imports == ("causal-conv1d",)
    assert smoke_selection({**lock, "kept": None}).only == (
        "matmul",
        "sdpa",
        "triton",
        "torch.compile",
    )
