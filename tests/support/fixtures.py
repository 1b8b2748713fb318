"""Fixtures built from real artifacts: tiny wheels, a local HTTP index, real venvs, the real CLI.

Session scope (built once per test run):

- ``scenario_wheels``: the swap-scenario wheel set (``SCENARIO``), written into two folders,
  ``nightly/`` (like download.pytorch.org: the nightly torch, its pytorch-triton and nccl) and
  ``pypi/`` (everything but the nightly torch: decoy stable torches, PyPI triton, culprits).
- ``scenario_index``: those folders served over HTTP (``ScenarioIndex``: ``nightly_url``,
  ``pypi_url``, ``nightly_flat``, ``pypi_flat``, ``server``).
- ``base_venv_template`` / ``nightly_venv_template``: a bare venv, and one with the nightly
  torch installed by real pip from the nightly index; tests get copies (0.2 s instead of 5 s).
  Made once per run for every worker (``once_per_run`` in ``run_folder``).

Function scope:

- ``make_venv(name="venv", template=None) -> Venv``: a fresh venv (a copy of a template).
- ``nightly_venv -> Venv``: a fresh copy of the venv holding the nightly torch.
- ``index_server(repos) -> IndexServer``: a private server (for fault injection); stopped after
  the test.
- ``private_scenario_index -> ScenarioIndex``: the scenario wheels hard-linked into this test's
  folders and served by its own server: faults, deletions and additions stay private.
- ``wheel_factory(name, version, repo="pypi", **kw) -> Path``: a wheel in this test's own
  folders (``tmp_path/wheels/<repo>``), e.g. to serve with ``index_server``.
- ``write_stack(steps, ...) -> Path``: a stack.toml for a scenario (the baseline torch step is
  prepended unless ``baseline=False``).
- ``run_envbuild(*args) -> EnvbuildResult(rc, stdout, stderr)``: the real CLI in a subprocess,
  ``HOME`` pointing at ``tmp_path/home``, the host's pip/uv config cut off.
- ``provision(stack, *extra) -> EnvbuildResult``: ``envbuild provision --stack STACK --root
  tmp_path/data --home tmp_path/home --python sys.executable --backend pip``.

``installer_env(home)`` is the environment every pip/uv/envbuild subprocess here gets.
``cache_lock(folder)`` guards a cache under ``.cache/tests`` that pytest-xdist workers share;
``once_per_run(folder, build)`` makes a folder of ``run_folder`` (the run's, shared by its
workers) once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from packaging.utils import canonicalize_name

from .index import IndexServer
from .wheels import WheelSpec, build_wheel

REPO_ROOT = Path(__file__).resolve().parents[2]

NIGHTLY_TORCH = "2.12.0.dev20260405+cu132"
PYTORCH_TRITON = "3.7.0+git9c288bc5"
NIGHTLY_NCCL = "2.29.7"
NIGHTLY_CUDA = "13.2"
STABLE_CUDA = "13.0"
PY_MAJOR_MINOR = f"{sys.version_info[0]}.{sys.version_info[1]}"


# ----------------------------------------------------------------------------- the wheel set


def _torch(version: str, cuda: str, requires: Sequence[str]) -> WheelSpec:
    return WheelSpec(
        name="torch",
        version=version,
        requires=tuple(requires),
        files={
            "torch/__init__.py": (
                "from . import version as version\n"
                "from .version import __version__ as __version__\n"
            ),
            "torch/version.py": (
                f"__version__ = {version!r}\ncuda = {cuda!r}\ngit_version = 'stand-in'\n"
            ),
            "torch/lib/libtorch_stub.txt": f"torch {version} cuda {cuda}\n",
        },
    )


def _triton(name: str, version: str) -> WheelSpec:
    """PyPI `triton` and the nightly's `pytorch-triton` both own the `triton/` import package."""
    return WheelSpec(
        name=name,
        version=version,
        files={
            "triton/__init__.py": f"__version__ = {version!r}\n__provider__ = {name!r}\n",
            "triton/compiler/__init__.py": f"# {name} {version}\n",
        },
    )


