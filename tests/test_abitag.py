"""envbuild.abitag: the one reader (and writer) of the ABI claims in extension wheels' local labels.

Every label format that is really published (Dao-AILab flash-attention and state-spaces releases,
community prebuilt repositories, FA3 builds, PyG's ``pt`` spelling, NATTEN's, NVIDIA's cosmos
wheels, wheels.astral.sh's dotted labels, envbuild's wheelhouse), as a
bare label, a full version, a lower-cased uv.lock version, a wheel file name and a URL; every
mismatch kind with a real-looking pair; torch's CUDA major from its locked runtime; the
wheelhouse round trip (Hypothesis); odd input.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.abitag import (
    AbiClaim,
    format_label,
    mismatches,
    parse_claim,
    runtime_cuda,
    torch_build,
    torch_cxx11abi,
    unverifiable_reason,
)
from envbuild.wheelhouse import local_tag

PROPERTY = settings(max_examples=300, deadline=None, database=None, derandomize=True)


def _claim(text: str) -> AbiClaim:
    claim = parse_claim(text)
    assert claim is not None, text
    return claim


def _forms(version: str, name: str = "flash_attn") -> list[str]:
    """The ways a lock or an index hands one version to the gate."""
    label = version.split("+", 1)[1]
    wheel = f"{name}-{version}-cp312-cp312-linux_x86_64.whl"
    return [
        label,
        "+" + label,
        version,
        version.lower(),  # uv.lock lower-cases the local part
        wheel,
        f"https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/{wheel}",
        "https://files.example.org/whl/" + wheel.replace("+", "%2B") + "#sha256=" + "0" * 64,
        f"/var/cache/wheels/{wheel.lower()}",
    ]


# ----------------------------------------------------------------------------- formats

DAO = [
    # (version, torch, cuda, cxx11abi)
    ("2.8.3+cu12torch2.6cxx11abiFALSE", (2, 6), (12, None), False),
    ("2.8.3+cu12torch2.6cxx11abiTRUE", (2, 6), (12, None), True),
    ("2.8.3+cu13torch2.10cxx11abiTRUE", (2, 10), (13, None), True),
    ("2.8.3+cu13torch2.10cxx11abiFALSE", (2, 10), (13, None), False),
    # older releases: cu118/cu122
    ("2.5.9.post1+cu118torch2.3cxx11abiFALSE", (2, 3), (11, 8), False),
    ("2.5.9.post1+cu122torch2.3cxx11abiTRUE", (2, 3), (12, 2), True),
]


@pytest.mark.parametrize(("version", "torch", "cuda", "abi"), DAO)
def test_dao_ailab(
    version: str, torch: tuple[int, int], cuda: tuple[int, int | None], abi: bool
) -> None:
    for text in _forms(version):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.cuda, claim.cxx11abi) == (
            "dao-ailab",
            torch,
            cuda,
            abi,
        ), text
        assert claim.torch_version is None and not claim.cpu and claim.rocm is None
        assert claim.text.lower() == version.split("+", 1)[1].lower()


@pytest.mark.parametrize("name", ["mamba_ssm", "causal_conv1d"])
def test_state_spaces(name: str) -> None:
    for text in _forms("2.2.4+cu12torch2.6cxx11abiFALSE", name):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.cuda, claim.cxx11abi) == (
            "dao-ailab",
            (2, 6),
            (12, None),
            False,
        )


@pytest.mark.parametrize(
    ("version", "torch", "cuda"),
    [
        ("2.8.3+cu128torch2.10", (2, 10), (12, 8)),
        ("2.7.4+cu124torch2.6", (2, 6), (12, 4)),
        ("2.8.3+cu130torch2.9", (2, 9), (13, 0)),
    ],
)
def test_community(version: str, torch: tuple[int, int], cuda: tuple[int, int]) -> None:
    for text in _forms(version):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.cuda, claim.cxx11abi) == (
            "community",
            torch,
            cuda,
            None,
        ), text
        assert claim.torch_version is None


@pytest.mark.parametrize(
    ("version", "torch", "cuda", "abi"),
    [
        ("3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61", (2, 10), (12, 8), True),
        ("3.0.0+20260318.cu128torch2100cxx11abiTRUE.8afc61", (2, 10), (12, 8), True),
        ("3.0.0b1+20250611.cu126torch260cxx11abifalse.1a2b3c4", (2, 6), (12, 6), False),
        ("3.0.0b1+20250611.cu128torch271cxx11abiFALSE.1a2b3c4", (2, 7), (12, 8), False),
        ("3.0.0+cu129torch280cxx11abitrue", (2, 8), (12, 9), True),  # no date, no commit
    ],
)
def test_fa3(version: str, torch: tuple[int, int], cuda: tuple[int, int], abi: bool) -> None:
    for text in _forms(version, "flash_attn_3"):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.cuda, claim.cxx11abi) == (
            "fa3",
            torch,
            cuda,
            abi,
        ), text
        assert claim.torch_version is None
    assert _claim(f"flash_attn_3-{version}-cp39-abi3-linux_x86_64.whl").torch == torch


@pytest.mark.parametrize(
    ("version", "torch", "full", "cuda", "cpu"),
    [
        ("1.6.1+cu132torch2.12.0.dev20260405", (2, 12), "2.12.0.dev20260405", (13, 2), False),
        ("1.2.0+cputorch2.13.0", (2, 13), "2.13.0", None, True),
        ("0.3.1+cu128torch2.10.0rc3", (2, 10), "2.10.0rc3", (12, 8), False),
        ("0.3.1+cu130torch2.11.1", (2, 11), "2.11.1", (13, 0), False),
    ],
)
def test_envbuild(
    version: str, torch: tuple[int, int], full: str, cuda: tuple[int, int] | None, cpu: bool
) -> None:
    for text in _forms(version, "c_ext"):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.torch_version, claim.cuda, claim.cpu) == (
            "envbuild",
            torch,
            full,
            cuda,
            cpu,
        ), text
        assert claim.cxx11abi is None


@pytest.mark.parametrize(
    ("version", "torch", "cuda", "cpu"),
    [
        ("2.1.2+pt25cu124", (2, 5), (12, 4), False),  # PyG's wheels
        ("2.1.2+pt113cu117", (1, 13), (11, 7), False),
        ("2.1.2+pt25cpu", (2, 5), None, True),
        ("1.0+pt210cu128", (2, 10), (12, 8), False),
        ("1.0+cu128pt2.10", (2, 10), (12, 8), False),
        ("1.0+cu128pt210", (2, 10), (12, 8), False),
        ("1.0+pt2.10cu128", (2, 10), (12, 8), False),
        ("1.0+pt2.10.1cu128", (2, 10), (12, 8), False),
    ],
)
def test_pt(version: str, torch: tuple[int, int], cuda: tuple[int, int] | None, cpu: bool) -> None:
    for text in _forms(version, "torch_scatter"):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.cuda, claim.cpu, claim.cxx11abi) == (
            "pt",
            torch,
            cuda,
            cpu,
            None,
        ), text


COSMOS = [
    # (version, torch, cuda): NVIDIA cosmos-dependencies, the torch version its build was given,
    # dots removed
    ("2.6.3+cu128.torch271", (2, 7), (12, 8)),  # v1.1.0 (nvidia-cosmos/cosmos-predict2.5's uv.lock)
    ("0.1+cu126.torch260", (2, 6), (12, 6)),  # apex, v1.1.0
    ("2.7.3+cu128.torch27", (2, 7), (12, 8)),  # v1.2.0
    ("2.7.4.post1+cu130.torch29", (2, 9), (13, 0)),
    # v1.5.0: 2.10, not 2.1.0 (no 2.1 build had CUDA 12.8)
    ("0.21.6.dev6+cu128.torch210", (2, 10), (12, 8)),
    ("1.0+cu121.torch210", (2, 1), (12, 1)),  # torch 2.1.0's CUDA 12.1 build
    ("1.0+cu118.torch212", (2, 1), (11, 8)),
    ("1.0+cu130.torch211", (2, 11), (13, 0)),
    ("1.0+cu128.torch2100", (2, 10), (12, 8)),
    ("3.3.10+cu128.torch280", (2, 8), (12, 8)),  # horizon-plugin-pytorch spells it the same way
]


@pytest.mark.parametrize(("version", "torch", "cuda"), COSMOS)
def test_cosmos(version: str, torch: tuple[int, int], cuda: tuple[int, int]) -> None:
    for text in _forms(version):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.cuda, claim.cxx11abi) == (
            "cosmos",
            torch,
            cuda,
            None,
        ), text
        assert claim.torch_version is None and not claim.cpu and claim.rocm is None
    url = (
        "https://github.com/nvidia-cosmos/cosmos-dependencies/releases/download/v1.1.0/"
        "transformer_engine-1.13.0%2Bcu128.torch271-cp312-cp312-linux_x86_64.whl"
    )
    assert _claim(url).torch == (2, 7)


@pytest.mark.parametrize(
    "label",
    [
        "cu12.torch210",
        "cpu.torch211",
        "rocm6.2.torch210",
        "cu128.torch113",
        "cu128.torch2",
        "cu128.torch21000",
        "cu128.torch",
        "cu128torch.271",
    ],
)
def test_cosmos_ambiguous_or_incomplete_is_none(label: str) -> None:
    """``21x`` is 2.1.x or 2.1x: without a CUDA major.minor to decide, nothing is claimed."""
    assert parse_claim(label) is None
    assert parse_claim("1.0+" + label) is None


ASTRAL = [
    # (version, torch, cuda, cpu, rocm): wheels.astral.sh
    ("2.2.0+cu.13.0.torch.2.11", (2, 11), (13, 0), False, None),  # sageattention, its cu130 index
    ("1.6.2.post1+cu.12.8.torch.2.11", (2, 11), (12, 8), False, None),  # causal-conv1d
    ("2.8.3.post1+cu.12.8.torch.2.8", (2, 8), (12, 8), False, None),  # flash-attn
    ("2.1.2+cu.12.8.torch.2.10", (2, 10), (12, 8), False, None),  # torch-scatter
    ("0.9.0+cpu.torch.2.10", (2, 10), None, True, None),  # its CPU index
    ("1.0+cu128.torch.2.8.0", (2, 8), (12, 8), False, None),  # a spelling its collector accepts
    ("1.0+rocm6.3.torch.2.10", (2, 10), None, False, "6.3"),
]


@pytest.mark.parametrize(("version", "torch", "cuda", "cpu", "rocm"), ASTRAL)
def test_astral(
    version: str, torch: tuple[int, int], cuda: tuple[int, int] | None, cpu: bool, rocm: str | None
) -> None:
    for text in _forms(version, "sageattention"):
        claim = _claim(text)
        assert (claim.style, claim.torch, claim.cuda, claim.cpu, claim.rocm) == (
            "astral",
            torch,
            cuda,
            cpu,
            rocm,
        ), text
        assert claim.cxx11abi is None and claim.torch_version is None
    url = (
        "https://wheels.astral.sh/artifacts/355aa4b5ca/sageattention-2.2.0%2Bcu.13.0.torch.2.11-cp313-cp313-"
        "manylinux_2_24_x86_64.whl#sha256=355aa4b5ca"
    )
    assert _claim(url).torch == (2, 11)


@pytest.mark.parametrize(
    "label",
    [
        "cu.13.torch.2.11",
        "cu.13.0.torch.2",
        "cu.13.0.torch",
        "xpu.torch.2.10",
        "cu.13.0.torch.2.11.extra",
        "cu.13.0.pt.2.11",
        "das.opt1.dtk2604.torch271",
        "b1629e2.torch29",
    ],
)
def test_unread_dotted_labels_are_none(label: str) -> None:
    assert parse_claim(label) is None


def test_new_styles_pair_with_torch() -> None:
    """A flash-attn for torch 2.6 or 2.9 beside torch 2.7 or 2.11 is a mismatch in both styles; the
    pair it was built for is not."""
    assert _kinds("2.6.3+cu128.torch271", "2.7.1+cu128") == []
    assert _kinds("2.6.3+cu126.torch260", "2.7.1+cu128") == ["torch-minor"]
    assert _kinds("2.7.4.post1+cu128.torch29", "2.7.1+cu128") == ["torch-minor"]
    assert _kinds("2.7.4.post1+cu130.torch29", "2.11.0+cu130") == ["torch-minor"]
    assert _kinds("2.8.3.post1+cu.13.0.torch.2.11", "2.11.0+cu130") == []
    assert _kinds("2.8.3.post1+cu.13.0.torch.2.9", "2.11.0+cu130") == ["torch-minor"]
    assert _kinds("2.8.3.post1+cu.12.8.torch.2.6", "2.7.1+cu128") == ["torch-minor"]
    assert _kinds("2.8.3.post1+cu.12.8.torch.2.11", "2.11.0+cu130") == ["cuda-major"]
    assert _kinds("0.9.0+cpu.torch.2.10", "2.10.0+cu128") == ["cuda-vs-cpu"]
    assert unverifiable_reason(_claim("2.6.3+cu128.torch271"), torch_build("2.7.1+cu128")) is None
    # torch 2.6 shipped both ABIs and neither style claims one: said so
    reason = unverifiable_reason(_claim("2.6.3+cu126.torch260"), torch_build("2.6.0+cu126"))
    assert reason is not None and "C++ ABI" in reason


def test_catalogue_has_a_parsing_example_for_every_style() -> None:
    """The module docstring's catalogue names each style read with a real example; each example
    (some token of its bullet) is read as that style, and every style the reader returns is listed.
    """
    import re

    import envbuild.abitag as abitag

    doc = abitag.__doc__ or ""
    bullets = re.findall(r"^- ``([a-z0-9-]+)``:(.*?)(?=^- |^\n|\Z)", doc, re.MULTILINE | re.DOTALL)
    styles = {style for style, _ in bullets}
    assert styles == {
        "dao-ailab",
        "community",
        "fa3",
        "envbuild",
        "natten",
        "pt",
        "cosmos",
        "astral",
        "conda",
    }
    for style, body in bullets:
        tokens = re.findall(r"``([^`]+)``", body)
        read = [t for t in tokens if (c := _either(t)) is not None and c.style == style]
        assert read, (style, tokens)


def _either(token: str) -> AbiClaim | None:
    """A catalogue token as a wheel's label or file name, else as a conda file's build string."""
    from envbuild.abitag import parse_conda_build

    claim = parse_claim(token.replace("==", "-"))
    if claim is None and token.endswith((".conda", ".tar.bz2")):
        claim = parse_conda_build(token.rsplit("-", 1)[-1].split(".tar")[0].split(".conda")[0])
    return claim


@pytest.mark.parametrize(
    ("build", "cuda", "torch", "cpu"),
    [
        ("py312_cu12.1.0_pyt2.3.0", (12, 1), (2, 3), False),  # the xformers channel
        ("py310_cu11.8.0_pyt2.1.0", (11, 8), (2, 1), False),
        ("py311_cpu_pyt2.1.0", None, (2, 1), True),
    ],
)
def test_conda_build_strings(
    build: str, cuda: tuple[int, int] | None, torch: tuple[int, int], cpu: bool
) -> None:
    from envbuild.abitag import parse_conda_build

    claim = parse_conda_build(build)
    assert claim is not None
    assert (claim.cuda, claim.torch, claim.cpu, claim.style) == (cuda, torch, cpu, "conda")


@pytest.mark.parametrize(
    "build", ["cuda126_py312h1234567_300", "py3.12_cuda11.8_cudnn8.7.0_0", "pyhd8ed1ab_0", ""]
)
def test_conda_builds_that_name_no_torch(build: str) -> None:
    from envbuild.abitag import parse_conda_build

    assert parse_conda_build(build) is None


@pytest.mark.parametrize("label", ["pt2100cu128", "pt2cu128", "pt210", "cu128pt", "pt210cu128x"])
def test_pt_ambiguous_or_incomplete_is_none(label: str) -> None:
    assert parse_claim(label) is None
    assert parse_claim("1.0+" + label) is None


def test_rocm() -> None:
    claim = _claim("1.0+rocm6.2torch2.5")
    assert (claim.rocm, claim.cuda, claim.cpu, claim.torch) == ("6.2", None, False, (2, 5))
    assert _claim("1.0+pt25rocm6.2").rocm == "6.2"
    assert _claim("1.0+rocm6.2.4torch2.5cxx11abiFALSE").rocm == "6.2.4"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "+",
        "torch",
        "pt",
        "2.8.3",
        "2.10.0+cu128",
        "+cu128",
        "cu128",
        "+cpu",
        "2.5.1+rocm6.2",
        # torch's own local tag: no claim
        "torch-2.10.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
        "https://download.pytorch.org/whl/cu128/torch-2.10.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torchvision-0.25.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
        "requests-2.32.3-py3-none-any.whl",
        "flash_attn-2.8.3.tar.gz",
        "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl",
        "cu12torch",
        "cu12torchcxx11abitrue",
        "cu12torch2.6cxx11abimaybe",
        "cu12torch2.6.",
        "cu12torch2",
        "cu12torch2.6cxx11abiFALSE.extra",
        "cu128torch21000cxx11abitrue",
        "xcu12torch2.6",
        "2.8.3+cu12torch2.6cxx11abiFALSE-cp312.whl",
        "..whl",
        ".whl",
        "/",
        "#",
        "?",
        "é",
        "cu12torch２.６",
        "torch\x00",
        "\udcff",
        "+cu12torch2.6cxx11abi\u0130",
        "\n\t ",
        "cu1torch2.6",
        "cu12345torch2.6",
        "a" * 10_000,
        "torch" * 2_000,
        "+" + "cu12torch2.6" * 1_000,
        "pt" * 5_000,
        "9" * 10_000 + "torch2.6",
    ],
)
def test_no_claim_no_exception(text: str) -> None:
    assert parse_claim(text) is None


@given(st.text(max_size=200))
@PROPERTY
def test_parse_never_raises(text: str) -> None:
    claim = parse_claim(text)
    build = torch_build(text)
    assert build.version == text
    if claim is not None:
        assert claim.torch is not None
        for platform in ("linux", "darwin", "win32", "manylinux_2_28_aarch64"):
            mismatches(claim, build, platform)
            unverifiable_reason(claim, build, platform)
    unverifiable_reason(claim, build)


@given(
    st.from_regex(
        r"(\d{8}\.)?(cu\d{1,5}|cpu|rocm[\d.]{1,6})?(torch|pt)[\d.]{0,8}(cxx11abi(true|false))?(\.[0-9a-f]{0,8})?",
        fullmatch=True,
    )
)
@PROPERTY
def test_parse_near_misses_never_raise(label: str) -> None:
    for text in (label, "1.0+" + label, f"pkg-1.0+{label}-cp312-cp312-linux_x86_64.whl"):
        claim = parse_claim(text)
        if claim is not None:
            assert claim.torch is not None and claim.style in {
                "dao-ailab",
                "community",
                "fa3",
                "envbuild",
                "pt",
                "cosmos",
                "astral",
            }
            mismatches(claim, torch_build("2.10.0+cu128"))


# ----------------------------------------------------------------------------- torch builds


@pytest.mark.parametrize(
    ("version", "minor", "cuda", "cpu", "rocm", "local"),
    [
        ("2.10.0+cu128", (2, 10), (12, 8), False, None, "cu128"),
        ("2.11.0+cu130", (2, 11), (13, 0), False, None, "cu130"),
        ("2.12.0.dev20260405+cu132", (2, 12), (13, 2), False, None, "cu132"),
        ("2.13.0+cpu", (2, 13), None, True, None, "cpu"),
        ("2.5.1+cpu.cxx11.abi", (2, 5), None, True, None, "cpu.cxx11.abi"),
        ("2.5.1+rocm6.2", (2, 5), None, False, "6.2", "rocm6.2"),
        ("2.10.0", (2, 10), None, False, None, None),
        ("2.10.0+CU128", (2, 10), (12, 8), False, None, "cu128"),
        ("not a version", None, None, False, None, None),
        ("", None, None, False, None, None),
    ],
)
def test_torch_build(
    version: str,
    minor: tuple[int, int] | None,
    cuda: tuple[int, int] | None,
    cpu: bool,
    rocm: str | None,
    local: str | None,
) -> None:
    build = torch_build(version)
    assert (build.version, build.minor, build.cuda, build.cpu, build.rocm, build.local) == (
        version,
        minor,
        cuda,
        cpu,
        rocm,
        local,
    )


@pytest.mark.parametrize(
    ("version", "platform", "abi"),
    [
        ("2.10.0+cu128", "linux", True),
        ("2.7.0", "linux", True),
        ("2.7.0+cu118", "manylinux_2_28_x86_64", True),
        ("2.6.0+cu126", "linux", True),  # 2.6 moved only its CUDA 12.6 wheels
        ("2.6.0+cu124", "linux", False),
        ("2.6.0", "linux", False),  # PyPI's 2.6.0 is the CUDA 12.4 build
        ("2.6.0+cpu", "linux", False),
        ("2.6.0.dev20241201+cu126", "linux", None),
        ("2.5.1+cu121", "linux", False),
        ("2.5.1+cpu.cxx11.abi", "linux", True),
        ("2.5.1+rocm6.2", "linux", None),
        ("2.5.1", "linux_aarch64", None),
        ("2.10.0+cu128", "darwin", None),
        ("2.10.0+cu128", "win32", None),
        ("bogus", "linux", None),
    ],
)
def test_torch_cxx11abi(version: str, platform: str, abi: bool | None) -> None:
    assert torch_cxx11abi(torch_build(version), platform) is abi


# ----------------------------------------------------------------------------- mismatches


def _kinds(label: str, torch: str, platform: str = "linux") -> list[str]:
    return [m.kind for m in mismatches(_claim(label), torch_build(torch), platform)]


def test_torch_minor() -> None:
    (found,) = mismatches(_claim("2.8.1+cu13torch2.10cxx11abitrue"), torch_build("2.11.0+cu130"))
    assert found.kind == "torch-minor"
    assert found.message == "built for torch 2.10, locked with torch 2.11.0+cu130"
    assert _kinds("2.8.3+cu128torch2.9", "2.10.0+cu128") == ["torch-minor"]
    assert _kinds("3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61", "2.9.1+cu128") == [
        "torch-minor"
    ]
    assert _kinds("2.1.2+pt25cu124", "2.6.0+cu124") == ["torch-minor"]


def test_cuda_major() -> None:
    (found,) = mismatches(_claim("2.8.3+cu12torch2.10"), torch_build("2.10.0+cu130"))
    assert found.kind == "cuda-major"
    assert (
        "CUDA 12" in found.message
        and "2.10.0+cu130" in found.message
        and "CUDA 13.0" in found.message
    )
    assert _kinds("2.5.9.post1+cu118torch2.3cxx11abiFALSE", "2.3.1+cu121") == ["cuda-major"]
    # a minor within the major is compatible
    assert _kinds("2.8.3+cu126torch2.10", "2.10.0+cu128") == []
    assert _kinds("2.8.3+cu12torch2.10cxx11abiTRUE", "2.10.0+cu129") == []


def test_matching_pairs() -> None:
    assert _kinds("2.8.3+cu12torch2.6cxx11abiFALSE", "2.6.0+cu124") == []
    assert (
        unverifiable_reason(_claim("2.8.3+cu12torch2.6cxx11abiFALSE"), torch_build("2.6.0+cu124"))
        is None
    )
    assert _kinds("2.8.3+cu12torch2.6cxx11abiTRUE", "2.6.0+cu126") == []
    assert _kinds("2.8.3+cu13torch2.10cxx11abiTRUE", "2.10.0+cu130") == []
    assert _kinds("3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61", "2.10.0+cu128") == []
    assert _kinds("1.6.1+cu132torch2.12.0.dev20260405", "2.12.0.dev20260405+cu132") == []
    assert _kinds("1.2.0+cputorch2.13.0", "2.13.0+cpu") == []
    assert _kinds("2.1.2+pt25cpu", "2.5.1+cpu") == []


def test_cxx11abi() -> None:
    (found,) = mismatches(_claim("2.8.3+cu12torch2.10cxx11abiFALSE"), torch_build("2.10.0+cu128"))
    assert found.kind == "cxx11abi"
    assert "cxx11abiFALSE" in found.message and "2.10.0+cu128" in found.message
    assert _kinds("2.8.3+cu12torch2.6cxx11abiFALSE", "2.6.0+cu126") == ["cxx11abi"]
    assert _kinds("2.8.3+cu12torch2.6cxx11abiTRUE", "2.6.0+cu124") == ["cxx11abi"]
    assert _kinds("2.8.3+cu12torch2.6cxx11abiTRUE", "2.6.0") == ["cxx11abi"]
    # not Linux: nothing to compare, and said so
    assert _kinds("2.8.3+cu12torch2.10cxx11abiFALSE", "2.10.0+cu128", "win32") == []
    reason = unverifiable_reason(
        _claim("2.8.3+cu12torch2.10cxx11abiFALSE"), torch_build("2.10.0+cu128"), "win32"
    )
    assert reason is not None and "cxx11abi was not compared" in reason


def test_cuda_vs_cpu() -> None:
    (found,) = mismatches(_claim("2.8.3+cu128torch2.10"), torch_build("2.10.0+cpu"))
    assert (
        found.kind == "cuda-vs-cpu"
        and "CUDA 12.8" in found.message
        and "2.10.0+cpu" in found.message
    )
    assert _kinds("1.2.0+cputorch2.13.0", "2.13.0+cu130") == ["cuda-vs-cpu"]
    assert _kinds("2.1.2+pt25cpu", "2.5.1+cu124") == ["cuda-vs-cpu"]


def test_torch_version() -> None:
    (found,) = mismatches(
        _claim("1.6.1+cu132torch2.12.0.dev20260405"), torch_build("2.12.0.dev20260410+cu132")
    )
    assert found.kind == "torch-version"
    assert (
        found.message
        == "built for torch 2.12.0.dev20260405, locked with torch 2.12.0.dev20260410+cu132"
    )
    assert _kinds("1.2.0+cputorch2.13.0", "2.13.1+cpu") == ["torch-version"]
    # a different minor is reported once, as torch-minor
    assert _kinds("1.2.0+cputorch2.13.0", "2.14.0+cpu") == ["torch-minor"]
    # the local tag is not part of the compared version
    assert _kinds("1.6.1+cu132torch2.12.0.dev20260405", "2.12.0.dev20260405+cu132") == []


def test_rocm_mismatch() -> None:
    assert _kinds("1.0+rocm6.2torch2.5", "2.5.1+cu124") == ["rocm"]
    assert _kinds("1.0+cu124torch2.5", "2.5.1+rocm6.2") == ["rocm"]
    assert _kinds("1.0+rocm6.2torch2.5", "2.5.1+rocm6.2") == []
    assert _kinds("1.0+rocm6.2torch2.5", "2.5.1+rocm5.7") == ["rocm"]


def test_several_at_once() -> None:
    assert sorted(_kinds("2.8.3+cu12torch2.9cxx11abiFALSE", "2.10.0+cu130")) == [
        "cuda-major",
        "cxx11abi",
        "torch-minor",
    ]


def test_unverifiable() -> None:
    assert (
        unverifiable_reason(None, torch_build("2.10.0+cu128"))
        == "no ABI tag envbuild reads in its version or file name"
    )
    claim = _claim("2.8.3+cu12torch2.10cxx11abiTRUE")
    # PyPI's default torch carries no local tag: no CUDA finding, and the reason says why
    assert mismatches(_claim("2.8.3+cu13torch2.10cxx11abiTRUE"), torch_build("2.10.0")) == []
    assert (
        unverifiable_reason(claim, torch_build("2.10.0"))
        == "torch 2.10.0 carries no local CUDA tag, so the CUDA major was not compared"
    )
    assert unverifiable_reason(claim, torch_build("2.10.0+cu128")) is None
    reason = unverifiable_reason(claim, torch_build("garbage"))
    assert reason is not None and "garbage" in reason
    reason = unverifiable_reason(_claim("1.0+cu124torch2.6"), torch_build("2.6.0+cu126"))
    assert reason is not None and "C++ ABI" in reason
    assert unverifiable_reason(_claim("1.0+cu128torch2.10"), torch_build("2.10.0+cu128")) is None


# ----------------------------------------------------------------------------- torch's runtime


@pytest.mark.parametrize(
    ("packages", "expected"),
    [
        (
            [
                ("nvidia-cuda-runtime-cu12", "12.8.90"),
                ("nvidia-nccl-cu12", "2.27.5"),
                ("filelock", "3.0"),
            ],
            (12, "nvidia-cuda-runtime-cu12 12.8.90"),
        ),
        ([("nvidia-cudnn-cu11", "8.7.0.84")], (11, "nvidia-cudnn-cu11 8.7.0.84")),
        ([("nvidia-nccl-cu13", "2.28.3")], (13, "nvidia-nccl-cu13 2.28.3")),
        # torch 2.11 on PyPI: CUDA 13's toolkit wheels dropped the suffix, their version is CUDA's
        (
            [
                ("nvidia-cuda-runtime", "13.0.96"),
                ("nvidia-cublas", "13.1.0.3"),
                ("nvidia-cufft", "12.0.0.61"),
            ],
            (13, "nvidia-cuda-runtime 13.0.96"),
        ),
        (
            [("cuda-toolkit", "13.0.2"), ("nvidia-cudnn-cu13", "9.13.0.50")],
            (13, "cuda-toolkit 13.0.2"),
        ),
        ([("nvidia_cuda_runtime_cu12", None)], (12, "nvidia_cuda_runtime_cu12")),
        # their own release numbers
        ([("nvidia-cublas", "13.1.0.3"), ("nvidia-cufft", "12.0.0.61")], None),
        # they disagree
        ([("nvidia-cuda-runtime-cu12", "12.8.90"), ("nvidia-nccl-cu13", "2.28.3")], None),
        ([("filelock", "3.0"), ("nvidia-ml-py", "12.560.30")], None),
        ([], None),
    ],
)
def test_runtime_cuda(
    packages: list[tuple[str, str | None]], expected: tuple[int, str] | None
) -> None:
    assert runtime_cuda(packages) == expected


def test_torch_without_a_local_tag_takes_its_runtimes_cuda_major() -> None:
    cu12 = (12, "nvidia-cuda-runtime-cu12 12.8.90")
    build = torch_build("2.8.0", cu12)
    assert (build.cuda, build.runtime, build.runtime_from) == (
        None,
        12,
        "nvidia-cuda-runtime-cu12 12.8.90",
    )
    # +cu11torch2.5 beside PyPI's torch 2.8.0 (a CUDA 12.8 build on Linux): torch minor and CUDA
    # major
    found = mismatches(_claim("2.7.0.post2+cu11torch2.5cxx11abiFALSE"), build)
    assert sorted(m.kind for m in found) == ["cuda-major", "cxx11abi", "torch-minor"]
    (cuda,) = [m for m in found if m.kind == "cuda-major"]
    assert (
        cuda.message == "built for CUDA 11, locked with torch 2.8.0, a CUDA 12 build "
        "(its runtime: nvidia-cuda-runtime-cu12 12.8.90)"
    )
    assert mismatches(_claim("2.8.3+cu12torch2.8cxx11abiTRUE"), build) == []
    assert unverifiable_reason(_claim("2.8.3+cu12torch2.8cxx11abiTRUE"), build) is None
    assert [
        m.kind
        for m in mismatches(
            _claim("2.8.3.post1+cu.12.8.torch.2.11"),
            torch_build("2.11.0", (13, "nvidia-cuda-runtime 13.0.96")),
        )
    ] == ["cuda-major"]
    # a local tag that names the build wins; the runtime is not consulted
    assert torch_build("2.8.0+cu128", (13, "nvidia-nccl-cu13 2.28.3")).runtime is None
    assert torch_build("2.8.0+cpu", cu12).runtime is None
    # neither says: as before, nothing compared and the reason given
    claim = _claim("2.8.3+cu13torch2.8cxx11abiTRUE")
    assert mismatches(claim, torch_build("2.8.0")) == []
    assert (
        unverifiable_reason(claim, torch_build("2.8.0"))
        == "torch 2.8.0 carries no local CUDA tag, so the CUDA major was not compared"
    )
    # a CPU claim is not compared with a runtime-only torch, and says so
    reason = unverifiable_reason(_claim("0.9.0+cpu.torch.2.8"), build)
    assert reason is not None and "CPU vs CUDA was not compared" in reason


# ----------------------------------------------------------------------------- the wheelhouse


def test_format_label_is_local_tag() -> None:
    assert format_label("2.12.0.dev20260405+cu132", "13.2") == "cu132torch2.12.0.dev20260405"
    assert format_label("2.13.0+cpu", None) == "cputorch2.13.0"
    assert local_tag("2.12.0.dev20260405+cu132", "13.2") == "cu132torch2.12.0.dev20260405"
    assert local_tag("2.13.0+cpu", None) == "cputorch2.13.0"


_releases = st.tuples(st.integers(1, 3), st.integers(0, 30), st.integers(0, 12))
_pre = st.sampled_from(["", "a0", "a1", "b2", "rc1", "rc10"])
_post = st.sampled_from(["", ".post1"])
_dev = st.one_of(st.just(""), st.integers(0, 29_991_231).map(lambda n: f".dev{n}"))
_torch_versions = st.builds(
    lambda r, pre, post, dev: f"{r[0]}.{r[1]}.{r[2]}{pre}{post}{dev}", _releases, _pre, _post, _dev
)
_locals = st.sampled_from(
    ["", "+cu118", "+cu128", "+cu130", "+cu132", "+cpu", "+rocm6.2", "+git1a2b3c"]
)
_cudas = st.one_of(
    st.none(),
    st.tuples(st.integers(9, 13), st.integers(0, 9)),
    st.tuples(st.integers(10, 13), st.integers(10, 19)),
)


@given(_torch_versions, _locals, _cudas)
@PROPERTY
def test_round_trip(public: str, local: str, cuda: tuple[int, int] | None) -> None:
    version = public + local
    cuda_text = None if cuda is None else f"{cuda[0]}.{cuda[1]}"
    label = format_label(version, cuda_text)
    assert label == local_tag(version, cuda_text)
    for text in (label, f"1.6.1+{label}", f"c_ext-1.6.1+{label}-cp312-cp312-linux_x86_64.whl"):
        claim = _claim(text)
        assert claim.style == "envbuild"
        assert claim.torch_version == public
        assert claim.cuda == cuda
        assert claim.cpu is (cuda is None)
        assert claim.cxx11abi is None and claim.rocm is None
        assert claim.torch == tuple(int(p) for p in public.split(".")[:2])
    # and it fits the very torch it was written for
    build = torch_build(version)
    found = [m.kind for m in mismatches(_claim(label), build)]
    assert "torch-minor" not in found and "torch-version" not in found


def test_natten_puts_torch_first() -> None:
    """NATTEN's wheels (whl.natten.org) read ``+torch2100cu130``: the order a real lock holds
    (NVIDIA/physicsnemo's uv.lock pairs them with a newer torch, which this catches)."""
    claim = parse_claim(
        "https://whl.natten.org/cu130/torch2.10.0/natten-0.21.6+torch2100cu130-cp312-cp312-linux_x86_64.whl"
    )
    assert claim is not None and (claim.torch, claim.cuda, claim.style) == (
        (2, 10),
        (13, 0),
        "natten",
    )
    old = parse_claim("0.21.6+torch260cu126")
    assert old is not None and old.torch == (2, 6)
    assert [m.kind for m in mismatches(claim, torch_build("2.12.0+cu130"))] == ["torch-minor"]
    assert mismatches(claim, torch_build("2.10.0+cu130")) == []
    assert parse_claim("0.21.6+torch2100") is None  # no accelerator: not this format
