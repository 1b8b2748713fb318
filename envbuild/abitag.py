"""ABI claims in the local version labels of prebuilt CUDA extension wheels: one reader, one writer.

A prebuilt extension (flash-attn, mamba-ssm, causal-conv1d, envbuild's own wheelhouse builds)
says in its local version label which torch, CUDA and C++ ABI it was compiled against. The CI
lock gate checks that claim against the torch it is locked with, the wheelhouse writes such
labels (``format_label``) and the provision guard reads them back, all through this module.

Labels read (case-insensitive: lock files lower-case the local part; ``-``/``_`` read as ``.``),
each with one real published example:

- ``dao-ailab``: Dao-AILab flash-attention and state-spaces mamba / causal-conv1d releases,
  ``flash_attn-2.8.3+cu12torch2.6cxx11abiFALSE-cp312-cp312-linux_x86_64.whl`` (older releases
  ``cu118torch2.3cxx11abiTRUE``): CUDA, torch major.minor, C++ ABI.
- ``community``: prebuilt-wheel repositories and flashinfer,
  ``flash_attn-2.8.3+cu128torch2.7-cp312-cp312-linux_x86_64.whl`` (mjun0812's prebuilt wheels),
  ``flashinfer_python-0.2.5+cu128torch2.7-cp38-abi3-linux_x86_64.whl`` (download.pytorch.org):
  CUDA major.minor, torch major.minor.
- ``fa3``: FA3 wheel builds,
  ``flash_attn_3-3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61-cp39-abi3-win_amd64.whl``
  (windreamer's flash-attention3-wheels; date and commit optional): CUDA, torch as digits (first the
  major, last the patch, the middle the minor: ``260`` = 2.6.0, ``271`` = 2.7.1, ``2100`` = 2.10.0),
  C++ ABI. Only major.minor is kept: ``torch_version`` (compared exactly) is for envbuild's labels
  alone.
- ``envbuild``: envbuild's wheelhouse (``format_label``), ``cu132torch2.12.0.dev20260405``,
  ``cputorch2.13.0``: CUDA major.minor or CPU, the full torch version.
- ``natten``: NATTEN's wheels (whl.natten.org), torch first,
  ``natten-0.21.6+torch2100cu130-cp312-cp312-linux_x86_64.whl``, ``torch260cu126``,
  ``torch2.10cu128``: torch major.minor (digits as FA3's), CUDA major.minor.
- ``pt``: PyG's spelling and its variants,
  ``torch_cluster-1.6.3+pt25cu121-cp310-cp310-linux_x86_64.whl`` (data.pyg.org), ``pt113cu117``,
  ``pt25cpu``, ``pt210cu128``, ``cu128pt2.10``, ``pt2.10cu128``: torch major.minor.
- ``cosmos``: NVIDIA's cosmos-dependencies (apex, flash-attn, natten, transformer-engine),
  ``flash_attn-2.6.3+cu128.torch271-cp312-cp312-linux_x86_64.whl`` (release v1.1.0; the same
  version in nvidia-cosmos/cosmos-predict2.5's uv.lock), ``+cu128.torch27`` (v1.2.0),
  ``+cu128.torch210`` (v1.5.0): CUDA major.minor, then the torch version the build was asked for
  with its dots removed (``bin/_build.sh``: ``TORCH_NAME="${TORCH_VERSION//./}"``), so
  ``27`` = 2.7, ``271`` = 2.7.1, ``2100`` = 2.10.0. Three digits with a middle ``1`` are 2.1.x or
  2.1x: read as 2.10-2.19 beside a CUDA newer than 12.1 (torch 2.1 shipped CUDA 11.8 and 12.1
  builds only, torch 2.10 none older than 12.6), as 2.1.x beside CUDA 12.1 or older, and not at
  all without a CUDA major.minor.
- ``astral``: the index of uv-built extension wheels (wheels.astral.sh/simple/cu130/), numeric
  segments separated by dots,
  ``sageattention-2.2.0+cu.13.0.torch.2.11-cp313-cp313-manylinux_2_24_x86_64.whl``,
  ``+cpu.torch.2.10`` (its CPU index), and the ``cu128.torch.2.8.0`` variant its collector accepts:
  CUDA major.minor (or CPU, or ROCm), torch major.minor.

- ``conda``: a conda package's build string (``parse_conda_build``), the xformers channel's
  ``xformers-0.0.26.post1-py312_cu12.1.0_pyt2.3.0.tar.bz2``: CUDA major.minor (or CPU), torch
  major.minor.

Any ``cu…`` may instead be ``rocm6.2`` (a ROCm claim, not CUDA). CUDA digits: two digits starting
with 1 are a major only (``cu12`` -> (12, None)); otherwise the last digit is the minor
(``cu92`` -> (9, 2), ``cu128`` -> (12, 8)), four digits split two and two (``cu1210`` -> (12, 10)).
``pt`` compact digits are major then minor (``pt25`` = 2.5, ``pt113`` = 1.13, ``pt210`` = 2.10),
as PyG publishes them; four or more digits are refused as ambiguous. A ``cu…torchM.m`` label with
a patch or a pre-/dev-release part, and any ``cputorch…``, is read as envbuild's (a full torch
version); ``cu…torchM.m`` is the community form. A label that is only an accelerator (torch's own
``+cu128``) claims no torch and reads as None, and so does every other label
(``+das.opt1.dtk2604.torch271``, a DTK build): the gate says which extension wheels carry a tag it
does not read.

torch's own CUDA: from its local tag (``+cu128``); a torch without one (PyPI's default build,
which on Linux is a CUDA build) takes the CUDA major of the runtime the lock installs with it
(``runtime_cuda``: ``nvidia-cuda-runtime-cu12`` -> 12; torch 2.11's unsuffixed
``nvidia-cuda-runtime 13.0.96`` -> 13), given to ``torch_build``.

Imports: the standard library only at import time (``packaging`` is imported on first use), so the
ABI guard and the wheelhouse can import this on their hot paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.utils import canonicalize_name

__all__ = [
    "AbiClaim",
    "parse_conda_build",
    "Mismatch",
    "TorchBuild",
    "format_label",
    "mismatches",
    "parse_claim",
    "runtime_cuda",
    "torch_build",
    "torch_cxx11abi",
    "unverifiable_reason",
]


@dataclass(frozen=True)
class AbiClaim:
    """What an extension wheel's local label says it was built against."""

    torch: tuple[int, int] | None  # torch major.minor the wheel was built against
    torch_version: str | None  # the full torch version (envbuild's labels only), else None
    # (12, 8) for cu128, (12, None) for cu12; None: no CUDA claim
    cuda: tuple[int, int | None] | None
    cpu: bool  # explicitly built for CPU
    rocm: str | None  # "6.2" for rocm6.2
    cxx11abi: bool | None  # None: not claimed
    # "dao-ailab" | "community" | "fa3" | "envbuild" | "pt" | "natten" | "cosmos" | "astral"
    style: str
    text: str  # the local label it was read from, as written


