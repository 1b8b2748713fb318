"""Real lockfiles, made by the real tools, in the shapes ML projects commit, for the check-lock
gate.

Every lock here is written by the tool itself (``uv lock``, ``uv pip compile --universal``,
pip-tools' ``pip-compile``, ``poetry lock``, ``pip lock``) resolving OFFLINE against one local
HTTP index (``support.index.IndexServer``) of tiny stand-in wheels. Nothing is hand-written.

The index (session fixture ``gate_index`` -> ``GateIndex``), one server, five repos:

- ``pypi``: torch ``2.10.0`` and ``2.9.1`` (no local tag; like PyPI's Linux build they require
  ``nvidia-cuda-runtime-cu12==12.8.90`` and ``nvidia-nccl-cu12==2.27.5`` on
  ``platform_system == "Linux"``, and ``filelock-like``), ``filelock-like 3.0``,
  ``einops-like 0.8.1``, the nvidia wheels (``*-cu12`` and ``*-cu13``: PyPI has both, and an
  explicit PyTorch index only serves torch itself to uv), ``needs-torch-211 1.0`` (``torch>=2.11``),
  ``trainer-utils 1.0`` (``torch``, ``einops-like``).
- ``cu128``: torch ``2.10.0+cu128``, ``2.9.1+cu128`` and ``2.7.1+cu128`` (the cu12 runtime and nccl
  on Linux, ``filelock-like``), and copies of the cu12 nvidia wheels and filelock-like.
- ``cu130``: torch ``2.10.0+cu130`` and ``2.11.0+cu130`` (``nvidia-cuda-runtime-cu13==13.0.96``,
  ``nvidia-nccl-cu13==2.28.3`` on Linux, ``filelock-like``), the cu13 wheels, filelock-like.
- ``cpu``: torch ``2.10.0+cpu`` (``filelock-like`` only), filelock-like.
- ``plain``: torch builds without a local tag in their metadata (``2.10.0+cu128`` at run time), as
  PyPI serves them, on an index of their own so a lock takes them on Linux through
  ``linux_index="plain"``: ``2.10.0`` (the cu12 runtime, like PyPI's 2.10.0) and ``2.11.0`` (like
  PyPI's: the unsuffixed ``nvidia-cuda-runtime==13.0.96``, ``nvidia-nccl-cu13``, on Linux). Their
  CUDA major is in their runtime only. The pypi repo holds the unsuffixed ``nvidia-cuda-runtime
  13.0.96`` that 2.11.0 requires.
- ``releases``: prebuilt extension wheels used by URL (``<server>/releases/files/<file>``), each
  requiring ``torch`` and ``einops-like`` like the real flash-attn wheel; keys of ``EXTENSIONS``:
  ``flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE`` (healthy beside 2.10.0+cu128),
  ``flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE`` (wrong torch minor),
  ``flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE`` (wrong CUDA major beside cu128),
  ``flash_attn-2.8.3+cu12torch2.10cxx11abiFALSE`` (wrong C++ ABI),
  ``mamba_ssm-2.2.4+cu12torch2.10cxx11abiTRUE``,
  ``flash_attn_3-3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61`` (FA3 style, healthy with
  2.10.0+cu128), ``flash_attn-2.7.0.post2+cu11torch2.5cxx11abiFALSE`` (CUDA 11, torch 2.5), NVIDIA
  cosmos builds ``flash_attn-2.6.3+cu128.torch271`` (healthy beside 2.7.1+cu128),
  ``flash_attn-2.6.3+cu126.torch260`` and ``flash_attn-2.7.4.post1+cu130.torch29``, wheels.astral.sh
  builds ``flash_attn-2.8.3.post1+cu.13.0.torch.2.11`` (healthy beside 2.11.0+cu130),
  ``...+cu.13.0.torch.2.9`` and ``...+cu.12.8.torch.2.11``, and a tag the gate does not read,
  ``flash_attn-2.8.3+das.opt1.dtk2604.torch271`` (a DTK build). The releases repo is also a simple
  index (``url("releases")``), as the cosmos and astral wheels are served. The file names keep the
  release's spelling (``...cxx11abiTRUE-py3-none-any.whl``, as on flash-attn's GitHub releases);
  METADATA carries the normalised, lower-cased version.

Lock makers (each writes into a fresh folder under ``tmp`` and returns the lock's path; uv runs
with ``--no-cache``, pip/pip-tools/Poetry with caches under ``tmp``; HOME is ``tmp/home``):

- ``uv_platform_lock`` -> uv.lock, uv's PyTorch guide: torch from a PyTorch index on Linux,
  from the PyPI stand-in elsewhere (two forks, two torch entries).
- ``uv_groups_lock`` -> uv.lock, one extra per accelerator (``cpu``/``cu128``/``cu130``),
  declared conflicting (three torch entries, pseudo-extra markers).
- ``uv_runtime_missing_lock`` -> uv.lock whose torch+cu128 lost its nccl edge.
- ``uv_universal_requirements`` -> requirements.txt from ``uv pip compile --universal``.
- ``pip_compile_requirements`` -> requirements.txt from pip-tools (one environment, no markers).
- ``poetry_lock`` -> poetry.lock (torch per marker from two sources); skips where Poetry does
  not install.
- ``pip_lock`` -> pylock.toml from ``pip lock``.

``tests/conftest.py`` registers this module as a plugin (``pytest_plugins``), so any test can
request ``gate_index``::

    from support.gatelocks import GateIndex, uv_platform_lock

    def test_x(gate_index: GateIndex, tmp_path: Path) -> None:
        lock = uv_platform_lock(tmp_path, gate_index, linux_index="cu130")

Tool failures raise ``ToolFailed`` (an AssertionError carrying ``argv``, ``returncode``,
``output``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from support.cachedir import TEST_CACHE

from .fixtures import PY_MAJOR_MINOR, cache_lock, installer_env
from .index import IndexServer
from .wheels import WheelSpec

__all__ = [
    "EXTENSIONS",
    "GateIndex",
    "HEALTHY_EXTENSION",
    "PROJECT",
    "REPOS",
    "ToolFailed",
    "build_gate_wheels",
    "gate_index",
    "pip_compile_requirements",
    "pip_lock",
    "poetry_lock",
    "poetry_bin",
    "uv_bin",
    "uv_groups_lock",
    "uv_platform_lock",
    "uv_runtime_missing_lock",
    "uv_universal_requirements",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
POETRY_VENV = TEST_CACHE / "poetry-venv"  # poetry_bin(): test_check_lock_anyfile.py uses it too
# the project name in every generated pyproject.toml: uv's pseudo-extras are extra-7-trainer-<extra>
PROJECT = "trainer"
REQUIRES_PYTHON = ">=3.10"

CU12_RUNTIME, CU12_NCCL = "12.8.90", "2.27.5"
CU13_RUNTIME, CU13_NCCL = "13.0.96", "2.28.3"
_ON_LINUX = 'platform_system == "Linux"'
_CU12_DEPS = (
    f"nvidia-cuda-runtime-cu12=={CU12_RUNTIME}; {_ON_LINUX}",
    f"nvidia-nccl-cu12=={CU12_NCCL}; {_ON_LINUX}",
    "filelock-like",
)
_CU13_DEPS = (
    f"nvidia-cuda-runtime-cu13=={CU13_RUNTIME}; {_ON_LINUX}",
    f"nvidia-nccl-cu13=={CU13_NCCL}; {_ON_LINUX}",
    "filelock-like",
)

HEALTHY_EXTENSION = "flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE"


# ----------------------------------------------------------------------------- the wheel set


def _torch(
    version: str, cuda: str | None, requires: Sequence[str], runtime: str | None = None
) -> WheelSpec:
    """A torch wheel; ``runtime``: what ``torch.__version__`` says when it differs from the
    distribution's version (PyPI's Linux torch: ``2.10.0`` in its metadata, ``2.10.0+cu128`` at run
    time).
    """
    return WheelSpec(
        name="torch",
        version=version,
        requires=tuple(requires),
        files={
            "torch/__init__.py": "from .version import __version__ as __version__\n",
            "torch/version.py": f"__version__ = {runtime or version!r}\ncuda = {cuda!r}\n",
        },
    )


def _pkg(
    name: str, version: str, requires: Sequence[str] = (), files: Mapping[str, str] | None = None
) -> WheelSpec:
    return WheelSpec(name=name, version=version, requires=tuple(requires), files=dict(files or {}))


def _nvidia(name: str, version: str) -> WheelSpec:
    # nvidia-cuda-runtime-cu12 -> cuda_runtime
    lib = name.removeprefix("nvidia-").rsplit("-", 1)[0].replace("-", "_")
    # every PyPI nvidia-* wheel ships the same empty nvidia/__init__.py (a namespace shared by all
    # of them)
    return _pkg(
        name,
        version,
        files={f"nvidia/{lib}/VERSION": f"{name} {version}\n", "nvidia/__init__.py": ""},
    )


_FILELOCK = _pkg("filelock-like", "3.0")
_NVIDIA_CU12 = (
    _nvidia("nvidia-cuda-runtime-cu12", CU12_RUNTIME),
    _nvidia("nvidia-nccl-cu12", CU12_NCCL),
)
_NVIDIA_CU13 = (
    _nvidia("nvidia-cuda-runtime-cu13", CU13_RUNTIME),
    _nvidia("nvidia-nccl-cu13", CU13_NCCL),
)


def _extension(key: str) -> WheelSpec:
    name, version = key.split("-", 1)
    return _pkg(name, version, ["torch", "einops-like"])


# key (the release file's "<name>-<version>", spelled as released) -> wheel
EXTENSIONS: dict[str, WheelSpec] = {
    key: _extension(key)
    for key in (
        HEALTHY_EXTENSION,
        "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE",  # built for torch 2.9: wrong minor beside 2.10
        "flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE",  # CUDA 13 build beside a cu128 torch
        "flash_attn-2.8.3+cu12torch2.10cxx11abiFALSE",  # pre-C++11 ABI build
        "mamba_ssm-2.2.4+cu12torch2.10cxx11abiTRUE",
        # FA3 style, healthy beside 2.10.0+cu128
        "flash_attn_3-3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61",
        "flash_attn-2.7.0.post2+cu11torch2.5cxx11abiFALSE",  # CUDA 11 and torch 2.5
        "flash_attn-2.6.3+cu128.torch271",  # NVIDIA cosmos: healthy beside 2.7.1+cu128
        "flash_attn-2.6.3+cu126.torch260",  # cosmos, built for torch 2.6
        "flash_attn-2.7.4.post1+cu130.torch29",  # cosmos, built for torch 2.9
        # wheels.astral.sh: healthy beside 2.11.0+cu130
        "flash_attn-2.8.3.post1+cu.13.0.torch.2.11",
        "flash_attn-2.8.3.post1+cu.13.0.torch.2.9",  # astral, built for torch 2.9
        "flash_attn-2.8.3.post1+cu.12.8.torch.2.11",  # astral, a CUDA 12 build
        # a DTK build: a tag the gate does not read
        "flash_attn-2.8.3+das.opt1.dtk2604.torch271",
    )
}

REPOS: dict[str, tuple[WheelSpec, ...]] = {
    "pypi": (
        _torch("2.10.0", "12.8", _CU12_DEPS),
        _torch("2.9.1", "12.8", _CU12_DEPS),
        _FILELOCK,
        _pkg("einops-like", "0.8.1"),
        *_NVIDIA_CU12,
        *_NVIDIA_CU13,
        _pkg("needs-torch-211", "1.0", ["torch>=2.11"]),
        _pkg("trainer-utils", "1.0", ["torch", "einops-like"]),
        _pkg(
            "nvidia-cuda-runtime",
            CU13_RUNTIME,
            files={"nvidia/cu13/VERSION": f"nvidia-cuda-runtime {CU13_RUNTIME}\n"},
        ),
    ),
    "cu128": (
        _torch("2.10.0+cu128", "12.8", _CU12_DEPS),
        _torch("2.9.1+cu128", "12.8", _CU12_DEPS),
        _torch("2.7.1+cu128", "12.8", _CU12_DEPS),
        *_NVIDIA_CU12,
        _FILELOCK,
    ),
    "cu130": (
        _torch("2.10.0+cu130", "13.0", _CU13_DEPS),
        _torch("2.11.0+cu130", "13.0", _CU13_DEPS),
        *_NVIDIA_CU13,
        _FILELOCK,
    ),
    "cpu": (
        _torch("2.10.0+cpu", None, ["filelock-like"]),
        _FILELOCK,
    ),
    "plain": (  # as PyPI publishes them: no local tag in the metadata, the CUDA build's at run time
        _torch("2.10.0", "12.8", _CU12_DEPS, runtime="2.10.0+cu128"),
        _torch(
            "2.11.0",
            "13.0",
            (
                f"nvidia-cuda-runtime=={CU13_RUNTIME}; {_ON_LINUX}",
                f"nvidia-nccl-cu13=={CU13_NCCL}; {_ON_LINUX}",
                "filelock-like",
            ),
            runtime="2.11.0+cu130",
        ),
    ),
    "releases": tuple(EXTENSIONS.values()),
}


def _release_filename(key: str) -> str:
    """``flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE`` -> ``...cxx11abiTRUE-py3-none-any.whl`` (the
    release's spelling)."""
    return f"{key}-py3-none-any.whl"


def build_gate_wheels(root: Path) -> Path:
    """Write every repo's wheels under ``root/<repo>``; returns ``root``. Byte-reproducible."""
    for repo, specs in REPOS.items():
        for spec in specs:
            path = spec.build(root / repo)
            # keep the release's own spelling of the local version (TRUE, not true)
            if repo == "releases":
                key = next(k for k, s in EXTENSIONS.items() if s is spec)
                path.rename(path.with_name(_release_filename(key)))
    return root


@dataclass(frozen=True)
class GateIndex:
    """The stand-in wheels over HTTP: ``url("cu128")`` is an index URL, ``extension_url(key)`` a
    release file."""

    server: IndexServer
    root: Path  # root/<repo> holds each repo's wheels

    def url(self, repo: str) -> str:
        return self.server.simple_url(repo)

    @property
    def pypi_url(self) -> str:
        return self.url("pypi")

    def extension_filename(self, key: str) -> str:
        if key not in EXTENSIONS:
            raise KeyError(f"no extension {key!r}; known: {', '.join(EXTENSIONS)}")
        return _release_filename(key)

    def extension_url(self, key: str) -> str:
        return self.server.file_url("releases", self.extension_filename(key))

    def extension_name(self, key: str) -> str:
        """The distribution's canonical name: ``flash-attn``, ``mamba-ssm``, ``flash-attn-3``."""
        return canonicalize_name(EXTENSIONS[key].name)

    def extension_requirement(self, key: str, marker: str | None = None) -> str:
        """``flash-attn @ http://.../releases/files/flash_attn-...whl`` (``; marker`` when
        given)."""
        req = f"{self.extension_name(key)} @ {self.extension_url(key)}"
        return f"{req} ; {marker}" if marker else req


@pytest.fixture(scope="session")
def gate_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GateIndex]:
    """The gate's stand-in index: built and started on first use, shared by the session (add no
    faults)."""
    root = build_gate_wheels(tmp_path_factory.mktemp("gate-wheels"))
    with IndexServer({repo: root / repo for repo in REPOS}) as server:
        yield GateIndex(server=server, root=root)