def _pkg(
    name: str, version: str, requires: Sequence[str] = (), files: Mapping[str, str] | None = None
) -> WheelSpec:
    return WheelSpec(name=name, version=version, requires=tuple(requires), files=dict(files or {}))


# repo -> wheels. The nightly torch lives only on "nightly"; its companions are on both indexes
# (download.pytorch.org serves pytorch-triton and the nvidia wheels too).
SCENARIO: dict[str, tuple[WheelSpec, ...]] = {
    "nightly": (
        _torch(
            NIGHTLY_TORCH,
            NIGHTLY_CUDA,
            [f"pytorch-triton=={PYTORCH_TRITON}", f"nvidia-nccl-cu13=={NIGHTLY_NCCL}"],
        ),
        _triton("pytorch-triton", PYTORCH_TRITON),
        _pkg("nvidia-nccl-cu13", NIGHTLY_NCCL, files={"nvidia/nccl/VERSION": f"{NIGHTLY_NCCL}\n"}),
    ),
    "pypi": (
        # decoy stable torches (the newest is what an unconstrained resolve picks)
        _torch("2.12.0", STABLE_CUDA, ["triton==3.7.0", f"nvidia-nccl-cu13=={NIGHTLY_NCCL}"]),
        _torch("2.13.0", STABLE_CUDA, ["triton==3.8.0", "nvidia-nccl-cu13==2.30.3"]),
        _triton("triton", "3.7.0"),
        _triton("triton", "3.8.0"),
        _triton("pytorch-triton", PYTORCH_TRITON),
        _pkg("nvidia-nccl-cu13", NIGHTLY_NCCL, files={"nvidia/nccl/VERSION": f"{NIGHTLY_NCCL}\n"}),
        _pkg("nvidia-nccl-cu13", "2.30.3", files={"nvidia/nccl/VERSION": "2.30.3\n"}),
        # plain helpers
        _pkg("einops-like", "0.8.1"),
        # the ways torch gets swapped
        _pkg("needs-torch-212", "1.0", ["torch>=2.12"]),  # a dev nightly does not satisfy >=2.12
        _pkg("vision-pin", "1.0", ["torch==2.12.0"]),  # torchvision-style exact pin
        # PyPI triton next to pytorch-triton
        _pkg("mamba-like", "1.0", ["torch", "triton", "einops-like"]),
        _pkg("eager-upgrader", "1.0", ["torch"]),  # -U --upgrade-strategy eager swaps it
        _pkg("reinstaller", "1.0", ["torch"]),  # --force-reinstall reinstalls torch
        _pkg(
            "overlap-a",
            "1.0",
            files={
                "shared_pkg/__init__.py": "",
                "shared_pkg/cute/x.py": "OWNER = 'overlap-a'\n",
                "shared_pkg/a.py": "A = 1\n",
            },
        ),
        _pkg(
            "overlap-b",
            "1.0",
            files={
                "shared_pkg/cute/x.py": "OWNER = 'overlap-b'\n",
                "shared_pkg/b.py": "B = 1\n",
            },
        ),
        # a --no-deps step leaves needs-fla-core's fla-core-like==0.5.0 unmet
        _pkg(
            "needs-fla-core",
            "1.0",
            ["fla-core-like==0.5.0", "einops-like"],
            files={"fla/layers/__init__.py": "from fla.ops import moba\n"},
        ),
        _pkg(
            "fla-core-like",
            "0.4.2",
            ["torch", "einops-like"],
            files={"fla/__init__.py": "", "fla/ops/__init__.py": "# no moba in 0.4.2\n"},
        ),
        _pkg(
            "fla-core-like",
            "0.5.0",
            ["torch>=2.7.0", "einops-like"],
            files={"fla/__init__.py": "", "fla/ops/__init__.py": "moba = 'moba'\n"},
        ),
    ),
}


@dataclass(frozen=True)
class ScenarioWheels:
    root: Path
    nightly: Path  # folder of the "nightly" index
    pypi: Path  # folder of the "pypi" index
    files: Mapping[tuple[str, str, str], Path]  # (repo, canonical name, version) -> wheel

    def wheel(self, name: str, version: str, repo: str = "pypi") -> Path:
        return self.files[(repo, canonicalize_name(name), version)]