@dataclass(frozen=True)
class TorchBuild:
    """A torch version as a lock file or ``torch.__version__`` gives it, taken apart."""

    version: str  # as given
    minor: tuple[int, int] | None  # None: not a valid version
    cuda: tuple[int, int] | None  # +cu128 -> (12, 8); None for +cpu, +rocm..., no local tag
    cpu: bool  # +cpu (also +cpu.cxx11.abi)
    rocm: str | None  # +rocm6.2 -> "6.2"
    local: str | None  # the normalized local label ("cu128"), None without one
    # CUDA major of the runtime locked with it, where its local tag names none
    runtime: int | None = None
    runtime_from: str | None = None  # what said so: "nvidia-cuda-runtime-cu12 12.8.90"


@dataclass(frozen=True)
class Mismatch:
    # "torch-minor" | "torch-version" | "cuda-major" | "cuda-vs-cpu" | "rocm" | "cxx11abi"
    kind: str
    message: str  # one sentence naming both sides


# ----------------------------------------------------------------------------- reading

# Longer input is no version, file name or URL anyone publishes: refused before any work.
_MAX_INPUT = 4096
_MAX_LABEL = 160

_ACC = r"(?:cu(?P<cu>\d{2,4})|rocm(?P<rocm>\d+(?:\.\d+){0,2})|(?P<cpu>cpu))"
_ABI = r"cxx11abi(?P<abi>true|false)"
# Dao-AILab / mamba: cu12torch2.6cxx11abifalse (older releases: cu118torch2.3cxx11abitrue)
_DAO = re.compile(_ACC + r"torch(?P<maj>\d+)\.(?P<min>\d+)(?:\.\d+)?" + _ABI, re.ASCII)
# community (cu128torch2.10) and envbuild (cu132torch2.12.0.dev20260405, cputorch2.13.0)
_TORCHVER = re.compile(
    _ACC + r"torch(?P<ver>(?P<maj>\d+)\.(?P<min>\d+)(?P<rest>(?:\.\d+)*"
    r"(?:\.?(?:a|b|rc)\d+)?(?:\.?post\d+)?(?:\.?dev\d+)?))",
    re.ASCII,
)
# FA3: 20260318.cu128torch2100cxx11abitrue.8afc61 (date and commit optional)
_FA3 = re.compile(
    r"(?:\d{8}\.)?"
    + _ACC
    + r"torch(?P<maj>\d)(?P<min>\d{1,2})(?P<pat>\d)"
    + _ABI
    + r"(?:\.[0-9a-f]{4,40})?",
    re.ASCII,
)
# NATTEN (whl.natten.org): torch first, then the accelerator: 0.21.6+torch2100cu130, +torch260cu126
_TORCH_FIRST = re.compile(
    r"torch(?:(?P<cmaj>\d)(?P<cmin>\d{1,2})(?P<cpat>\d)|(?P<maj>\d+)\.(?P<min>\d+)(?:\.\d+)?)"
    + _ACC,
    re.ASCII,
)
_PT = r"pt(?:(?P<cmaj>\d)(?P<cmin>\d{1,2})|(?P<maj>\d+)\.(?P<min>\d+)(?:\.\d+)?)"
_PT_FIRST = re.compile(_PT + _ACC, re.ASCII)  # pt25cu124, pt2.10cu128, pt25cpu
_PT_LAST = re.compile(_ACC + _PT, re.ASCII)  # cu128pt2.10, cu128pt210
# NVIDIA cosmos-dependencies: cu128.torch271, cu128.torch27, cu128.torch210 (the torch version, dots
# removed)
_COSMOS = re.compile(_ACC + r"\.torch(?P<digits>\d{2,4})", re.ASCII)
# wheels.astral.sh: cu.13.0.torch.2.11, cpu.torch.2.10; the collector also takes cu128.torch.2.8.0
_ASTRAL = re.compile(
    r"(?:cu\.(?P<cmaj>\d{1,2})\.(?P<cmin>\d{1,2})|cu(?P<cu>\d{2,4})|rocm(?P<rocm>\d+(?:\.\d+){0,2})|(?P<cpu>cpu))"
    r"\.torch\.(?P<maj>\d+)\.(?P<min>\d+)(?:\.\d+)?",
    re.ASCII,
)

