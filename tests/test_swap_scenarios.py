"""The real ways torch gets swapped, each shown twice with real pip, venvs, wheels and an HTTP
index:

(a) the naive pip sequence (nightly torch first, then the culprit) breaks the environment;
(b) ``envbuild provision`` of the same stack either prevents it (exit 0, torch intact, thanks to
    the constraints file) or stops with the ABI exit code and a message naming the step and the
    culprit.

The wheels and indexes are in ``support/fixtures.py`` (``SCENARIO``): the stand-in nightly
``torch 2.12.0.dev20260405+cu132`` exists only on the "nightly" index; decoy stable torches
2.12.0 / 2.13.0 (requiring PyPI ``triton``) and the culprits are on the "pypi" index.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import (
    NIGHTLY_TORCH,
    PYTORCH_TRITON,
    EnvbuildResult,
    ScenarioIndex,
    Venv,
)

from envbuild.errors import ExitCode

WriteStack = Callable[..., Path]
Provision = Callable[..., EnvbuildResult]


def _show(result: EnvbuildResult) -> str:
    return (
        f"exit {result.rc}\n--- stdout\n{result.stdout[-4000:]}\n---"
        f" stderr\n{result.stderr[-4000:]}"
    )


def assert_stopped(result: EnvbuildResult, step: str, *culprits: str) -> None:
    """Exit 6 (ABI), and stderr names the step and every culprit."""
    assert result.rc == ExitCode.ABI, _show(result)
    for word in (step, *culprits):
        assert word in result.stderr, f"{word!r} not named on stderr\n{_show(result)}"


def assert_torch_intact(venv: Venv) -> None:
    dists = venv.dists()
    assert dists["torch"].version == NIGHTLY_TORCH
    assert dists["pytorch-triton"].version == PYTORCH_TRITON
    assert venv.read("torch/version.py").count("cuda = '13.2'") == 1


def _pypi(index: ScenarioIndex) -> list[str]:
    return ["--index-url", index.pypi_url]


# ----------------------------------------------------------------------------- torch>=2.12


def test_naive_torch_ge_212_swaps_the_nightly(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """``torch>=2.12`` is not satisfied by 2.12.0.dev…: pip installs the newest stable torch."""
    nightly_venv.pip("install", *_pypi(scenario_index), "needs-torch-212==1.0", check=True)
    dists = nightly_venv.dists()
    assert dists["torch"].version == "2.13.0"
    assert "13.0" in nightly_venv.read("torch/version.py")  # another CUDA build, too
    assert dists["triton"].version == "3.8.0"  # and PyPI triton over pytorch-triton's files
    assert nightly_venv.owners("triton/__init__.py") == ["pytorch-triton", "triton"]


def test_envbuild_stops_torch_ge_212(
    write_stack: WriteStack, provision: Provision, provisioned_venv: Venv
) -> None:
    stack = write_stack(
        [
            {"name": "helpers", "packages": ["einops-like==0.8.1"]},
            {"name": "late-extras", "packages": ["needs-torch-212==1.0"]},
        ]
    )
    result = provision(stack)
    assert_stopped(result, "late-extras", "needs-torch-212")
    assert_torch_intact(provisioned_venv)  # the constraint made pip fail instead of swapping


# ----------------------------------------------------------------------------- exact pin


def test_naive_exact_pin_swaps_the_nightly(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """A torchvision-style ``torch==2.12.0`` pin: the dev nightly does not match, the decoy does."""
    nightly_venv.pip("install", *_pypi(scenario_index), "vision-pin==1.0", check=True)
    assert nightly_venv.version("torch") == "2.12.0"
    assert nightly_venv.version("triton") == "3.7.0"


def test_envbuild_stops_exact_pin(
    write_stack: WriteStack, provision: Provision, provisioned_venv: Venv
) -> None:
    stack = write_stack([{"name": "vision-models", "packages": ["vision-pin==1.0"]}])
    result = provision(stack)
    assert_stopped(result, "vision-models", "vision-pin")
    assert_torch_intact(provisioned_venv)


# ----------------------------------------------------------------------------- PyPI triton


def test_naive_pypi_triton_overwrites_pytorch_triton(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """mamba-ssm declares ``triton``: torch's version stays, but its triton is silently replaced."""
    nightly_venv.pip("install", *_pypi(scenario_index), "mamba-like==1.0", check=True)
    assert nightly_venv.version("torch") == NIGHTLY_TORCH
    assert nightly_venv.owners("triton/__init__.py") == ["pytorch-triton", "triton"]
    assert "__provider__ = 'triton'" in nightly_venv.read("triton/__init__.py")
    out = nightly_venv.run("-c", "import triton; print(triton.__version__)", check=True)
    assert out.stdout.strip() == "3.8.0"  # not the 3.7.0+git9c288bc5 the nightly was built with


def test_envbuild_stops_pypi_triton(
    write_stack: WriteStack, provision: Provision, provisioned_venv: Venv
) -> None:
    stack = write_stack([{"name": "ssm-kernels", "packages": ["mamba-like==1.0"]}])
    result = provision(stack)
    assert_stopped(result, "ssm-kernels", "triton", "mamba-like")
    assert provisioned_venv.version("torch") == NIGHTLY_TORCH


