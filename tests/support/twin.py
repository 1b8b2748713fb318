"""The seed stack's twin: stand-ins for the parts of ``h200-cu132`` this machine cannot reach.

``h200-cu132`` needs four things that exist only on (or for) the H200 host: the torch nightly
and its ``pytorch-triton`` on download.pytorch.org, the four GPU-built wheels of the
wheelhouse, and the flash-linear-attention git repository on GitHub. The twin stands in for
exactly those, with what the real ones carry where it matters to the tools (names, versions,
Requires-Dist, file trees, as read from the real packages); everything PyPI has comes
from PyPI for real.

- ``nightly/`` (served as a PEP 503 index, ``ENVBUILD_TORCH_INDEX``):
  - ``torch 2.12.0.dev20260405+cu132`` (cp313 and this interpreter's tag, manylinux_2_28_x86_64):
    ``torch/version.py`` with ``cuda = "13.2"`` and a ``git_version``; its Requires-Dist has the
    shape of a CUDA 13 torch (PyPI's torch 2.15.0 metadata): filelock, typing-extensions,
    setuptools (Python >= 3.12), sympy, networkx, jinja2, fsspec, the nvidia-* runtime wheels,
    and ``pytorch-triton==3.7.0+git9c288bc5`` where PyPI's torch has ``triton``.
  - ``pytorch-triton 3.7.0+git9c288bc5``: owns the ``triton/`` package, as the real one does.
  - the nvidia-* runtime wheels are **tiny stand-ins** (a marker file each, no libraries):
    cuDNN 9.20.0.48 and NCCL 2.29.7 at the seed's versions; cuda-runtime, cublas and nvshmem at
    stand-in versions (the real ones weigh gigabytes and only matter on a GPU).
  - torch's pure-Python dependencies: the real wheels, downloaded from PyPI (the nightly index
    serves its own copies of them, so the torch step resolves from that index alone).
- ``prebuilt/`` (``ENVBUILD_WHEELHOUSE``): flash-attn 2.8.3, causal-conv1d 1.6.1, mamba-ssm
  2.3.1 and qoptim-cuda 0.0.0 as ``envbuild wheelhouse build`` leaves them: built with their
  upstream Requires-Dist (mamba-ssm's PyPI ``triton`` included), then put through envbuild's own
  repack (``envbuild.wheelhouse.repack``): Requires-Dist stripped, version tagged
  ``+cu132torch2.12.0.dev20260405``, a provenance record naming this torch. Their trees are the
  seed's: flash-attn's ``flash_attn/cute/`` holds 20 of flash-attn-4 4.0.0b7's paths (read from
  the real FA4 wheel) plus one of its own, and a top-level ``hopper/``; a ``*_cuda`` extension
  file each (a stub: no GPU code).
- ``fla.git``: a git repository shaped as fla-org/flash-linear-attention was at the seed's date
  (version 0.5.0): the *whole* ``fla`` tree, taken from the real fla-core 0.5.0 and
  flash-linear-attention 0.5.0 wheels, built by setuptools (``find_packages``) under the name
  flash-linear-attention, depending on ``torch>=2.7.0``, ``transformers``, ``einops``.
  ``git_env()`` routes ``https://github.com/fla-org/flash-linear-attention`` to it with git's
  ``url.<base>.insteadOf``, so the profile's requirement stays as written.

Everything is built once into ``.cache/tests/seed-twin/`` (reproducible wheels, so their
hashes hold across runs) and served by a real HTTP index (``support.index``) for the session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from envbuild.wheelhouse import local_tag
from envbuild.wheelhouse.repack import repack_wheel
from support.cachedir import TEST_CACHE

from .fixtures import (
    NIGHTLY_CUDA,
    NIGHTLY_TORCH,
    PY_MAJOR_MINOR,
    PYTORCH_TRITON,
    cache_lock,
    installer_env,
)
from .index import IndexServer
from .wheels import WheelSpec

TWIN_VERSION = 1
CACHE = TEST_CACHE / "seed-twin"
FLA_URL = "https://github.com/fla-org/flash-linear-attention"
# the twin build's torch.version.git_version
TORCH_GIT_VERSION = "5a8e1f2c0b7d4e9f8a6b3c2d1e0f9a8b7c6d5e4f"
PY_TAGS = tuple(sorted({"cp313", "cp" + PY_MAJOR_MINOR.replace(".", "")}))
MANYLINUX = "manylinux_2_27_x86_64.manylinux_2_28_x86_64"
NVIDIA = {  # name -> version; cuDNN and NCCL are the seed's, the others stand-in numbers
    "nvidia-cuda-runtime": "13.2.51",
    "nvidia-cublas": "13.3.0.5",
    "nvidia-cudnn-cu13": "9.20.0.48",
    "nvidia-nccl-cu13": "2.29.7",
    "nvidia-nvshmem-cu13": "3.4.5",
}
TORCH_PURE_DEPS = [
    "filelock",
    "typing-extensions>=4.10.0",
    "setuptools==80.9.0",
    "sympy>=1.13.3",
    "networkx>=2.5.1",
    "jinja2",
    "fsspec>=0.8.5",
]
PREBUILT = {
    "flash-attn": "2.8.3",
    "causal-conv1d": "1.6.1",
    "mamba-ssm": "2.3.1",
    "qoptim-cuda": "0.0.0",
}
LOCAL = local_tag(NIGHTLY_TORCH, NIGHTLY_CUDA)  # cu132torch2.12.0.dev20260405

__all__ = ["SeedTwin", "build_twin", "seed_twin"]


def torch_requires() -> list[str]:
    linux = 'platform_system == "Linux"'
    return [
        "filelock",
        "typing-extensions>=4.10.0",
        'setuptools ; python_version >= "3.12"',
        "sympy>=1.13.3",
        "networkx>=2.5.1",
        "jinja2",
        "fsspec>=0.8.5",
        *(f"{n}=={v} ; {linux}" for n, v in NVIDIA.items()),
        f"pytorch-triton=={PYTORCH_TRITON} ; {linux}",
    ]


def _torch(tag: str) -> WheelSpec:
    return WheelSpec(
        name="torch",
        version=NIGHTLY_TORCH,
        requires=tuple(torch_requires()),
        requires_python=">=3.10",
        python_tag=tag,
        abi_tag=tag,
        platform_tag=MANYLINUX,
        files={
            "torch/__init__.py": (
                "from . import version as version\nfrom .version import __version__ as"
                " __version__\n"
            ),
            "torch/version.py": (
                f"__version__ = {NIGHTLY_TORCH!r}\ndebug = False\ncuda = {NIGHTLY_CUDA!r}\n"
                f"git_version = {TORCH_GIT_VERSION!r}\nhip = None\nxpu = None\n"
            ),
            "torch/lib/libtorch_cuda.so": b"twin: stands in for libtorch_cuda.so (no GPU code)\n",
            "torch/utils/__init__.py": "",
        },
    )


def _pytorch_triton(tag: str) -> WheelSpec:
    return WheelSpec(
        name="pytorch-triton",
        version=PYTORCH_TRITON,
        python_tag=tag,
        abi_tag=tag,
        platform_tag=MANYLINUX,
        files={
            "triton/__init__.py": "__version__ = '3.7.0'\n__provider__ = 'pytorch-triton'\n",
            "triton/compiler/__init__.py": "",
            "triton/backends/nvidia/__init__.py": "",
            "triton/tools/disasm.py": "# used by flash-attn-4's cute_dsl_utils (optional import)\n",
        },
    )


def _nvidia(name: str, version: str) -> WheelSpec:
    lib = name.removeprefix("nvidia-").removesuffix("-cu13").replace("-", "_")
    return WheelSpec(
        name=name,
        version=version,
        platform_tag=MANYLINUX,
        files={f"nvidia/{lib}/TWIN": f"{name} {version}: a stand-in without libraries\n"},
    )


def _fa4_cute_paths(fa4_wheel: Path) -> list[str]:
    with zipfile.ZipFile(fa4_wheel) as zf:
        return sorted(
            n for n in zf.namelist() if n.startswith("flash_attn/cute/") and n.endswith(".py")
        )


def _prebuilt_upstream(name: str, version: str, tag: str, fa4_cute: list[str]) -> WheelSpec:
    so = f"cpython-{tag[2]}{tag[3:]}-x86_64-linux-gnu.so"
    stub = (
        f"twin: stands in for the {name} CUDA extension built against torch {NIGHTLY_TORCH}\n"
    ).encode()
    files: dict[str, str | bytes]
    if name == "flash-attn":
        requires = ["torch", "einops"]
        files = {
            "flash_attn/__init__.py": f"__version__ = {version!r}\n",
            "flash_attn/flash_attn_interface.py": "import flash_attn_2_cuda\n",
            f"flash_attn_2_cuda.{so}": stub,
            "hopper/__init__.py": "",
            "flash_attn/cute/flash_fwd_sm80.py": (
                "# flash-attn 2.8.3's own stale FA4 prototype file\n"
            ),
        }
        files.update({p: f"# flash-attn 2.8.3's stale copy of {p}\n" for p in fa4_cute[:20]})
    elif name == "causal-conv1d":
        requires = ["torch", "packaging", "ninja"]
        files = {
            "causal_conv1d/__init__.py": f"__version__ = {version!r}\n",
            "causal_conv1d/causal_conv1d_interface.py": "import causal_conv1d_cuda\n",
            f"causal_conv1d_cuda.{so}": stub,
        }
    elif name == "mamba-ssm":
        requires = [
            "torch",
            "triton",
            "ninja",
            "einops",
            "transformers",
            "packaging",
            "setuptools>=61.0.0",
            'causal-conv1d>=1.2.0 ; extra == "causal-conv1d"',
        ]
        files = {
            "mamba_ssm/__init__.py": f"__version__ = {version!r}\n",
            "mamba_ssm/ops/selective_scan_interface.py": "import selective_scan_cuda\n",
            f"selective_scan_cuda.{so}": stub,
        }
    else:
        requires = ["torch"]
        files = {
            "qoptim_cuda/__init__.py": f"__version__ = {version!r}\n",
            f"qoptim_cuda/_C.{so}": stub,
        }
    return WheelSpec(
        name=name,
        version=version,
        requires=tuple(requires),
        files=files,
        python_tag=tag,
        abi_tag=tag,
        platform_tag="linux_x86_64",
    )


def _provenance(tag: str) -> dict[str, object]:
    return {
        "schema": 1,
        "builder": "envbuild tests: seed twin",
        "torch": {"version": NIGHTLY_TORCH, "git_version": TORCH_GIT_VERSION, "cuda": NIGHTLY_CUDA},
        "cuda": {"torch": NIGHTLY_CUDA, "nvcc": NIGHTLY_CUDA},
        "python": {"tag": tag},
        "platform": "linux_x86_64",
        "arch_list": ["9.0"],
    }


def _pip_download(dest: Path, python: str, *reqs: str, deps: bool = True) -> None:
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--platform",
        "manylinux_2_28_x86_64",
        "--dest",
        str(dest),
        *reqs,
    ]
    if not deps:
        argv.insert(4, "--no-deps")
    subprocess.run(argv, check=True, env=installer_env(), timeout=900)


def _fla_repo(repo: Path, downloads: Path) -> None:
    """A git repository with the whole fla tree (fla-core 0.5.0 + flash-linear-attention 0.5.0)."""
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    for wheel in sorted(downloads.glob("*.whl")):
        if wheel.name.startswith(("fla_core-0.5.0-", "flash_linear_attention-0.5.0-")):
            with zipfile.ZipFile(wheel) as zf:
                for n in zf.namelist():
                    if n.startswith("fla/") and not n.endswith("/"):
                        (repo / n).parent.mkdir(parents=True, exist_ok=True)
                        (repo / n).write_bytes(zf.read(n))
    (repo / "setup.py").write_text(
        "from setuptools import find_packages, setup\n\nsetup(name='flash-linear-attention',"
        " version='0.5.0', packages=find_packages(include=['fla', 'fla.*']),\n     "
        " python_requires='>=3.10', install_requires=['torch>=2.7.0', 'transformers', 'einops'])\n"
    )
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61.0"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    env = {
        **installer_env(),
        "GIT_AUTHOR_NAME": "twin",
        "GIT_AUTHOR_EMAIL": "twin@localhost",
        "GIT_COMMITTER_NAME": "twin",
        "GIT_COMMITTER_EMAIL": "twin@localhost",
        "GIT_AUTHOR_DATE": "2026-04-05T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-04-05T00:00:00Z",
    }
    for argv in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "fla 0.5.0 (twin)"],
    ):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env, capture_output=True)


def build_twin(root: Path = CACHE) -> Path:
    """Build (once) every twin artifact under ``root/v<N>-<tags>``; returns that folder."""
    folder = root / f"v{TWIN_VERSION}-{'-'.join(PY_TAGS)}"
    done = folder / ".complete"
    if done.is_file():
        return folder
    nightly, prebuilt, downloads = folder / "nightly", folder / "prebuilt", folder / "downloads"
    for d in (nightly, prebuilt, downloads):
        d.mkdir(parents=True, exist_ok=True)
    # from PyPI, for real: torch's pure dependencies (both interpreters), FA4 (its cute/ paths),
    # and the fla wheels whose files make up the git tree
    for python in sorted({"3.13", PY_MAJOR_MINOR}):
        _pip_download(nightly, python, *TORCH_PURE_DEPS)
    _pip_download(
        downloads,
        "3.13",
        "flash-attn-4==4.0.0b7",
        "fla-core==0.5.0",
        "flash-linear-attention==0.5.0",
        deps=False,
    )
    for tag in PY_TAGS:
        _torch(tag).build(nightly)
        _pytorch_triton(tag).build(nightly)
    for name, version in NVIDIA.items():
        _nvidia(name, version).build(nightly)
    fa4 = next(downloads.glob("flash_attn_4-4.0.0b7-*.whl"))
    upstream = folder / "upstream"
    for tag in PY_TAGS:
        for name, version in PREBUILT.items():
            wheel = _prebuilt_upstream(name, version, tag, _fa4_cute_paths(fa4)).build(upstream)
            repack_wheel(wheel, prebuilt, LOCAL, _provenance(tag))
    _fla_repo(folder / "fla.git", downloads)
    done.write_text("ok\n")
    return folder


@dataclass(frozen=True)
class SeedTwin:
    folder: Path
    server: IndexServer

    @property
    def nightly(self) -> Path:
        return self.folder / "nightly"

    @property
    def nightly_url(self) -> str:
        return self.server.simple_url("nightly")

    @property
    def prebuilt(self) -> Path:
        return self.folder / "prebuilt"

    @property
    def fla_repo(self) -> Path:
        return self.folder / "fla.git"

    @property
    def fla_commit(self) -> str:
        out = subprocess.run(
            ["git", "-C", str(self.fla_repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    def git_env(self) -> dict[str, str]:
        """git (and pip's git) reads the twin repository where the profile says GitHub."""
        return {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"url.{self.fla_repo.as_uri()}.insteadOf",
            "GIT_CONFIG_VALUE_0": FLA_URL,
        }

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables the h200-cu132 profile reads, pointing at the twin."""
        return {
            "ENVBUILD_TORCH_INDEX": self.nightly_url,
            "ENVBUILD_WHEELHOUSE": str(self.prebuilt),
            **self.git_env(),
            **(extra or {}),
        }

    def record_of(self, wheel: Path) -> bytes:
        """The RECORD a wheel installs (what the ABI guard fingerprints)."""
        with zipfile.ZipFile(wheel) as zf:
            rec = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
            return zf.read(rec)


@pytest.fixture(scope="session")
def seed_twin() -> Iterator[SeedTwin]:
    """The twin, built once (cached under .cache/tests/seed-twin) and served for the session."""
    with cache_lock(CACHE):
        if os.environ.get("ENVBUILD_TWIN_REBUILD"):
            shutil.rmtree(CACHE, ignore_errors=True)
        folder = build_twin()
    with IndexServer({"nightly": folder / "nightly"}) as server:
        yield SeedTwin(folder=folder, server=server)