_TORCH_CU = re.compile(r"cu(\d{2,4})(?:\.|$)", re.ASCII)
_TORCH_ROCM = re.compile(r"rocm(\d+(?:\.\d+)*)", re.ASCII)
_PRERELEASE = re.compile(r"(?:a|b|rc|dev)\d*", re.IGNORECASE | re.ASCII)


def _cuda_digits(digits: str) -> tuple[int, int | None]:
    if len(digits) == 2:
        if digits[0] == "1":  # cu11, cu12, cu13: a major only
            return int(digits), None
        return int(digits[0]), int(digits[1])  # cu90, cu92
    return int(digits[:2]), int(digits[2:])  # cu118, cu128, cu130; cu1210


def _split(text: str) -> tuple[str | None, str | None]:
    """(the local label as written, the wheel file name) of a label, a version, a wheel file
    name or a wheel URL; the label is None when there is none, the file name None when the
    text is no wheel."""
    s = text.strip()
    if "%" in s:  # download.pytorch.org URLs quote the "+"
        s = s.replace("%2B", "+").replace("%2b", "+")
    if "/" in s or "?" in s or "#" in s:  # a URL or a path: its last segment, no query/fragment
        s = s.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1]
    if s[-4:].lower() == ".whl":
        # name-version(-build)?-python-abi-platform.whl; names and versions hold no "-"
        parts = s[:-4].split("-")
        if len(parts) not in (5, 6) or "+" not in parts[1]:
            return None, s
        return parts[1].split("+", 1)[1], s
    if "+" in s:
        return s.split("+", 1)[1], None
    return s, None