# ----------------------------------------------------------------------------- eager upgrade


def test_naive_eager_upgrade_swaps_the_nightly(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """A bare ``torch`` requirement, but ``-U --upgrade-strategy eager`` takes the newest stable."""
    nightly_venv.pip(
        "install",
        *_pypi(scenario_index),
        "-U",
        "--upgrade-strategy",
        "eager",
        "eager-upgrader==1.0",
        check=True,
    )
    assert nightly_venv.version("torch") == "2.13.0"
    assert nightly_venv.version("nvidia-nccl-cu13") == "2.30.3"


def test_naive_default_strategy_keeps_the_nightly(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """The control: the same package without eager leaves the nightly alone."""
    nightly_venv.pip("install", *_pypi(scenario_index), "-U", "eager-upgrader==1.0", check=True)
    assert_torch_intact(nightly_venv)


def test_envbuild_prevents_eager_upgrade(
    write_stack: WriteStack, provision: Provision, provisioned_venv: Venv
) -> None:
    stack = write_stack(
        [
            {
                "name": "eager-tools",
                "packages": ["eager-upgrader==1.0"],
                "upgrade": True,
                "upgrade_strategy": "eager",
            }
        ]
    )
    result = provision(stack)
    assert result.rc == ExitCode.OK, _show(result)
    assert provisioned_venv.version("eager-upgrader") == "1.0"
    assert_torch_intact(provisioned_venv)
    assert "triton" not in provisioned_venv.dists()


# ----------------------------------------------------------------------------- file overlap


def test_naive_overlap_uninstall_breaks_the_winner(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """flash-attn 2.8.3 ships an old flash_attn/cute/ that flash-attn-4 owns too."""
    nightly_venv.pip("install", *_pypi(scenario_index), "overlap-a==1.0", check=True)
    nightly_venv.pip("install", *_pypi(scenario_index), "overlap-b==1.0", check=True)
    assert nightly_venv.owners("shared_pkg/cute/x.py") == ["overlap-a", "overlap-b"]
    assert "overlap-b" in nightly_venv.read("shared_pkg/cute/x.py")  # last one in wins, silently
    # uninstalling the loser deletes the winner's file: overlap-b is "installed" but broken
    nightly_venv.pip("uninstall", "-y", "overlap-a", check=True)
    assert nightly_venv.version("overlap-b") == "1.0"
    assert not nightly_venv.exists("shared_pkg/cute/x.py")


def test_naive_overlap_order_decides_the_content(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    nightly_venv.pip("install", *_pypi(scenario_index), "overlap-b==1.0", check=True)
    nightly_venv.pip("install", *_pypi(scenario_index), "overlap-a==1.0", check=True)
    assert "overlap-a" in nightly_venv.read("shared_pkg/cute/x.py")  # the old copy won


def test_envbuild_stops_unacknowledged_overlap(
    write_stack: WriteStack, provision: Provision
) -> None:
    stack = write_stack(
        [
            {"name": "first-owner", "packages": ["overlap-a==1.0"]},
            {"name": "second-owner", "packages": ["overlap-b==1.0"]},
        ]
    )
    result = provision(stack)
    assert_stopped(result, "second-owner", "overlap-a", "overlap-b")


def test_envbuild_accepts_acknowledged_overlap(
    write_stack: WriteStack, provision: Provision, provisioned_venv: Venv
) -> None:
    stack = write_stack(
        [
            {"name": "first-owner", "packages": ["overlap-a==1.0"]},
            {"name": "second-owner", "packages": ["overlap-b==1.0"]},
        ],
        overlaps=[{"packages": ["overlap-a", "overlap-b"], "winner": "overlap-b"}],
    )
    result = provision(stack)
    assert result.rc == ExitCode.OK, _show(result)
    assert "overlap-b" in provisioned_venv.read("shared_pkg/cute/x.py")
    assert_torch_intact(provisioned_venv)


def test_envbuild_stops_acknowledged_overlap_with_the_wrong_winner(
    write_stack: WriteStack, provision: Provision
) -> None:
    """The acknowledgement names overlap-b the winner, but the order lets overlap-a win."""
    stack = write_stack(
        [
            {"name": "first-owner", "packages": ["overlap-b==1.0"]},
            {"name": "second-owner", "packages": ["overlap-a==1.0"]},
        ],
        overlaps=[{"packages": ["overlap-a", "overlap-b"], "winner": "overlap-b"}],
    )
    result = provision(stack)
    assert_stopped(result, "second-owner", "overlap-a", "overlap-b")


# ----------------------------------------------------------------------------- force-reinstall


def test_naive_force_reinstall_swaps_the_nightly(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """``--force-reinstall`` hides the installed torch from the resolver: the newest one comes
    in."""
    nightly_venv.pip(
        "install",
        *_pypi(scenario_index),
        "--extra-index-url",
        scenario_index.nightly_url,
        "--force-reinstall",
        "reinstaller==1.0",
        check=True,
    )
    assert nightly_venv.version("torch") == "2.13.0"


def test_naive_force_reinstall_rewrites_torch_even_when_pinned(
    tmp_path: Path, nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """With torch pinned to the nightly, the version survives, but torch is uninstalled and
    reinstalled: new files, a new RECORD. On a real host that is another 2.5 GB artifact that
    may not be the one extensions were built against; the guard treats it as a violation."""
    site = nightly_venv.site_packages
    record = nightly_venv.dists()["torch"].record
    before = (record.read_bytes(), (site / "torch/__init__.py").stat().st_ino)
    pins = tmp_path / "constraints.txt"
    pins.write_text(f"torch=={NIGHTLY_TORCH}\npytorch-triton=={PYTORCH_TRITON}\n")
    out = nightly_venv.pip(
        "install",
        *_pypi(scenario_index),
        "--extra-index-url",
        scenario_index.nightly_url,
        "--force-reinstall",
        "-c",
        pins,
        "reinstaller==1.0",
        check=True,
    )
    assert "Attempting uninstall: torch" in out.stdout
    assert nightly_venv.version("torch") == NIGHTLY_TORCH
    record = nightly_venv.dists()["torch"].record
    assert (record.read_bytes(), (site / "torch/__init__.py").stat().st_ino) != before


def test_envbuild_stops_force_reinstall(
    write_stack: WriteStack,
    provision: Provision,
    scenario_index: ScenarioIndex,
    provisioned_venv: Venv,
) -> None:
    # the nightly index is listed so that pip *can* reinstall the pinned torch (else it would fail
    # to resolve, which is the needs-torch-212 case again)
    stack = write_stack(
        [
            {
                "name": "refresh-all",
                "packages": ["reinstaller==1.0"],
                "reinstall": True,
                "index_url": scenario_index.pypi_url,
                "extra_index_urls": [scenario_index.nightly_url],
            }
        ]
    )
    result = provision(stack)
    assert_stopped(result, "refresh-all", "torch")
    assert re.search(r"reinstall", result.stderr, re.IGNORECASE), _show(result)
    assert provisioned_venv.version("torch") == NIGHTLY_TORCH


# ----------------------------------------------------------------------------- --no-deps leaves
# requirements unmet


def test_naive_no_deps_leaves_an_unmet_requirement(
    nightly_venv: Venv, scenario_index: ScenarioIndex
) -> None:
    """The seed's fla pins: flash-linear-attention needs fla-core==0.5.0, --no-deps installs
    0.4.2."""
    nightly_venv.pip(
        "install",
        *_pypi(scenario_index),
        "--no-deps",
        "needs-fla-core==1.0",
        "fla-core-like==0.4.2",
        check=True,
    )
    check = nightly_venv.pip("check")
    assert check.returncode != 0
    assert "needs-fla-core 1.0 has requirement fla-core-like==0.5.0" in check.stdout
    imported = nightly_venv.run("-c", "import fla.layers")
    assert imported.returncode != 0 and "ImportError" in imported.stderr


@pytest.fixture
def fla_stack(write_stack: WriteStack) -> Path:
    return write_stack(
        [
            {
                "name": "fla-layers",
                "packages": ["needs-fla-core==1.0", "fla-core-like==0.4.2"],
                "no_deps": True,
            }
        ]
    )


def test_envbuild_warns_on_unmet_requirement(
    fla_stack: Path, provision: Provision, provisioned_venv: Venv
) -> None:
    result = provision(fla_stack)
    assert result.rc == ExitCode.OK, _show(result)
    assert re.search(r"warn", result.output, re.IGNORECASE), _show(result)
    for word in ("needs-fla-core", "fla-core-like", "0.5.0"):
        assert word in result.output, f"{word!r} not in the warning\n{_show(result)}"
    assert provisioned_venv.version("fla-core-like") == "0.4.2"
    assert_torch_intact(provisioned_venv)


def test_envbuild_strict_stops_on_unmet_requirement(fla_stack: Path, provision: Provision) -> None:
    result = provision(fla_stack, "--strict")
    assert_stopped(result, "fla-layers", "needs-fla-core", "fla-core-like")


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_envbuild_installs_the_overlap_winner_last_within_one_step(
    write_stack: WriteStack, provision: Provision, provisioned_venv: Venv, backend: str
) -> None:
    """The seed's fla step installs fla and fla-core together: uv installs a step's wheels in
    parallel, so without an order either copy could end on disk. The winner goes in a run of its
    own, after the rest, whichever order the step lists them in."""
    stack = write_stack(
        [{"name": "both", "packages": ["overlap-b==1.0", "overlap-a==1.0"], "no_deps": True}],
        overlaps=[{"packages": ["overlap-a", "overlap-b"], "winner": "overlap-b"}],
    )
    result = provision(stack, "--backend", backend)
    assert result.rc == ExitCode.OK, _show(result)
    assert "overlap-b" in provisioned_venv.read("shared_pkg/cute/x.py")
    assert provisioned_venv.owners("shared_pkg/cute/x.py") == ["overlap-a", "overlap-b"]
    assert_torch_intact(provisioned_venv)
