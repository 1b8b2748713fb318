"""pixi.lock as a gate format (``gate.formats.pixi``, ``gate.rules.conda``), on public locks
(``tests/data/pixilocks/README.md`` names their repositories and commits) as committed, and on
copies with planted mismatches. Each statement both ways:

- every environment x platform is a row: conda-forge ``pytorch`` 2.8.0 reads as torch
  2.8.0+cu129 (``cuda129_*``) on linux x86_64, +cpu on macOS, +cu128 on Windows; a second pixi
  environment with another pytorch build is rows of its own;
- a conda package whose ``depends`` pin another pytorch/libtorch build is a ``conda-torch-build``
  finding where both install (one pinning this build passes);
- a PyPI extension wheel inside the lock is judged against the conda torch (built for torch 2.8
  passes, for 2.7 is ``extension-abi``), and a PyPI package's torch requirement too (``torch>=2.9``
  is ``torch-requirement``); PyPI torch inside a pixi lock is the environment's torch;
- ``--base`` on pixi locks: a CUDA re-tag of the conda pytorch is a swap, a lower version a
  downgrade; the unchanged lock passes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult

from envbuild.errors import ExitCode
from envbuild.gate import Policy, check_file
from envbuild.gate.formats.pixi import CondaPackage, torch_version
from envbuild.gate.rules.conda import spec_matches

Run = Callable[..., EnvbuildResult]
DATA = Path(__file__).resolve().parent / "data" / "pixilocks"
GPU = DATA / "pytorch-gpu-pixi-example" / "pixi.lock"
LLAMA = DATA / "llama-index-inference" / "pixi.lock"
CF = "https://conda.anaconda.org/conda-forge"
LINUX_TORCH = f"{CF}/linux-64/pytorch-2.8.0-cuda129_mkl_py313_h7947483_302.conda"
SHA = "ab" * 32


def _rows(path: Path) -> dict[str, tuple[str | None, str]]:
    report = check_file(path, Policy(), offline=True)
    return {r.name: (r.torch, r.result) for r in report.environments}


def _plant(tmp: Path, *, listed: list[str], described: str, text: str | None = None) -> Path:
    """A copy of the GPU lock with ``listed`` URLs added to the default environment's linux-64
    packages (after its pytorch) and ``described`` appended to ``packages``."""
    body = text if text is not None else GPU.read_text()
    anchor = f"      - conda: {LINUX_TORCH}\n"
    assert anchor in body
    body = body.replace(anchor, anchor + "".join(f"      - {u}\n" for u in listed), 1)
    path = tmp / "pixi.lock"
    path.write_text(body + described)
    return path


def test_public_lock_every_platform(run_envbuild: Run, tmp_path: Path) -> None:
    assert _rows(GPU) == {
        "linux x86_64, python 3.13": ("2.8.0+cu129", "ok"),
        "macos arm64, python 3.13": ("2.8.0+cpu", "ok"),
        "windows amd64, python 3.13": ("2.8.0+cu128", "ok"),
    }
    r = run_envbuild("check-lock", GPU, "--offline")
    assert r.rc == ExitCode.OK and "(pixi.lock)" in r.stdout, r.output
    renamed = tmp_path / "environment.lock"
    shutil.copy(GPU, renamed)
    assert check_file(renamed, Policy(), offline=True).format == "pixi.lock"  # told by its content
    r = run_envbuild(
        "check-lock", renamed, "--offline", "--format", "pixi.lock", "--torch-local", "cu129"
    )
    assert r.rc == ExitCode.LOCK and "[torch-local]" in r.stdout and "macos arm64" in r.stdout, (
        r.output
    )
    assert (
        "windows amd64" in r.stdout and "linux x86_64" not in r.stdout.split("[torch-local]")[-1]
    ), r.output


def test_pypi_torch_inside_a_pixi_lock() -> None:
    assert _rows(LLAMA) == {
        "linux x86_64, python 3.11": ("2.4.0", "ok"),
        "macos arm64, python 3.11": ("2.4.0", "ok"),
    }


@pytest.mark.parametrize(
    ("depends", "finding"),
    [
        (["pytorch >=2.8.0,<2.9.0a0", "libtorch 2.8.0.* cuda129*"], False),
        (["pytorch >=2.7.1,<2.8.0a0"], True),  # built for torch 2.7
        (
            ["pytorch >=2.8.0,<2.9.0a0", "libtorch 2.8.0.* cpu*"],
            True,
        ),  # a CPU build's extension beside CUDA
    ],
)
def test_conda_extension_pins_its_pytorch(
    tmp_path: Path, depends: list[str], finding: bool
) -> None:
    url = f"{CF}/linux-64/flash-attn-2.7.4-py313h0000000_0.conda"
    libtorch = f"{CF}/linux-64/libtorch-2.8.0-cuda129_mkl_hf53477d_302.conda"
    described = (
        f"- conda: {url}\n  sha256: {SHA}\n  depends:\n"
        + "".join(f"  - {d}\n" for d in depends)
        + "  license: BSD-3-Clause\n"
    )
    lock = _plant(tmp_path, listed=[f"conda: {url}"], described=described)
    assert (
        libtorch.rsplit("/", 1)[1] in lock.read_text()
    )  # the lock's own libtorch, which the pin names
    report = check_file(lock, Policy(), offline=True)
    found = [(f.rule, f.package, f.environments) for f in report.findings]
    if not finding:
        assert found == [], found
        return
    assert found == [("conda-torch-build", "flash-attn", ["linux x86_64, python 3.13"])], found
    assert report.findings[0].line == lock.read_text().splitlines().index(f"- conda: {url}") + 1
    assert (
        "pytorch 2.8.0 (cuda129_mkl_py313_h7947483_302)" in report.findings[0].reason
        or "libtorch 2.8.0" in report.findings[0].reason
    )


@pytest.mark.parametrize(
    ("local", "finding"), [("cu12torch2.8cxx11abiTRUE", False), ("cu12torch2.7cxx11abiTRUE", True)]
)
def test_pypi_extension_wheel_against_the_conda_torch(
    tmp_path: Path, local: str, finding: bool
) -> None:
    wheel = f"https://example.org/flash_attn-2.8.3+{local}-cp313-cp313-linux_x86_64.whl"
    described = (
        f"- pypi: {wheel}\n  name: flash-attn\n  version: 2.8.3+{local.lower()}\n"
        f"  sha256: {SHA}\n  requires_dist:\n  - torch\n  - einops\n"
    )
    lock = _plant(tmp_path, listed=[f"pypi: {wheel}"], described=described)
    report = check_file(lock, Policy(), offline=True)
    found = [(f.rule, f.package, f.environments) for f in report.findings]
    assert found == (
        [("extension-abi", "flash-attn", ["linux x86_64, python 3.13"])] if finding else []
    ), found


def test_a_second_environment_is_rows_of_its_own(tmp_path: Path) -> None:
    text = GPU.read_text()
    start = text.index("    packages:\n      linux-64:\n")
    end = text.index("      osx-arm64:\n")
    old_torch = f"{CF}/linux-64/pytorch-2.7.1-cuda126_mkl_py313_h1111111_300.conda"
    linux = text[start:end].replace(LINUX_TORCH, old_torch)
    channels = "  old:\n    channels:\n    - url: https://conda.anaconda.org/conda-forge/\n"
    text = text.replace("packages:\n- conda:", channels + linux + "packages:\n- conda:", 1)
    text += (
        f"- conda: {old_torch}\n  sha256: {SHA}\n  depends:\n  - __cuda\n  license: BSD-3-Clause\n"
    )
    lock = tmp_path / "pixi.lock"
    lock.write_text(text)
    rows = _rows(lock)
    assert rows["linux x86_64, python 3.13, default"] == ("2.8.0+cu129", "ok"), rows
    assert rows["linux x86_64, python 3.13, environment old"] == ("2.7.1+cu126", "ok"), rows
    assert len(rows) == 4, rows  # the old environment records linux-64 only


@pytest.mark.parametrize(
    ("head_torch", "rule"),
    [
        ("pytorch-2.8.0-cuda128_mkl_py313_h7947483_302", "torch-swap"),
        ("pytorch-2.7.1-cuda129_mkl_py313_h7947483_302", "torch-downgrade"),
        ("pytorch-2.8.0-cuda129_mkl_py313_h7947483_302", None),
    ],
)
def test_base_on_pixi_locks(
    run_envbuild: Run, tmp_path: Path, head_torch: str, rule: str | None
) -> None:
    head = tmp_path / "today" / "pixi.lock"
    head.parent.mkdir()
    head.write_text(
        GPU.read_text().replace("pytorch-2.8.0-cuda129_mkl_py313_h7947483_302", head_torch)
    )
    report = check_file(head, Policy(), offline=True, base=str(GPU))
    found = [(f.rule, f.environments) for f in report.findings]
    assert found == ([(rule, ["linux x86_64, python 3.13"])] if rule else []), found


def test_conda_torch_variants_and_specs() -> None:
    def pkg(
        version: str, build: str, depends: tuple[str, ...] = (), cuda: str | None = None
    ) -> CondaPackage:
        return CondaPackage("pytorch", version, build, "u", depends, cuda)

    assert torch_version(pkg("2.8.0", "cuda129_mkl_py313_h7947483_302")) == "2.8.0+cu129"
    assert torch_version(pkg("2.8.0", "cpu_generic_py313_h1ee2325_2")) == "2.8.0+cpu"
    assert torch_version(pkg("2.5.1", "cuda_py312_h0", ("__cuda",), "12.6")) == "2.5.1+cu126"
    assert torch_version(pkg("2.5.1", "py312_h0")) == "2.5.1"  # nothing says: no variant invented
    built = pkg("2.8.0", "cuda129_mkl_py313_h7947483_302")
    assert spec_matches("pytorch >=2.8.0,<2.9.0a0", built) is True
    assert spec_matches("pytorch >=2.7.1,<2.8.0a0", built) is False
    assert (
        spec_matches("pytorch 2.8.*", built) is True
        and spec_matches("pytorch 2.7.*", built) is False
    )
    assert (
        spec_matches("pytorch * cuda*", built) is True
        and spec_matches("pytorch * cpu*", built) is False
    )
    assert spec_matches("pytorch 2.7.*|2.8.*", built) is True
    assert spec_matches("pytorch >=2.8.0,<2.9.0a0 *_302", built) is True


def test_a_conda_package_in_one_environment_is_judged_there(tmp_path: Path) -> None:
    """Environment ``vision`` is default's linux-64 plus a conda torchvision pinned to pytorch 2.7
    (a name no extension list holds): judged apart from default, the finding is its alone."""
    text = GPU.read_text()
    start = text.index("    packages:\n      linux-64:\n")
    end = text.index("      osx-arm64:\n")
    vision = f"{CF}/linux-64/torchvision-0.22.1-cuda129_py313_h2222222_0.conda"
    linux = text[start:end] + f"      - conda: {vision}\n"
    channels = "  vision:\n    channels:\n    - url: https://conda.anaconda.org/conda-forge/\n"
    text = text.replace("packages:\n- conda:", channels + linux + "packages:\n- conda:", 1)
    text += f"- conda: {vision}\n  sha256: {SHA}\n  depends:\n  - pytorch 2.7.* cuda*\n"
    lock = tmp_path / "pixi.lock"
    lock.write_text(text)
    report = check_file(lock, Policy(), offline=True)
    found = [(f.rule, f.package, f.environments) for f in report.findings]
    assert found == [
        ("conda-torch-build", "torchvision", ["linux x86_64, python 3.13, environment vision"])
    ], found
    rows = {r.name: r.result for r in report.environments}
    assert rows["linux x86_64, python 3.13, default"] == "ok", rows


@pytest.mark.parametrize(("requires", "finding"), [("torch>=2.8", False), ("torch>=2.9", True)])
def test_a_pypi_package_requiring_another_torch(
    tmp_path: Path, requires: str, finding: bool
) -> None:
    wheel = "https://example.org/trainer_utils-1.0-py3-none-any.whl"
    described = (
        f"- pypi: {wheel}\n  name: trainer-utils\n  version: '1.0'\n  sha256: {SHA}\n"
        f"  requires_dist:\n  - {requires}\n"
    )
    lock = _plant(tmp_path, listed=[f"pypi: {wheel}"], described=described)
    report = check_file(lock, Policy(), offline=True)
    found = [(f.rule, f.package, f.environments) for f in report.findings]
    want = [("torch-requirement", "trainer-utils", ["linux x86_64, python 3.13"])]
    assert found == (want if finding else []), found


@pytest.mark.parametrize("lock", [GPU, LLAMA], ids=["gpu", "llama"])
def test_provision_lock_refuses_a_pixi_lock_with_what_to_do(
    lock: Path, run_envbuild: Run, tmp_path: Path
) -> None:
    """The gate reads a pixi.lock (``check-lock`` exit 0), ``provision --lock`` refuses it (exit 2)
    in one paragraph that says pixi installs it and how, and makes nothing; a pylock.toml beside
    it is not refused for its format."""
    ok = run_envbuild("check-lock", lock, "--offline")
    assert ok.rc == ExitCode.OK, ok.output
    root = tmp_path / "data"
    res = run_envbuild("provision", "--lock", lock, "--root", root)
    assert res.rc == ExitCode.CONFIG, res.output
    said = " ".join(res.stderr.split())
    assert "`envbuild check-lock" in said and "`pixi install --frozen` in" in said, said
    assert "name no file URL" not in said and "Traceback" not in res.output
    assert not root.exists()
    renamed = tmp_path / "environment.lock"  # told by its content, not its name
    shutil.copy(lock, renamed)
    told = run_envbuild("plan", "--lock", renamed)
    assert told.rc == ExitCode.CONFIG and "pixi install --frozen" in told.stderr, told.output
    other = tmp_path / "pylock.toml"
    other.write_text('lock-version = "1.0"\ncreated-by = "test"\npackages = []\n')
    bare = run_envbuild("plan", "--lock", other)
    assert "pixi" not in bare.stderr, bare.output


# ----------------------------------------------------------------------------- two installs


PYPI_TORCH = (
    "https://files.pythonhosted.org/packages/aa/torch-2.8.0-cp313-cp313-manylinux_2_28_x86_64.whl"
)
PYPI_VISION = (
    "https://files.pythonhosted.org/packages/bb/"
    "torchvision-0.23.0-cp313-cp313-manylinux_2_28_x86_64.whl"
)
CONDA_VISION = f"{CF}/linux-64/torchvision-0.23.0-cuda129_py313_h1234567_0.conda"


def _pypi(url: str, name: str, version: str) -> str:
    return f"- pypi: {url}\n  name: {name}\n  version: {version}\n  sha256: {SHA}\n"


def _conda(url: str, depends: list[str]) -> str:
    deps = "".join(f"  - {d}\n" for d in depends)
    return f"- conda: {url}\n  sha256: {SHA}\n  md5: {'0' * 32}\n  depends:\n{deps}"


def test_conda_and_pypi_torch_in_one_environment(tmp_path: Path) -> None:
    """conda-forge pytorch 2.8.0 (cuda129) and PyPI torch 2.8.0 in one environment, and the same for
    torchvision: one ``conda-and-pypi`` finding each, on linux x86_64 alone (the other platforms
    list neither wheel); without the PyPI wheels the lock passes (the public lock above)."""
    path = _plant(
        tmp_path,
        listed=[f"conda: {CONDA_VISION}", f"pypi: {PYPI_TORCH}", f"pypi: {PYPI_VISION}"],
        described=_conda(CONDA_VISION, ["pytorch 2.8.0 cuda*", "python >=3.13,<3.14.0a0"])
        + _pypi(PYPI_TORCH, "torch", "2.8.0")
        + _pypi(PYPI_VISION, "torchvision", "0.23.0"),
    )
    report = check_file(path, Policy(), offline=True)
    twice = {f.package: f for f in report.findings if f.rule == "conda-and-pypi"}
    assert set(twice) == {"torch", "torchvision"}, report.findings
    assert "pytorch 2.8.0 (cuda129_mkl_py313_h7947483_302) and PyPI torch" in twice["torch"].reason
    assert "PyPI torch 2.8.0" in twice["torch"].reason
    assert twice["torch"].environments == ["linux x86_64, python 3.13"]
    # said once: not again as two torch builds
    assert not [f for f in report.findings if f.rule == "torch-pins"], report.findings
    assert check_file(GPU, Policy(), offline=True).ok


def test_pytorch_channel_builds_and_conda_extension_builds(tmp_path: Path) -> None:
    """The pytorch channel's ``py3.12_cuda11.8_cudnn8.7.0_0`` is a CUDA 11.8 torch; the xformers
    channel's ``py313_cu12.1.0_pyt2.3.0`` claims torch 2.3 and CUDA 12.1: beside conda-forge
    pytorch 2.8.0+cu129 it is ``extension-abi`` (built for torch 2.3); the build for 2.8 passes."""
    channel = CondaPackage("pytorch", "2.3.0", "py3.12_cuda11.8_cudnn8.7.0_0", "u")
    assert torch_version(channel) == "2.3.0+cu118"
    assert torch_version(CondaPackage("pytorch", "2.3.0", "py3.12_cpu_0", "u")) == "2.3.0+cpu"
    for build, rules in (
        ("py313_cu12.1.0_pyt2.3.0", {"extension-abi"}),
        ("py313_cu12.9.0_pyt2.8.0", set()),
    ):
        url = f"https://conda.anaconda.org/xformers/linux-64/xformers-0.0.31-{build}.tar.bz2"
        folder = tmp_path / build
        folder.mkdir()
        path = _plant(folder, listed=[f"conda: {url}"], described=_conda(url, ["python"]))
        report = check_file(path, Policy(), offline=True, accept_file=None)
        got = {f.rule for f in report.findings}
        assert got == rules, report.findings
        if rules:
            (finding,) = report.findings
            assert "torch 2.3" in finding.reason and finding.package == "xformers"
        assert not any("xformers" in u and "no ABI tag" in u for u in report.unverified)