def _wheel_local(filename: str) -> str | None:
    """``Version.local`` of a wheel file name (packaging's reading), None when it rejects it."""
    from packaging.utils import parse_wheel_filename  # a 10 ms import: only once a claim is near

    try:
        return parse_wheel_filename(filename)[1].local
    except ValueError:  # InvalidWheelFilename, InvalidVersion
        return None


def parse_claim(label_or_filename: str) -> AbiClaim | None:
    """The ABI claim in a local label, a full version, or a wheel file name / URL; None when none.

    ``"cu12torch2.10cxx11abitrue"``, ``"2.8.3+cu12torch2.10cxx11abiTRUE"``,
    ``"https://.../flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"``
    all give the same claim. None for a label without a torch claim (torch's own ``+cu128``), a
    plain version, or anything it does not understand. Never raises.
    """
    if not isinstance(label_or_filename, str) or len(label_or_filename) > _MAX_INPUT:
        return None
    raw, wheel = _split(label_or_filename)
    if not raw or len(raw) > _MAX_LABEL:
        return None
    label = raw.lower()
    if "torch" not in label and "pt" not in label:  # the common case: no claim at all
        return None
    if wheel is not None:
        # packaging's reading of the file name is the authority; a name it rejects is still
        # read from the raw label (a claim is a claim), which agrees on every name it accepts.
        local = _wheel_local(wheel)
        if local is not None:
            label = local
    if "-" in label or "_" in label:
        label = label.replace("-", ".").replace("_", ".")
    if "torch" in label:
        return _torch_claim(label, raw)
    return _pt_claim(label, raw)


def _acc(m: re.Match[str]) -> tuple[tuple[int, int | None] | None, bool, str | None]:
    cu = m.group("cu")
    return (_cuda_digits(cu) if cu else None), m.group("cpu") is not None, m.group("rocm")