def build_scenario_wheels(root: Path) -> ScenarioWheels:
    files: dict[tuple[str, str, str], Path] = {}
    for repo, specs in SCENARIO.items():
        for spec in specs:
            files[(repo, canonicalize_name(spec.name), spec.version)] = spec.build(root / repo)
    return ScenarioWheels(root=root, nightly=root / "nightly", pypi=root / "pypi", files=files)


@dataclass(frozen=True)
class ScenarioIndex:
    server: IndexServer
    wheels: ScenarioWheels

    @property
    def nightly_url(self) -> str:
        return self.server.simple_url("nightly")

    @property
    def pypi_url(self) -> str:
        return self.server.simple_url("pypi")

    @property
    def nightly_flat(self) -> str:
        return self.server.flat_url("nightly")

    @property
    def pypi_flat(self) -> str:
        return self.server.flat_url("pypi")


@pytest.fixture(scope="session")
def scenario_wheels(tmp_path_factory: pytest.TempPathFactory) -> ScenarioWheels:
    return build_scenario_wheels(tmp_path_factory.mktemp("scenario-wheels"))


@pytest.fixture(scope="session")
def scenario_index(scenario_wheels: ScenarioWheels) -> Iterator[ScenarioIndex]:
    """The scenario wheels over HTTP; shared, so tests must not add faults to it (use
    index_server)."""
    with IndexServer({"nightly": scenario_wheels.nightly, "pypi": scenario_wheels.pypi}) as server:
        yield ScenarioIndex(server=server, wheels=scenario_wheels)


@pytest.fixture
def index_server() -> Iterator[Callable[[Mapping[str, Path]], IndexServer]]:
    """Start private servers (``index_server({"pypi": folder})``); all stop after the test."""
    started: list[IndexServer] = []

    def start(repos: Mapping[str, Path]) -> IndexServer:
        server = IndexServer(repos).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def private_scenario_index(
    tmp_path: Path,
    scenario_wheels: ScenarioWheels,
    index_server: Callable[[Mapping[str, Path]], IndexServer],
) -> ScenarioIndex:
    """The scenario wheels in this test's own folders, on this test's own server: add faults,
    delete the nightly torch (a nightly leaving its index), add wheels, without touching others."""
    root = tmp_path / "private-index"
    for repo in ("nightly", "pypi"):
        shutil.copytree(scenario_wheels.root / repo, root / repo, copy_function=_link_or_copy)
    files = {
        (repo, name, version): root / repo / path.name
        for (repo, name, version), path in scenario_wheels.files.items()
    }
    wheels = ScenarioWheels(root=root, nightly=root / "nightly", pypi=root / "pypi", files=files)
    return ScenarioIndex(
        server=index_server({"nightly": wheels.nightly, "pypi": wheels.pypi}), wheels=wheels
    )


@pytest.fixture
def wheel_factory(tmp_path: Path) -> Callable[..., Path]:
    """``wheel_factory(name, version, repo="pypi", requires=[...], files={...})`` -> the wheel's
    path."""

    def make(name: str, version: str, repo: str = "pypi", **kwargs: Any) -> Path:
        return build_wheel(tmp_path / "wheels" / repo, name, version, **kwargs)

    return make


# ----------------------------------------------------------------------------- shared caches


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock for ``folder`` (a cache under ``.cache/tests``) while it is checked or
    built.

    pytest-xdist workers (and two test runs) share those caches: the first to arrive builds, the
    others wait and then find it built, instead of two pips writing one venv. ``flock`` on a
    sibling ``<folder>.lock`` file, so the kernel releases it when a holder dies mid-build.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- environments