# ----------------------------------------------------------------------------- running the tools


class ToolFailed(AssertionError):
    """A tool exited non-zero; ``argv``, ``returncode`` and ``output`` say how."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        super().__init__(f"{' '.join(argv[:4])} ... exited {returncode}:\n{output}")
        self.argv, self.returncode, self.output = list(argv), returncode, output


def uv_bin() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def uv_pip_list(venv: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """{canonical name: version} of what ``venv`` holds, as ``uv pip list`` says (the one reading
    of an installed set the differential tests compare)."""
    out = subprocess.run(
        [uv_bin(), "pip", "list", "--python", str(venv / "bin" / "python"), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=dict(env) if env is not None else installer_env(),
    )
    return {str(canonicalize_name(d["name"])): d["version"] for d in json.loads(out.stdout)}


# what an installer writes into a dist-info that names where it was installed from (the rest of
# RECORD differs between two venvs only by their paths: a console script's shebang)
_SAID = ("METADATA", "INSTALLER", "direct_url.json", "uv_build.json", "uv_cache.json")


def dist_infos(venv: Path) -> dict[str, dict[str, object]]:
    """{dist-info folder: {"files": its files (relative, sorted), and the text of each of
    ``_SAID`` it holds}} of every distribution in ``venv``: what the differential tests compare with
    the locker's own venv, file for file (not only names and versions)."""
    site = next(venv.glob("lib/python3*/site-packages"))
    out: dict[str, dict[str, object]] = {}
    for info in sorted(site.glob("*.dist-info")):
        got: dict[str, object] = {
            "files": sorted(str(f.relative_to(info)) for f in info.rglob("*") if f.is_file())
        }
        for name in _SAID:
            if (info / name).is_file():
                got[name] = (info / name).read_text(encoding="utf-8", errors="replace")
        out[info.name] = got
    return out