def _torch_claim(label: str, raw: str) -> AbiClaim | None:
    m = _DAO.fullmatch(label)
    if m is not None:
        cuda, cpu, rocm = _acc(m)
        torch = (int(m.group("maj")), int(m.group("min")))
        return AbiClaim(torch, None, cuda, cpu, rocm, m.group("abi") == "true", "dao-ailab", raw)
    m = _TORCHVER.fullmatch(label)
    if m is not None:
        cuda, cpu, rocm = _acc(m)
        torch = (int(m.group("maj")), int(m.group("min")))
        if m.group("rest") or cpu:
            return AbiClaim(torch, m.group("ver"), cuda, cpu, rocm, None, "envbuild", raw)
        return AbiClaim(torch, None, cuda, cpu, rocm, None, "community", raw)
    m = _FA3.fullmatch(label)
    if m is not None:
        cuda, cpu, rocm = _acc(m)
        torch = (int(m.group("maj")), int(m.group("min")))
        return AbiClaim(torch, None, cuda, cpu, rocm, m.group("abi") == "true", "fa3", raw)
    m = _TORCH_FIRST.fullmatch(label)
    if m is not None:
        cuda, cpu, rocm = _acc(m)
        if m.group("cmaj") is not None:
            torch = (int(m.group("cmaj")), int(m.group("cmin")))
        else:
            torch = (int(m.group("maj")), int(m.group("min")))
        return AbiClaim(torch, None, cuda, cpu, rocm, None, "natten", raw)
    m = _ASTRAL.fullmatch(label)
    if m is not None:
        if m.group("cmaj") is not None:
            cuda = (int(m.group("cmaj")), int(m.group("cmin")))
            cpu, rocm = False, None
        else:
            cuda, cpu, rocm = _acc(m)
        torch = (int(m.group("maj")), int(m.group("min")))
        return AbiClaim(torch, None, cuda, cpu, rocm, None, "astral", raw)
    m = _COSMOS.fullmatch(label)
    if m is not None:
        cuda, cpu, rocm = _acc(m)
        cosmos = _cosmos_torch(m.group("digits"), cuda)
        if cosmos is None:
            return None
        return AbiClaim(cosmos, None, cuda, cpu, rocm, None, "cosmos", raw)
    return None


def _cosmos_torch(digits: str, cuda: tuple[int, int | None] | None) -> tuple[int, int] | None:
    """torch major.minor from cosmos-dependencies' dot-less torch version (``27``, ``271``,
    ``2100``).

    Three digits are major, minor, patch, except that ``21x`` is also torch 2.1x: the CUDA it was
    built with decides (torch 2.1 had CUDA 11.8 and 12.1 builds only, 2.10 and later none older
    than 12.6); without a CUDA major.minor, or for another major, it is not read.
    """
    if len(digits) == 2:
        return int(digits[0]), int(digits[1])
    if len(digits) == 4:
        return int(digits[0]), int(digits[1:3])
    if digits[1] != "1":
        return int(digits[0]), int(digits[1])
    if digits[0] != "2" or cuda is None or cuda[1] is None:
        return None
    return (2, int(digits[1:3])) if (cuda[0], cuda[1]) > (12, 1) else (2, 1)


def _pt_claim(label: str, raw: str) -> AbiClaim | None:
    m = _PT_FIRST.fullmatch(label) or _PT_LAST.fullmatch(label)
    if m is None:
        return None
    cuda, cpu, rocm = _acc(m)
    if m.group("cmaj") is not None:
        torch = (int(m.group("cmaj")), int(m.group("cmin")))
    else:
        torch = (int(m.group("maj")), int(m.group("min")))
    return AbiClaim(torch, None, cuda, cpu, rocm, None, "pt", raw)


_CONDA_BUILD = re.compile(
    r"(?:^|_)(?:cu(?:da)?(?P<cmaj>\d{2})\.(?P<cmin>\d+)(?:\.\d+)*|(?P<cpu>cpu))"
    r"_pyt(?:orch)?(?P<maj>\d+)\.(?P<min>\d+)(?:\.\d+)*(?:_|$)"
)


def parse_conda_build(build: str) -> AbiClaim | None:
    """The ABI claim in a conda package's build string, where it names the torch it was built
    against: the xformers channel's ``py312_cu12.1.0_pyt2.3.0`` (CUDA 12.1, torch 2.3),
    ``py311_cpu_pyt2.1.0``. None for any other build (conda-forge's ``cuda126_py312h…`` names no
    torch: its ``depends`` do, ``gate.rules.conda``)."""
    if not isinstance(build, str) or len(build) > _MAX_LABEL:
        return None
    m = _CONDA_BUILD.search(build.lower())
    if m is None:
        return None
    cuda = None if m.group("cpu") else (int(m.group("cmaj")), int(m.group("cmin")))
    torch = (int(m.group("maj")), int(m.group("min")))
    return AbiClaim(torch, None, cuda, m.group("cpu") is not None, None, None, "conda", build)