def installer_env(
    home: Path | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """os.environ without PIP_*/UV_*, with the host's pip and uv config files cut off.

    ``home`` becomes HOME (and the XDG cache under it), so pip's and uv's caches, and anything
    envbuild writes under ``~``, stay in the test's temp folder.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_"))
        and k not in ("PYTHONPATH", "VIRTUAL_ENV", "ENVBUILD_LOCKFILES")
    }
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "UV_NO_CONFIG": "1",
            "NO_COLOR": "1",
            "PYTHONUTF8": "1",
        }
    )
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
        env["XDG_CACHE_HOME"] = str(home / ".cache")
        env["XDG_CONFIG_HOME"] = str(home / ".config")
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class InstalledDist:
    name: str  # canonical
    version: str
    dist_info: Path
    files: frozenset[str]  # RECORD paths, relative to site-packages

    @property
    def record(self) -> Path:
        return self.dist_info / "RECORD"


@dataclass
class Venv:
    """A real venv: run its pip, and read what is installed from dist-info (no imports)."""

    path: Path
    home: Path
    env_extra: dict[str, str] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        found = sorted(self.path.glob("lib/python3*/site-packages"))
        if not found:
            raise FileNotFoundError(f"no site-packages under {self.path}")
        return found[0]

    def run(
        self, *args: str | Path, check: bool = False, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *map(str, args)],
            capture_output=True,
            text=True,
            env=installer_env(self.home, self.env_extra),
            check=check,
            timeout=timeout,
        )

    def pip(
        self, *args: str | Path, check: bool = False, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``python -m pip ARGS`` in this venv, with the host's pip config cut off."""
        out = self.run("-m", "pip", *args, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(
                f"pip {' '.join(map(str, args))} failed"
                f" ({out.returncode}):\n{out.stdout}\n{out.stderr}"
            )
        return out

    def dists(self) -> dict[str, InstalledDist]:
        out: dict[str, InstalledDist] = {}
        for info in sorted(self.site_packages.glob("*.dist-info")):
            meta = info / "METADATA"
            if not meta.is_file():
                continue
            name = version = ""
            for line in meta.read_text(encoding="utf-8").splitlines():
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
                elif not line:
                    break
            files: set[str] = set()
            if (info / "RECORD").is_file():
                for row in (info / "RECORD").read_text(encoding="utf-8").splitlines():
                    if row:
                        files.add(os.path.normpath(row.rsplit(",", 2)[0]))
            out[canonicalize_name(name)] = InstalledDist(
                canonicalize_name(name), version, info, frozenset(files)
            )
        return out

    def version(self, name: str) -> str | None:
        d = self.dists().get(canonicalize_name(name))
        return d.version if d else None

    def owners(self, relpath: str) -> list[str]:
        """Distributions whose RECORD lists ``relpath`` (relative to site-packages)."""
        rel = os.path.normpath(relpath)
        return sorted(d.name for d in self.dists().values() if rel in d.files)

    def read(self, relpath: str) -> str:
        return (self.site_packages / relpath).read_text(encoding="utf-8")

    def exists(self, relpath: str) -> bool:
        return (self.site_packages / relpath).exists()


def _make_bare_venv(path: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "venv", str(path)], check=True, capture_output=True, timeout=300
    )
    return path


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def copy_venv(template: Path, dest: Path) -> Path:
    """Clone a venv by hard-linking its files (fast, no disk): safe because pip unlinks a file
    before writing it, uninstalls by renaming, and .pyc files are written by atomic replace,
    so nothing writes into a shared inode. Fine for ``python -m pip`` and imports; console-script
    shebangs keep the template's path.
    """
    shutil.copytree(template, dest, symlinks=True, copy_function=_link_or_copy)
    return dest


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the pytest-xdist workers of this run share: the run's base temporary folder
    (``pytest-<n>``, under which each worker has its own ``popen-gw<k>``); without xdist, this
    process's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


def once_per_run(folder: Path, build: Callable[[Path], object]) -> Path:
    """``folder``, made by ``build(folder)`` for the whole run by the first worker that asks (the
    others wait for it under ``cache_lock``, then find it made); one left half made is made
    again."""
    made = folder.with_name(f"{folder.name}.made")
    with cache_lock(folder):
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
            made.touch()
    return folder


@pytest.fixture(scope="session")
def base_venv_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare venv of this interpreter with its bundled pip, made once per run (ensurepip: 7
    CPU-seconds) and shared by the workers. Copy it; never install into it."""
    return once_per_run(run_folder(tmp_path_factory) / "venv-templates" / "base", _make_bare_venv)


@pytest.fixture(scope="session")
def nightly_venv_template(
    base_venv_template: Path,
    scenario_index: ScenarioIndex,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A venv with the stand-in nightly torch installed by real pip, as a torch step would; made
    once per run (from the first asking worker's index: pip records no index in what it installs)
    and shared by the workers."""

    def build(path: Path) -> None:
        copy_venv(base_venv_template, path)
        venv = Venv(path, home=tmp_path_factory.mktemp("template-home"))
        venv.pip(
            "install",
            "--index-url",
            scenario_index.nightly_url,
            "--extra-index-url",
            scenario_index.pypi_url,
            "--pre",
            f"torch=={NIGHTLY_TORCH}",
            check=True,
        )
        assert venv.version("torch") == NIGHTLY_TORCH

    return once_per_run(run_folder(tmp_path_factory) / "venv-templates" / "nightly", build)


@pytest.fixture
def make_venv(tmp_path: Path, base_venv_template: Path) -> Callable[..., Venv]:
    """``make_venv(name="venv", template=None)``: a fresh venv under tmp_path (a template copy)."""

    def make(name: str = "venv", template: Path | None = None) -> Venv:
        return Venv(
            copy_venv(template or base_venv_template, tmp_path / name), home=tmp_path / "home"
        )

    return make


@pytest.fixture
def nightly_venv(make_venv: Callable[..., Venv], nightly_venv_template: Path) -> Venv:
    """A fresh venv holding the nightly torch (and pytorch-triton, nccl), installed by real pip."""
    return make_venv("nightly-venv", template=nightly_venv_template)


# ----------------------------------------------------------------------------- stack specs


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return (
            "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml_value(key)


def _table(header: str, data: Mapping[str, Any]) -> str:
    body = "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in data.items() if v is not None)
    return f"{header}\n{body}"


def stack_toml(
    steps: Sequence[Mapping[str, Any]],
    *,
    index: ScenarioIndex | None,
    name: str = "scenario",
    baseline: bool = True,
    abi: Mapping[str, Any] | None = None,
    overlaps: Sequence[Mapping[str, Any]] = (),
    layout: Mapping[str, Any] | None = None,
) -> str:
    """The text of a stack.toml for a scenario (see ``write_stack``)."""
    abi_table: dict[str, Any] = {
        "package": "torch",
        "version": NIGHTLY_TORCH,
        "local": "cu132",
        "cuda": NIGHTLY_CUDA,
        "protect": ["pytorch-triton"],
        "triton_provider": "pytorch-triton",
    }
    abi_table.update(abi or {})
    layout_table: dict[str, Any] = {
        "root": "/mnt/data",
        "links": {"venv": "venv"},
        "min_free_gb": 0,
    }
    layout_table.update(layout or {})
    all_steps: list[Mapping[str, Any]] = []
    if baseline:
        if index is None:
            raise ValueError("baseline=True needs the scenario index")
        all_steps.append(
            {
                "name": "torch",
                "packages": [f"torch=={NIGHTLY_TORCH}"],
                "index_url": index.nightly_url,
                "extra_index_urls": [index.pypi_url],
                "pre": True,
            }
        )
    for step in steps:
        s = dict(step)
        if index is not None and not any(k in s for k in ("index_url", "no_index", "find_links")):
            s["index_url"] = index.pypi_url  # never fall back to the real PyPI
        all_steps.append(s)
    parts = [
        f"schema = 1\nname = {_toml_value(name)}\npython = {_toml_value(PY_MAJOR_MINOR)}\n",
        _table("[layout]", layout_table),
        _table("[abi]", abi_table),
        *(_table("[[abi.overlap]]", o) for o in overlaps),
        *(_table("[[step]]", s) for s in all_steps),
    ]
    return "\n".join(parts)


@pytest.fixture
def write_stack(tmp_path: Path, scenario_index: ScenarioIndex) -> Callable[..., Path]:
    """``write_stack(steps, name=..., baseline=True, abi={...}, overlaps=[...],
    filename="stack.toml")``.

    ``steps`` are dicts with the spec's step keys. The baseline step (the nightly torch from the
    nightly index, PyPI stand-in as extra index, ``pre = true``) is prepended unless
    ``baseline=False``; a step naming no source gets the stand-in PyPI as its ``index_url``.
    """

    def write(
        steps: Sequence[Mapping[str, Any]], *, filename: str = "stack.toml", **kwargs: Any
    ) -> Path:
        path = tmp_path / filename
        path.write_text(stack_toml(steps, index=scenario_index, **kwargs), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def stack_locks(
    scenario_index: ScenarioIndex, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Sequence[Mapping[str, Any]], Path], Path]:
    """``stack_locks(steps, tmp_path) -> stack``: ``write_stack(steps)`` locked by the real
    ``envbuild lock`` (``ENVBUILD_CACHE_DIR`` ``tmp_path/envbuild-cache``), as a test that ran
    both itself leaves ``tmp_path``: the stack, its lock files, that cache and ``home/``.

    The lock is made once per worker for each stack text (three pip-compile runs, 5 s) and copied
    into each test's folder, which the test then changes as its own.
    """
    from lockhelpers import lock_env

    made: dict[str, Path] = {}

    def lock(steps: Sequence[Mapping[str, Any]], tmp_path: Path) -> Path:
        text = stack_toml(steps, index=scenario_index)
        if text not in made:
            folder = tmp_path_factory.mktemp("stack-lock")
            (folder / "stack.toml").write_text(text, encoding="utf-8")
            r = run_cli(
                ("lock", "--stack", folder / "stack.toml"),
                home=folder / "home",
                cwd=folder,
                env=lock_env(folder),
            )
            assert r.rc == 0, r.output
            made[text] = folder
        shutil.copytree(made[text], tmp_path, symlinks=True, dirs_exist_ok=True)
        return tmp_path / "stack.toml"

    return lock


# ----------------------------------------------------------------------------- the CLI


class EnvbuildResult(NamedTuple):
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(
    args: Sequence[str | Path],
    *,
    home: Path | None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    pip_config: bool = False,
) -> EnvbuildResult:
    """``python -m envbuild ARGS``: the one way tests start the real CLI in a subprocess.

    ``installer_env(home, env)`` is its environment. ``home=None`` keeps the caller's HOME, and
    with it pip's warm download cache, for the tests that install real packages; ``pip_config``
    keeps the host's pip config files, the sources of the ``cpu`` profile's torch on machines
    that hold its CPU wheel in a local find-links folder.
    """
    full = installer_env(home, env)
    if pip_config:
        del full["PIP_CONFIG_FILE"]
    out = subprocess.run(
        [sys.executable, "-m", "envbuild", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full,
        timeout=timeout,
    )
    return EnvbuildResult(out.returncode, out.stdout, out.stderr)


@pytest.fixture
def run_envbuild(tmp_path: Path) -> Callable[..., EnvbuildResult]:
    """``run_envbuild(*args, env=None, cwd=None, timeout=600)`` -> ``EnvbuildResult(rc, stdout,
    stderr)``.

    Runs ``python -m envbuild`` with HOME at ``tmp_path/home`` and the host's installer config cut
    off.
    """

    def run(
        *args: str | Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 600,
    ) -> EnvbuildResult:
        return run_cli(args, home=tmp_path / "home", cwd=cwd or tmp_path, env=env, timeout=timeout)

    return run


@pytest.fixture
def provision(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> Callable[..., EnvbuildResult]:
    """``provision(stack, *extra_args)``: provision into tmp_path/data with HOME tmp_path/home."""

    def run(stack: Path, *extra: str, env: Mapping[str, str] | None = None) -> EnvbuildResult:
        return run_envbuild(
            "provision",
            "--stack",
            stack,
            "--root",
            tmp_path / "data",
            "--home",
            tmp_path / "home",
            "--python",
            sys.executable,
            "--backend",
            "pip",
            *extra,
            env=env,
        )

    return run


@pytest.fixture
def provisioned_venv(tmp_path: Path) -> Venv:
    """The venv ``provision`` made (``tmp_path/data/venv``), for reading what it installed."""
    return Venv(tmp_path / "data" / "venv", home=tmp_path / "home")