def uv_sync_dry_run(
    folder: Path, venv: Path, argv: Sequence[str] = (), home: Path | None = None
) -> str:
    """What ``uv sync --frozen --dry-run ARGV`` of the project in ``folder`` says it would do to
    ``venv`` (``UV_PROJECT_ENVIRONMENT``): "Would make no changes" when it is uv's own venv."""
    env = installer_env(home, {"UV_PROJECT_ENVIRONMENT": str(venv)})
    env.pop("UV_NO_CONFIG")
    out = subprocess.run(
        [
            uv_bin(),
            "sync",
            "--frozen",
            "--dry-run",
            "--python",
            str(venv / "bin" / "python"),
            *argv,
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stderr + out.stdout


def poetry_bin() -> Path:
    """Poetry in a cached venv (installed from PyPI once); the calling test is skipped where it does
    not install."""
    poetry = POETRY_VENV / "bin" / "poetry"
    with cache_lock(POETRY_VENV):  # pytest-xdist workers share .cache/tests
        if not poetry.exists():
            made = subprocess.run(
                [sys.executable, "-m", "venv", str(POETRY_VENV)], capture_output=True
            )
            got = (
                made.returncode == 0
                and subprocess.run(
                    [str(POETRY_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "poetry"],
                    capture_output=True,
                    timeout=600,
                ).returncode
                == 0
            )
            if not got or not poetry.exists():
                pytest.skip("Poetry does not install here (pip install poetry failed)")
    return poetry


def _folder(tmp: Path, prefix: str) -> Path:
    """A fresh ``tmp/<prefix>-<n>`` (the first n free): each lock gets its own project folder."""
    tmp.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        try:
            (folder := tmp / f"{prefix}-{n}").mkdir()
            return folder
        except FileExistsError:
            n += 1


def _run(
    argv: Sequence[str | Path],
    cwd: Path,
    tmp: Path,
    *,
    project_config: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> str:
    env = installer_env(tmp / "home", extra_env)
    # UV_NO_CONFIG would also hide the project's own [tool.uv]; HOME is private anyway
    if project_config:
        env.pop("UV_NO_CONFIG")
    args = [str(a) for a in argv]
    out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    if out.returncode != 0:
        raise ToolFailed(args, out.returncode, out.stdout + out.stderr)
    return out.stdout + out.stderr


def _toml_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _uv_indexes(idx: GateIndex, explicit: Sequence[str]) -> str:
    """[[tool.uv.index]] tables: each PyTorch-style repo explicit (only what sources send there),
    the PyPI stand-in default."""
    tables = [
        f'[[tool.uv.index]]\nname = "{repo}"\nurl = "{idx.url(repo)}"\nexplicit = true\n'
        for repo in explicit
    ]
    tables.append(f'[[tool.uv.index]]\nname = "pypi"\nurl = "{idx.pypi_url}"\ndefault = true\n')
    return "\n".join(tables)


def _uv_lock(folder: Path, tmp: Path) -> Path:
    _run([uv_bin(), "lock", "--no-cache"], folder, tmp, project_config=True)
    return folder / "uv.lock"


# ----------------------------------------------------------------------------- uv.lock


def uv_platform_lock(
    tmp: Path,
    idx: GateIndex,
    *,
    linux_index: str = "cu128",
    torch: str = "2.10.0",
    linux_torch: str | None = None,
    extension: str | None = None,
    deps: Sequence[str] = (),
    overrides: Sequence[str] = (),
    excludes: Sequence[str] = (),
    environments: Sequence[str] = (),
    extra_toml: str = "",
) -> Path:
    """uv.lock in the shape of uv's PyTorch guide: torch from ``linux_index`` on Linux, from the
    PyPI stand-in elsewhere.

    pyproject: ``dependencies = ["torch==<torch>", "trainer-utils==1.0", *deps]``;
    ``[tool.uv.sources] torch = [{ index = "<linux_index>", marker = "sys_platform == 'linux'" }]``;
    the PyTorch index ``explicit = true``, the PyPI stand-in ``default = true``; ``environments``
    not restricted (unless given), so the lock forks: top-level ``resolution-markers =
    ["sys_platform == 'linux'", "sys_platform != 'linux'"]``, two torch entries (2.10.0+cu128 from
    the cu128 registry with ``resolution-markers = ["sys_platform == 'linux'"]`` and unmarked edges
    to nvidia-cuda-runtime-cu12 / nvidia-nccl-cu12 / filelock-like; 2.10.0 from pypi, non-Linux,
    edge to filelock-like only: uv drops the ``platform_system == "Linux"`` deps there), and the
    project's and trainer-utils' torch edges marked ``sys_platform == 'linux'`` / ``sys_platform !=
    'linux'``.

    Healthy: the defaults (linux 2.10.0+cu128, 2.10.0 elsewhere). Planted:

    - ``linux_index="cu130"``: the same 2.10.0 re-tagged +cu130 on Linux (torch-local).
    - ``linux_torch="2.9.1"``: a downgrade in the Linux fork only (``torch==2.9.1 ; sys_platform ==
      'linux'`` and ``torch==<torch> ; sys_platform != 'linux'``) -> 2.9.1+cu128 and 2.10.0.
    - ``extension=<key of EXTENSIONS>``: ``flash-attn @ <url> ; sys_platform == 'linux'`` -> a
      ``[[package]]`` with ``source = { url = "<url>" }``, the normalised version
      (``2.8.3+cu12torch2.10cxx11abitrue``) and an edge to the Linux torch: the torch-minor,
      CUDA-major and ABI mismatches.
    - ``deps=["needs-torch-211==1.0"], overrides=["torch==2.10.0"]``: override-dependencies force
      torch under a package that declares ``torch>=2.11`` (torch-requirement); ``[manifest]
      overrides`` records it.
    - ``overrides`` / ``excludes`` (``[tool.uv] exclude-dependencies``) / ``extra_toml`` (appended
      to the pyproject) are the knobs ``uv_runtime_missing_lock`` uses.
    """
    folder = _folder(tmp, "uv-platform")
    if linux_torch is None:
        torch_deps = [f"torch=={torch}"]
    else:
        torch_deps = [
            f"torch=={linux_torch} ; sys_platform == 'linux'",
            f"torch=={torch} ; sys_platform != 'linux'",
        ]
    all_deps = [*torch_deps, "trainer-utils==1.0", *deps]
    if extension is not None:
        all_deps.append(idx.extension_requirement(extension, "sys_platform == 'linux'"))
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = "{REQUIRES_PYTHON}"
dependencies = {_toml_list(all_deps)}

[tool.uv]
package = false
override-dependencies = {_toml_list(overrides)}
exclude-dependencies = {_toml_list(excludes)}
{f"environments = {_toml_list(environments)}" if environments else ""}

[tool.uv.sources]
torch = [{{ index = "{linux_index}", marker = "sys_platform == 'linux'" }}]

{_uv_indexes(idx, [linux_index])}
{extra_toml}""")
    return _uv_lock(folder, tmp)


def uv_groups_lock(
    tmp: Path,
    idx: GateIndex,
    *,
    cpu_torch: str = "2.10.0",
    cu128_torch: str = "2.10.0",
    cu130_torch: str = "2.10.0",
    extension_group: str | None = None,
    extension: str | None = None,
    deps: Sequence[str] = (),
) -> Path:
    """uv.lock with one extra per accelerator, as uv's PyTorch guide writes it.

    pyproject: ``dependencies = ["einops-like==0.8.1", *deps]``; ``[project.optional-dependencies]``
    ``cpu = ["torch==<cpu_torch>", "trainer-utils==1.0"]``, ``cu128 = [...]``, ``cu130 = [...]``
    (trainer-utils, which needs torch, stands for the torchvision every extra carries: it is what
    makes uv write pseudo-extra markers); ``[tool.uv] conflicts =
    [[{ extra = "cpu" }, { extra = "cu128" }, { extra = "cu130" }]]``; ``[tool.uv.sources] torch =
    [{ index = "cpu", extra = "cpu" }, { index = "cu128", extra = "cu128" }, { index = "cu130",
    extra = "cu130" }]``. The lock has a top-level ``conflicts`` table (no ``resolution-markers``:
    uv 0.13.9 writes none for extra-only forks) and three torch entries (2.10.0+cpu, 2.10.0+cu128,
    2.10.0+cu130, none with resolution-markers); the project's ``[package.optional-dependencies]``
    name one torch per extra; trainer-utils' torch edges and torch's own nvidia/filelock edges carry
    uv's pseudo-extras, e.g. ``extra == 'extra-7-trainer-cu128' or (extra == 'extra-7-trainer-cpu'
    and extra == 'extra-7-trainer-cu130')``.

    Planted: ``cu130_torch="2.11.0"`` (the cu130 extra drifts to another torch);
    ``extension_group="cu128", extension=<key>``: the extension's url added to that extra only
    (``extension_group="cu130", extension=HEALTHY_EXTENSION``: a cu12 build in the cu130 extra).
    """
    if (extension is None) != (extension_group is None):
        raise ValueError("extension and extension_group go together")
    folder = _folder(tmp, "uv-groups")
    extras = {
        extra: [f"torch=={version}", "trainer-utils==1.0"]
        for extra, version in (("cpu", cpu_torch), ("cu128", cu128_torch), ("cu130", cu130_torch))
    }
    if extension is not None and extension_group is not None:
        extras[extension_group].append(idx.extension_requirement(extension))
    extras_toml = "\n".join(f"{k} = {_toml_list(v)}" for k, v in extras.items())
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = "{REQUIRES_PYTHON}"
dependencies = {_toml_list(["einops-like==0.8.1", *deps])}

[project.optional-dependencies]
{extras_toml}

[tool.uv]
package = false
conflicts = [[{{ extra = "cpu" }}, {{ extra = "cu128" }}, {{ extra = "cu130" }}]]

[tool.uv.sources]
torch = [
  {{ index = "cpu", extra = "cpu" }},
  {{ index = "cu128", extra = "cu128" }},
  {{ index = "cu130", extra = "cu130" }},
]

{_uv_indexes(idx, ["cpu", "cu128", "cu130"])}""")
    return _uv_lock(folder, tmp)


def uv_runtime_missing_lock(tmp: Path, idx: GateIndex, *, how: str = "override") -> Path:
    """uv_platform_lock's healthy shape, but torch 2.10.0+cu128 is locked without its
    nvidia-nccl-cu12 edge.

    In every variant the Linux torch entry's ``dependencies`` are ``filelock-like`` and
    ``nvidia-cuda-runtime-cu12`` only. How the project told uv to drop it:

    - ``how="override"``: ``[tool.uv] override-dependencies = ["nvidia-nccl-cu12 ; sys_platform ==
      'never'"]``. uv ANDs the marker with each fork: gone from the Linux fork, but the non-Linux
      torch 2.10.0 gains an edge ``{ name = "nvidia-nccl-cu12", marker = "sys_platform == 'never'"
      }`` and so ``nvidia-nccl-cu12 2.27.5`` is still a locked package (present, unreachable on
      Linux).
    - ``how="exclude"``: ``[tool.uv] exclude-dependencies = ["nvidia-nccl-cu12"]``: no nccl
      anywhere.
    - ``how="metadata"``: ``[[tool.uv.dependency-metadata]]`` restating torch 2.10.0+cu128's
      requires-dist without nccl: no nccl anywhere; the lock's ``[[manifest.dependency-metadata]]``
      records it.
    """
    if how == "override":
        return uv_platform_lock(tmp, idx, overrides=["nvidia-nccl-cu12 ; sys_platform == 'never'"])
    if how == "exclude":
        return uv_platform_lock(tmp, idx, excludes=["nvidia-nccl-cu12"])
    if how == "metadata":
        requires = [r for r in _CU12_DEPS if not r.startswith("nvidia-nccl")]
        return uv_platform_lock(
            tmp,
            idx,
            extra_toml=(
                '[[tool.uv.dependency-metadata]]\nname = "torch"\nversion = "2.10.0+cu128"\n'
                f"requires-dist = {_toml_list(requires)}\n"
            ),
        )
    raise ValueError(f"how is 'override', 'exclude' or 'metadata', not {how!r}")


# ----------------------------------------------------------------------------- requirements files


def uv_universal_requirements(
    tmp: Path,
    idx: GateIndex,
    *,
    linux_torch: str = "2.10.0+cu128",
    other_torch: str = "2.10.0",
    linux_index: str = "cu128",
    extra: Sequence[str] = ("trainer-utils==1.0",),
    extension: str | None = None,
    source: str = "pyproject",
    hashes: bool = True,
    no_deps: bool = False,
) -> Path:
    """``uv pip compile --universal --generate-hashes`` of ``torch==<linux_torch> ; sys_platform ==
    'linux'``, ``torch==<other_torch> ; sys_platform != 'linux'`` and ``extra`` -> requirements.txt
    with markers.

    ``source="pyproject"`` (default): the requirements are a pyproject.toml's ``dependencies``,
    compiled with ``uv pip compile pyproject.toml``; its ``[tool.uv.sources]`` send the Linux torch
    to the explicit ``<linux_index>``, the rest to the PyPI stand-in, so the output holds
    ``torch==2.10.0 ; sys_platform != 'linux'`` and ``torch==2.10.0+cu128 ; sys_platform ==
    'linux'``.

    ``source="requirements"``: the same lines in a requirements.in, compiled with ``--index-url
    <linux_index> --extra-index-url pypi --index-strategy unsafe-best-match``. uv then offers the
    +cu128 build to every platform (``==2.10.0`` admits ``2.10.0+cu128`` and it is the best match):
    with the defaults the output is ONE unmarked ``torch==2.10.0+cu128`` line, i.e. macOS/Windows
    pinned to the CUDA build (a planted fault in itself); with ``linux_torch="2.9.1+cu128"`` it is
    ``torch==2.9.1+cu128 ; sys_platform == 'linux'`` and ``torch==2.10.0+cu128 ; sys_platform !=
    'linux'``.

    Planted: ``linux_torch="2.9.1+cu128"`` (a Linux-only downgrade), ``linux_torch="2.10.0+cu130",
    linux_index="cu130"`` (re-tag), ``extension=<key>`` (``flash-attn @ <url> ; sys_platform ==
    'linux'``, the url kept as written), ``no_deps=True`` (``--no-deps``: torch without its CUDA
    runtime and nccl; also the way to lock ``extra=["needs-torch-211==1.0"]``, which does not
    resolve otherwise).
    """
    folder = _folder(tmp, "uv-universal")
    lines = [
        f"torch=={linux_torch} ; sys_platform == 'linux'",
        f"torch=={other_torch} ; sys_platform != 'linux'",
        *extra,
    ]
    if extension is not None:
        lines.append(idx.extension_requirement(extension, "sys_platform == 'linux'"))
    # (3.10 here: 6 s of interpreter search)
    flags = [
        "--universal",
        "--python-version",
        PY_MAJOR_MINOR,
        "--no-cache",
        *(["--generate-hashes"] if hashes else []),
        *(["--no-deps"] if no_deps else []),
    ]
    if source == "pyproject":
        (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">={PY_MAJOR_MINOR}"
dependencies = {_toml_list(lines)}

[tool.uv.sources]
torch = [{{ index = "{linux_index}", marker = "sys_platform == 'linux'" }}]

{_uv_indexes(idx, [linux_index])}""")
        _run(
            [uv_bin(), "pip", "compile", "pyproject.toml", "-o", "requirements.txt", *flags],
            folder,
            tmp,
            project_config=True,
        )
    elif source == "requirements":
        (folder / "requirements.in").write_text("\n".join(lines) + "\n")
        _run(
            [
                uv_bin(),
                "pip",
                "compile",
                "requirements.in",
                "-o",
                "requirements.txt",
                "--index-url",
                idx.url(linux_index),
                "--extra-index-url",
                idx.pypi_url,
                "--index-strategy",
                "unsafe-best-match",
                *flags,
            ],
            folder,
            tmp,
        )
    else:
        raise ValueError(f"source is 'pyproject' or 'requirements', not {source!r}")
    return folder / "requirements.txt"


def pip_compile_requirements(
    tmp: Path,
    idx: GateIndex,
    *,
    torch: str = "2.10.0+cu128",
    index: str = "cu128",
    extension: str | None = None,
    extra: Sequence[str] = ("trainer-utils==1.0",),
    hashes: bool = False,
) -> Path:
    """pip-tools' ``pip-compile`` (``python -m piptools compile``) of ``torch==<torch>``, ``extra``
    and optionally ``flash-attn @ <url>``, from ``--index-url <index> --extra-index-url pypi``.

    One environment (this interpreter's), so no markers. Planted: ``torch="2.9.1+cu128"``
    (downgrade), ``torch="2.10.0+cu130", index="cu130"`` (re-tag), ``torch="2.10.0"`` (the plain
    PyPI build: no local tag), ``extension=<key>`` (mismatched builds).
    """
    folder = _folder(tmp, "pip-compile")
    lines = [f"torch=={torch}", *extra]
    if extension is not None:
        lines.append(idx.extension_requirement(extension))
    (folder / "requirements.in").write_text("\n".join(lines) + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "piptools",
            "compile",
            "--quiet",
            "--no-strip-extras",
            "--index-url",
            idx.url(index),
            "--extra-index-url",
            idx.pypi_url,
            "--cache-dir",
            tmp / "pip-cache",
            *(["--generate-hashes"] if hashes else []),
            "-o",
            "requirements.txt",
            "requirements.in",
        ],
        folder,
        tmp,
    )
    return folder / "requirements.txt"


# ----------------------------------------------------------------------------- poetry.lock


def poetry_lock(
    tmp: Path,
    idx: GateIndex,
    *,
    linux_torch: str = "2.10.0+cu128",
    other_torch: str = "2.10.0",
    linux_index: str = "cu128",
    extension: str | None = None,
    deps: Mapping[str, str] | None = None,
) -> Path:
    """poetry.lock with a torch source per marker.

    ``torch = [{ version = "<linux_torch>", source = "<linux_index>", markers = "sys_platform ==
    'linux'" }, { version = "<other_torch>", source = "standin", markers = "sys_platform != 'linux'"
    }]``; the PyTorch source ``priority = "explicit"``, ``standin`` (the PyPI stand-in) primary;
    optional ``flash-attn = { url = "<url>", markers = "sys_platform == 'linux'" }``; ``deps`` adds
    ``name = "version"`` lines (from standin). Planted: ``linux_torch="2.9.1+cu128"``,
    ``linux_torch="2.10.0+cu130", linux_index="cu130"``, ``extension=<key>``. Skips the test
    where Poetry does not install.
    """
    poetry = poetry_bin()
    folder = _folder(tmp, "poetry")
    lines = [
        (
            f'torch = [\n  {{ version = "{linux_torch}", source = "{linux_index}", markers ='
            f' "sys_platform == \'linux\'" }},\n  {{ version = "{other_torch}", source = "standin",'
            " markers = \"sys_platform != 'linux'\" },\n]"
        ),
        'trainer-utils = "1.0"',
    ]
    lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in (deps or {}).items()]
    if extension is not None:
        lines.append(
            f'{idx.extension_name(extension)} = {{ url = "{idx.extension_url(extension)}", '
            "markers = \"sys_platform == 'linux'\" }"
        )
    body = "\n".join(lines)
    (folder / "pyproject.toml").write_text(f"""[tool.poetry]
name = "{PROJECT}"
version = "0.1.0"
description = ""
authors = []
package-mode = false

[tool.poetry.dependencies]
python = "{REQUIRES_PYTHON},<4"
{body}

[[tool.poetry.source]]
name = "{linux_index}"
url = "{idx.url(linux_index)}"
priority = "explicit"

[[tool.poetry.source]]
name = "standin"
url = "{idx.pypi_url}"
priority = "primary"
""")
    _run(
        [poetry, "lock", "--no-interaction"],
        folder,
        tmp,
        extra_env={
            "POETRY_CACHE_DIR": str(tmp / "poetry-cache"),
            "POETRY_VIRTUALENVS_CREATE": "false",
        },
    )
    return folder / "poetry.lock"


# ----------------------------------------------------------------------------- pylock.toml


def pip_lock(
    tmp: Path,
    idx: GateIndex,
    *,
    extension: str | None = None,
    torch: str = "2.10.0+cu128",
    index: str = "cu128",
    extra: Sequence[str] = ("trainer-utils==1.0",),
    no_deps: bool = False,
) -> Path:
    """``python -m pip lock`` (pip >= 25.1) of ``torch==<torch>``, ``extra`` and optionally the
    extension's url, from ``--index-url <index> --extra-index-url pypi``, into pylock.toml.

    Planted: ``torch="2.9.1+cu128"``, ``torch="2.10.0+cu130", index="cu130"``, ``extension=<key>``,
    ``no_deps=True`` (``--no-deps``: torch locked without its CUDA runtime and nccl).
    """
    folder = _folder(tmp, "pip-lock")
    reqs = [f"torch=={torch}", *extra]
    if extension is not None:
        reqs.append(idx.extension_requirement(extension))
    (folder / "requirements.txt").write_text("\n".join(reqs) + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "lock",
            "-r",
            "requirements.txt",
            "-o",
            "pylock.toml",
            "--index-url",
            idx.url(index),
            "--extra-index-url",
            idx.pypi_url,
            "--cache-dir",
            tmp / "pip-cache",
            *(["--no-deps"] if no_deps else []),
        ],
        folder,
        tmp,
        extra_env={"PIP_CONFIG_FILE": os.devnull},
    )
    return folder / "pylock.toml"