def torch_build(version: str, runtime: tuple[int, str] | None = None) -> TorchBuild:
    """torch's version taken apart (``"2.10.0+cu128"``); never raises, an invalid one gives minor
    None.

    ``runtime`` (``runtime_cuda``'s answer for the packages locked with it) is kept where the
    version's local tag names no CUDA, CPU or ROCm build: PyPI's ``2.8.0`` is a CUDA 12.8 build
    on Linux, and only its ``nvidia-*-cu12`` requirements say so.
    """
    from packaging.version import InvalidVersion, Version

    if not isinstance(version, str):
        return TorchBuild(str(version), None, None, False, None, None)
    try:
        parsed = Version(version)
    except InvalidVersion:
        return TorchBuild(version, None, None, False, None, None)
    release = parsed.release
    minor = (release[0], release[1] if len(release) > 1 else 0)
    local = parsed.local
    cuda: tuple[int, int] | None = None
    cpu = False
    rocm: str | None = None
    if local:
        if (c := _TORCH_CU.match(local)) is not None:
            major, cminor = _cuda_digits(c.group(1))
            cuda = (major, cminor) if cminor is not None else None
        elif (r := _TORCH_ROCM.match(local)) is not None:
            rocm = r.group(1)
        else:
            cpu = local == "cpu" or local.startswith("cpu.")
    if runtime is not None and cuda is None and not cpu and rocm is None:
        return TorchBuild(version, minor, cuda, cpu, rocm, local, runtime[0], runtime[1])
    return TorchBuild(version, minor, cuda, cpu, rocm, local)


# nvidia-cuda-runtime-cu12, nvidia-cudnn-cu13: the CUDA major is in the name
_NVIDIA_CU = re.compile(r"nvidia-[a-z0-9-]+-cu(\d{2})", re.ASCII)
# CUDA 13's toolkit wheels dropped the suffix (torch 2.11: nvidia-cuda-runtime 13.0.96); only
# these few carry the CUDA version itself (nvidia-cublas and nvidia-cufft number their own releases)
_CUDA_VERSIONED = frozenset(
    {"nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cuda-cupti", "cuda-toolkit"}
)
_LEADING_INT = re.compile(r"\d{1,3}", re.ASCII)


def runtime_cuda(packages: Iterable[tuple[str, str | None]]) -> tuple[int, str] | None:
    """The CUDA major the NVIDIA runtime wheels among ``packages`` (name, version) were built for,
    with the package that says so; None when none of them says, or they disagree."""
    majors: dict[int, str] = {}
    for name, version in packages:
        n = canonicalize_name(name)
        m = _NVIDIA_CU.fullmatch(n)
        if m is not None:
            major = int(m.group(1))
        elif n in _CUDA_VERSIONED and version and (v := _LEADING_INT.match(version)) is not None:
            major = int(v.group(0))
        else:
            continue
        if 9 <= major <= 99:
            majors.setdefault(major, f"{name} {version}" if version else name)
    if len(majors) != 1:
        return None
    return next(iter(majors.items()))


def torch_cxx11abi(build: TorchBuild, platform: str = "linux") -> bool | None:
    """Whether this torch build's C++ code uses the C++11 ABI (``_GLIBCXX_USE_CXX11_ABI=1``).

    None where there is nothing to compare: not Linux, an unreadable version, or a build whose ABI
    the published record does not settle.
    """
    p = platform.lower()
    if not (p.startswith("linux") or "manylinux" in p or "musllinux" in p):
        return None
    if build.minor is None:
        return None
    if build.local and "cxx11" in build.local:  # +cpu.cxx11.abi: the opt-in CPU variant
        return True
    # PyTorch's Linux wheels moved to manylinux_2_28 and _GLIBCXX_USE_CXX11_ABI=1 for 2.7
    # (pytorch/pytorch#143423, "Use Manylinux 2.28 for nightly build and cxx11-abi": CPU,
    # CUDA 11.8 and 12.4 builds, Dec 2024, the 2.7 nightlies; and #143962; tracked in the RFC
    # pytorch/pytorch#123649). Release 2.6 had moved only its CUDA 12.6 wheels
    # (pytorch/pytorch#141565, #142064); the other 2.6 wheels and every wheel before 2.6 on
    # PyPI and download.pytorch.org used the old ABI.
    if build.minor >= (2, 7):
        return True
    # aarch64 wheels took the new ABI earlier; when is not pinned here
    if "aarch64" in p or "arm64" in p:
        return None
    if build.rocm is not None:  # ROCm wheels switched on their own schedule
        return None
    if build.minor == (2, 6):
        public = build.version.split("+", 1)[0]
        if _PRERELEASE.search(public):  # 2.6 nightlies straddle the switch
            return None
        return build.cuda == (12, 6)
    return False


# ----------------------------------------------------------------------------- comparing


def _cuda_text(cuda: tuple[int, int | None]) -> str:
    return f"CUDA {cuda[0]}" if cuda[1] is None else f"CUDA {cuda[0]}.{cuda[1]}"


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a.lower() == b.lower()


def mismatches(claim: AbiClaim, torch: TorchBuild, platform: str = "linux") -> list[Mismatch]:
    """Where an extension's claim disagrees with the torch it is locked with (empty: it fits).

    Kinds: ``torch-minor``; ``torch-version`` (claims that carry the full version, envbuild's
    labels: the public versions must be equal; not repeated when the minor already differs);
    ``cuda-major`` (minors within a major are compatible); ``cuda-vs-cpu`` (either way round);
    ``rocm`` (a ROCm claim or torch beside a CUDA/CPU one, or ROCm majors that differ);
    ``cxx11abi`` (where ``torch_cxx11abi`` knows torch's ABI). A torch without a local tag
    (PyPI's default build) is compared by the CUDA major of its locked runtime (``torch.runtime``)
    where ``torch_build`` was given one, and otherwise gives no CUDA, CPU or ROCm finding.
    """
    found: list[Mismatch] = []
    locked = f"torch {torch.version}"
    if claim.torch is not None and torch.minor is not None and claim.torch != torch.minor:
        found.append(
            Mismatch(
                "torch-minor",
                f"built for torch {claim.torch[0]}.{claim.torch[1]}, locked with {locked}",
            )
        )
    elif claim.torch_version is not None and torch.minor is not None:
        public = torch.version.split("+", 1)[0]
        if not _same_version(claim.torch_version, public):
            found.append(
                Mismatch(
                    "torch-version", f"built for torch {claim.torch_version}, locked with {locked}"
                )
            )
    if claim.cuda is not None:
        if torch.cpu:
            found.append(
                Mismatch(
                    "cuda-vs-cpu",
                    f"built for {_cuda_text(claim.cuda)}, locked with {locked}, a CPU-only build",
                )
            )
        elif torch.rocm is not None:
            found.append(
                Mismatch(
                    "rocm",
                    f"built for {_cuda_text(claim.cuda)}, locked with {locked}, a ROCm build",
                )
            )
        elif torch.cuda is not None and claim.cuda[0] != torch.cuda[0]:
            found.append(
                Mismatch(
                    "cuda-major",
                    f"built for {_cuda_text(claim.cuda)}, locked with {locked} "
                    f"({_cuda_text(torch.cuda)})",
                )
            )
        elif torch.cuda is None and torch.runtime is not None and claim.cuda[0] != torch.runtime:
            found.append(
                Mismatch(
                    "cuda-major",
                    f"built for {_cuda_text(claim.cuda)}, locked with {locked}, a CUDA"
                    f" {torch.runtime} build (its runtime: {torch.runtime_from})",
                )
            )
    elif claim.cpu:
        if torch.cuda is not None:
            found.append(
                Mismatch(
                    "cuda-vs-cpu",
                    f"built for CPU only, locked with {locked} ({_cuda_text(torch.cuda)})",
                )
            )
        elif torch.rocm is not None:
            found.append(
                Mismatch("rocm", f"built for CPU only, locked with {locked}, a ROCm build")
            )
    elif claim.rocm is not None:
        if torch.cuda is not None or torch.cpu:
            found.append(Mismatch("rocm", f"built for ROCm {claim.rocm}, locked with {locked}"))
        elif torch.rocm is not None and claim.rocm.split(".")[0] != torch.rocm.split(".")[0]:
            found.append(
                Mismatch(
                    "rocm", f"built for ROCm {claim.rocm}, locked with {locked} (ROCm {torch.rocm})"
                )
            )
    if claim.cxx11abi is not None:
        theirs = torch_cxx11abi(torch, platform)
        if theirs is not None and theirs != claim.cxx11abi:
            found.append(
                Mismatch(
                    "cxx11abi",
                    f"built with cxx11abi{str(claim.cxx11abi).upper()}, locked with {locked}, "
                    f"whose wheels use {'the C++11 ABI' if theirs else 'the pre-C++11 ABI'} "
                    f"(cxx11abi{str(theirs).upper()})",
                )
            )
    return found


def unverifiable_reason(
    claim: AbiClaim | None, torch: TorchBuild, platform: str = "linux"
) -> str | None:
    """Why a claim cannot be (fully) checked against ``torch``, for ``--explain``; None: fully
    checked."""
    if claim is None:
        return "no ABI tag envbuild reads in its version or file name"
    if torch.minor is None:
        return f"torch version {torch.version!r} cannot be read, so nothing was compared"
    reasons: list[str] = []
    if claim.torch is None:
        reasons.append("its tag names no torch version")
    known_accelerator = (
        torch.cuda is not None
        or torch.cpu
        or torch.rocm is not None
        or (torch.runtime is not None and claim.cuda is not None)
    )
    if (claim.cuda is not None or claim.cpu or claim.rocm is not None) and not known_accelerator:
        what = "the CUDA major" if claim.cuda is not None else "CPU vs CUDA"
        if torch.local is None:
            reasons.append(
                f"torch {torch.version} carries no local CUDA tag, so {what} was not compared"
            )
        else:
            reasons.append(
                f"torch {torch.version}'s local tag +{torch.local} names no CUDA, CPU or ROCm "
                f"build, so {what} was not compared"
            )
    if claim.cxx11abi is not None and torch_cxx11abi(torch, platform) is None:
        reasons.append(
            f"the C++ ABI of torch {torch.version} on {platform} is not known here, "
            "so cxx11abi was not compared"
        )
    elif (
        claim.cxx11abi is None
        and torch.minor == (2, 6)
        and claim.torch == (2, 6)
        and torch_cxx11abi(torch, platform) is not None
    ):
        reasons.append(
            "its tag claims no C++ ABI and torch 2.6 shipped wheels with both, "
            "so cxx11abi was not compared"
        )
    return "; ".join(reasons) or None


# ----------------------------------------------------------------------------- writing

_LOCAL_OK = re.compile(r"[^A-Za-z0-9.]")


def format_label(torch_version: str, torch_cuda: str | None) -> str:
    """envbuild's local label for a wheel built against ``torch_version`` (``torch.version.cuda``).

    ``("2.12.0.dev20260405+cu132", "13.2")`` -> ``"cu132torch2.12.0.dev20260405"``;
    a CPU torch (``torch.version.cuda`` is None) gives ``"cputorch2.13.0"``.
    ``parse_claim`` reads it back (style "envbuild", ``torch_version`` the public version).
    """
    public = torch_version.split("+", 1)[0]
    cuda = f"cu{torch_cuda.replace('.', '')}" if torch_cuda else "cpu"
    return _LOCAL_OK.sub(".", f"{cuda}torch{public}")
