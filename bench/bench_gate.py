"""Benchmark: the check-lock gate (``envbuild check-lock --offline FILE``) on a generated, realistic
uv.lock.

    python bench/bench_gate.py [--packages 600] [--rounds 5] [--stress 20000,100000:lean]
    [--profile]
                               [--keep DIR] [--out bench/results-gate-2core.json]
    python bench/bench_gate.py --write FILE [--packages N] [--fault flash-attn-torch29]   # just the
    lock

The lock (deterministic, seeded) is what uv writes for a large ML project: ``version = 1``,
``revision = 3``, ``requires-python = ">=3.10"``, three platform forks (top-level
``resolution-markers``), two conflicting extras (``conflicts`` = trainer[cu128] / trainer[cu130]), a
``[manifest]`` with two workspace members, ~600 ``[[package]]`` entries from registries with an
sdist and several wheels each (url, sha256, size, upload-time; ~1 MB), torch three times (2.10.0
from PyPI off Linux and without an accelerator extra, 2.10.0+cu128 and 2.10.0+cu130 from
download.pytorch.org on Linux per extra, each with ``resolution-markers``), torchvision likewise,
their dependents' edges naming one torch each by ``version`` + ``source``, and a uv-style marker of
20+ clauses (pseudo-extras ``extra-7-trainer-cu128``, python and machine splits, impossible
conflict clauses) on every edge of a registry package. Healthy: ``flash-attn
2.8.3+cu12torch2.10cxx11abitrue`` (a URL source) beside torch 2.10.0+cu128. Planted (``--fault``):
the same wheel built for torch 2.9.

Measured, variants interleaved round by round, median and min of ``--rounds``:

- ``cli``: the whole ``envbuild check-lock --offline FILE`` (subprocess wall time, NO_COLOR=1);
- ``tomllib_proc``: a whole ``python -c "import tomllib,sys; tomllib.load(open(sys.argv[1],'rb'))"
  FILE`` with the same interpreter;
- ``python_proc``: ``python -c pass`` (interpreter start alone);
- ``check_file``: in-process ``envbuild.gate.check_file(path, Policy(), offline=True)``;
- ``tomllib``: in-process ``tomllib.loads(text)``;
- ``cli_fault``: the CLI on the planted lock (exit 8);
- ``cli_imports``: a process importing what the CLI imports (its fixed cost); ``cli_trivial``: the
  CLI on a one-line requirements file.

Targets (the issue): ``cli`` median <= 0.5 s and ``cli / tomllib_proc`` <= 1.5.
Stress: 20k- and 100k-package locks (1 wheel each; ``:lean`` without sdists or ordinary edge
markers): time to the verdict, exit code, no traceback (the gate refuses > 64 MiB with exit 2, >
20000 packages with a broken-lock finding).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
ENVBUILD = str(Path(PY).with_name("envbuild"))

PROJECT = "trainer"
X8 = "extra == 'extra-7-trainer-cu128'"
N8 = "extra != 'extra-7-trainer-cu128'"
X13 = "extra == 'extra-7-trainer-cu130'"
N13 = "extra != 'extra-7-trainer-cu130'"
LINUX, DARWIN = "sys_platform == 'linux'", "sys_platform == 'darwin'"
OTHER = "sys_platform != 'darwin' and sys_platform != 'linux'"
NOT_LINUX = "sys_platform != 'linux'"
PYPI = "https://pypi.org/simple"
CU128 = "https://download.pytorch.org/whl/cu128"
CU130 = "https://download.pytorch.org/whl/cu130"
TORCH, VISION = "2.10.0", "0.25.0"
FA_HEALTHY = "2.8.3+cu12torch2.10cxx11abitrue"
FA_FAULT = "2.8.3+cu12torch2.9cxx11abitrue"
FAULTS = {"flash-attn-torch29": FA_FAULT}

# DNF conditions (lists of conjunctions, each a list of atoms) for the three torch builds
F_CU128 = [[LINUX, X8, N13]]
F_CU130 = [[LINUX, N8, X13]]
F_PYPI = [[DARWIN], [OTHER], [LINUX, N8, N13]]
IMPOSSIBLE = [X8, X13]  # uv keeps clauses for the conflicting pair chosen together
PY_SPLITS = (
    ["python_full_version < '3.11'"],
    ["python_full_version >= '3.11' and python_full_version < '3.12'"],
    ["python_full_version >= '3.12' and python_full_version < '3.13'"],
    ["python_full_version >= '3.13'"],
)
MACHINE_SPLITS = (
    ["platform_machine == 'x86_64'"],
    ["platform_machine == 'aarch64'"],
    ["platform_machine != 'aarch64' and platform_machine != 'x86_64'"],
)
PY_SPLITS2 = (["python_full_version < '3.11'"], ["python_full_version >= '3.11'"])
MACHINE_SPLITS2 = (["platform_machine == 'x86_64'"], ["platform_machine != 'x86_64'"])

WELL_KNOWN = [
    "numpy",
    "scipy",
    "pandas",
    "transformers",
    "accelerate",
    "datasets",
    "tokenizers",
    "safetensors",
    "huggingface-hub",
    "peft",
    "trl",
    "timm",
    "einops",
    "lightning",
    "pytorch-lightning",
    "torchmetrics",
    "deepspeed",
    "bitsandbytes",
    "wandb",
    "tensorboard",
    "protobuf",
    "grpcio",
    "pyyaml",
    "requests",
    "urllib3",
    "certifi",
    "idna",
    "charset-normalizer",
    "tqdm",
    "regex",
    "filelock",
    "fsspec",
    "jinja2",
    "markupsafe",
    "networkx",
    "sympy",
    "mpmath",
    "typing-extensions",
    "pydantic",
    "pydantic-core",
    "packaging",
    "psutil",
    "pillow",
    "aiohttp",
    "multidict",
    "yarl",
    "frozenlist",
    "attrs",
    "click",
    "rich",
    "pygments",
    "omegaconf",
    "hydra-core",
    "sentencepiece",
    "xxhash",
    "pyarrow",
    "dill",
    "multiprocess",
    "kornia",
    "open-clip-torch",
    "diffusers",
    "torchdata",
    "liger-kernel",
    "xformers",
]
TORCH_DEPENDENTS = {
    "accelerate",
    "peft",
    "trl",
    "timm",
    "lightning",
    "pytorch-lightning",
    "torchmetrics",
    "deepspeed",
    "bitsandbytes",
    "kornia",
    "open-clip-torch",
    "diffusers",
    "torchdata",
    "liger-kernel",
    "xformers",
    "transformers",
}
VISION_DEPENDENTS = {"timm", "open-clip-torch", "kornia"}
NVIDIA = [
    "cublas",
    "cuda-cupti",
    "cuda-nvrtc",
    "cuda-runtime",
    "cudnn",
    "cufft",
    "cufile",
    "curand",
    "cusolver",
    "cusparse",
    "cusparselt",
    "nccl",
    "nvjitlink",
    "nvshmem",
    "nvtx",
]
WORDS = [
    "alpha",
    "bravo",
    "delta",
    "echo",
    "kilo",
    "lima",
    "nova",
    "orbit",
    "pixel",
    "quark",
    "sigma",
    "tango",
    "ultra",
    "vector",
    "whisky",
    "zulu",
    "flux",
    "grid",
    "helix",
    "ion",
]


# ----------------------------------------------------------------------------- markers


def _render(dnf: list[list[str]]) -> str:
    parts = [" and ".join(c) for c in dnf]
    if len(parts) == 1:
        return parts[0]
    return " or ".join(f"({p})" if " and " in p else p for p in parts)


def _atoms(dnf: list[list[str]]) -> int:
    return sum(" and ".join(c).count(" and ") + 1 for c in dnf)


def _expand(dnf: list[list[str]], rng: random.Random, min_atoms: int = 20) -> list[list[str]]:
    """An equivalent DNF of >= min_atoms comparisons: python and machine splits, an impossible
    conflict clause."""
    out = [list(c) for c in dnf]
    out.append([*IMPOSSIBLE, *rng.choice([[LINUX], [DARWIN], [rng.choice(PY_SPLITS)[0]]])])
    while _atoms(out) < min_atoms:
        need = min_atoms - _atoms(out)
        splits = [
            s
            for s in (PY_SPLITS, MACHINE_SPLITS, PY_SPLITS2, MACHINE_SPLITS2)
            if len(s) * 2 <= need + 2
        ] or [PY_SPLITS2, MACHINE_SPLITS2]
        i = rng.randrange(len(out) - 1)
        conj = out.pop(i)
        split = rng.choice(splits)
        used = " and ".join(conj)
        if split[0][0].split()[0] in used:  # already split on this variable: take the other one
            split = PY_SPLITS2 if split in (MACHINE_SPLITS, MACHINE_SPLITS2) else MACHINE_SPLITS2
            if split[0][0].split()[0] in used:
                out.insert(i, conj)
                out.insert(i, [*conj, "os_name == 'posix'"])
                continue
        for extra in split:
            out.insert(i, [*extra, *conj])
    return out


def _marker_pool(rng: random.Random, size: int) -> list[str]:
    """Distinct 20+-clause uv-style markers for ordinary edges (most hold nearly everywhere)."""
    bases = [
        [[LINUX], [DARWIN], [OTHER]],  # everywhere, as uv spells it in a forked lock
        [[LINUX], [DARWIN], [OTHER]],
        [[LINUX], [DARWIN], [OTHER]],
        [[LINUX]],
        [[NOT_LINUX], [LINUX, X8], [LINUX, X13], [LINUX, N8, N13]],
        [[LINUX, X8], [LINUX, X13], [DARWIN]],
        [["python_full_version >= '3.11'"]],
        [["platform_machine == 'x86_64'"], ["platform_machine != 'x86_64'"]],
    ]
    pool: dict[str, None] = {}
    tries = 0
    while len(pool) < size and tries < size * 50:
        tries += 1
        m = _render(_expand(rng.choice(bases), rng, 20 + rng.randrange(2)))
        pool[m] = None
    return list(pool)


# ----------------------------------------------------------------------------- artifacts


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(256):064x}"


def _time(rng: random.Random) -> str:
    return (
        f"2025-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:"
        f"{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z"
    )


def _pypi_url(rng: random.Random, filename: str) -> str:
    h = _hex(rng)
    return f"https://files.pythonhosted.org/packages/{h[:2]}/{h[2:4]}/{h[4:64]}/{filename}"


def _file(rng: random.Random, url: str, pypi: bool) -> str:
    fields = [f'url = "{url}"', f'hash = "sha256:{_hex(rng)}"']
    if pypi:
        fields += [f"size = {rng.randrange(20_000, 40_000_000)}", f'upload-time = "{_time(rng)}"']
    return "{ " + ", ".join(fields) + " }"


BINARY_TAGS = [
    "manylinux_2_17_x86_64.manylinux2014_x86_64",
    "manylinux_2_17_aarch64.manylinux2014_aarch64",
    "macosx_11_0_arm64",
    "macosx_10_12_x86_64",
    "win_amd64",
    "musllinux_1_2_x86_64",
]
CPYTHONS = ["cp310", "cp311", "cp312", "cp313"]


def _wheels(rng: random.Random, name: str, version: str, n: int, index: str = PYPI) -> list[str]:
    stem = name.replace("-", "_")
    pypi = index == PYPI
    if n <= 1:
        fn = f"{stem}-{version}-py3-none-any.whl"
        return [_file(rng, _pypi_url(rng, fn) if pypi else f"{index}/{fn}", pypi)]
    out = []
    for i in range(n):
        py, tag = CPYTHONS[i // len(BINARY_TAGS) % len(CPYTHONS)], BINARY_TAGS[i % len(BINARY_TAGS)]
        fn = f"{stem}-{version.replace('+', '%2B') if not pypi else version}-{py}-{py}-{tag}.whl"
        out.append(_file(rng, _pypi_url(rng, fn) if pypi else f"{index}/{fn}", pypi))
    return out


# ----------------------------------------------------------------------------- the lock


class Pkg:
    def __init__(
        self,
        name: str,
        version: str,
        source: str,
        wheels: list[str],
        sdist: str | None = None,
        resolution: list[str] | None = None,
    ) -> None:
        self.name, self.version, self.source, self.wheels, self.sdist = (
            name,
            version,
            source,
            wheels,
            sdist,
        )
        self.resolution = resolution or []
        self.deps: list[str] = []
        self.optional: dict[str, list[str]] = {}
        self.groups: dict[str, list[str]] = {}
        self.metadata: list[str] | None = None
        self.metadata_tail: list[str] = []

    def render(self) -> str:
        lines = [
            "[[package]]",
            f'name = "{self.name}"',
            f'version = "{self.version}"',
            f"source = {self.source}",
        ]
        if self.resolution:
            lines.append("resolution-markers = [")
            lines += [f'    "{m}",' for m in self.resolution]
            lines.append("]")
        if self.deps:
            lines.append("dependencies = [")
            lines += [f"    {d}," for d in self.deps]
            lines.append("]")
        if self.sdist:
            lines.append(f"sdist = {self.sdist}")
        if self.wheels:
            lines.append("wheels = [")
            lines += [f"    {w}," for w in self.wheels]
            lines.append("]")
        for table, content in (
            ("optional-dependencies", self.optional),
            ("dev-dependencies", self.groups),
        ):
            if content:
                lines += ["", f"[package.{table}]"]
                for k, deps in content.items():
                    lines.append(f"{k} = [")
                    lines += [f"    {d}," for d in deps]
                    lines.append("]")
        if self.metadata is not None:
            lines += ["", "[package.metadata]", "requires-dist = ["]
            lines += [f"    {r}," for r in self.metadata]
            lines.append("]")
            lines += self.metadata_tail
        return "\n".join(lines)


def _edge(
    name: str, marker: str | None = None, version: str | None = None, registry: str | None = None
) -> str:
    fields = [f'name = "{name}"']
    if version is not None:
        fields.append(f'version = "{version}"')
    if registry is not None:
        fields.append(f'source = {{ registry = "{registry}" }}')
    if marker:
        fields.append(f'marker = "{marker}"')
    return "{ " + ", ".join(fields) + " }"


# conflict shapes beside the two accelerator extras (``--shape``): extras -> conflict sets
SHAPES = ("plain", "rl", "wide")


def _shape(
    shape: str, plain: list[str], torch_users: list[str], rng: random.Random
) -> tuple[dict[str, list[str]], list[list[str]]]:
    """``rl``: a public RL framework's shape, 17 overlapping conflict sets over 7 extras (cu128 and
    cu130 among them); ``wide``: 20 conflicting extras in 12 overlapping sets beside 200 ordinary
    extras. Some extras reach torch's dependents, the rest ordinary packages."""
    extras: dict[str, list[str]] = {}
    sets: list[list[str]] = [["cu128", "cu130"]]
    if shape == "rl":
        for name, target in (
            ("fsdp", torch_users[0]),
            ("megatron", torch_users[1]),
            ("vllm", torch_users[2]),
            ("jax", plain[5]),
            ("tpu", plain[6]),
        ):
            extras[name] = [_edge(target)]
        for x in ("jax", "tpu"):
            sets += [[x, y] for y in ("cu128", "cu130", "fsdp", "megatron", "vllm")]
        sets += [
            ["fsdp", "megatron"],
            ["megatron", "vllm"],
            ["fsdp", "megatron", "vllm"],
            ["cu128", "megatron"],
            ["jax", "tpu", "megatron"],
            ["cu130", "fsdp", "jax"],
        ]
    elif shape == "wide":
        names = [f"k{i}" for i in range(20)]
        for i, name in enumerate(names):
            extras[name] = [
                _edge(torch_users[i % len(torch_users)] if i % 4 == 0 else plain[10 + i])
            ]
        sets += [[names[(i * 5 // 3 + d) % 20] for d in range(3)] for i in range(11)]
        for i in range(200):
            extras[f"o{i}"] = [_edge(n) for n in rng.sample(plain[:200], 2)]
    return extras, sets


def generate(
    packages: int = 600,
    *,
    seed: int = 20260318,
    wheels: int = 5,
    fault: str | None = None,
    markers: int = 400,
    lean: bool = False,
    shape: str = "plain",
) -> str:
    """A uv.lock of exactly ``packages`` entries (torch, torchvision and the nvidia wheels
    included).

    ``lean``: ordinary packages get no sdist and unmarked edges (torch's edges keep their markers).
    """
    rng = random.Random(seed)
    pool: list[str | None] = [None] if lean or markers <= 0 else list(_marker_pool(rng, markers))

    def reg(url: str) -> str:
        return f'{{ registry = "{url}" }}'

    def version() -> str:
        return f"{rng.randrange(0, 12)}.{rng.randrange(0, 30)}.{rng.randrange(0, 15)}"

    def sdist(name: str, ver: str) -> str:
        return _file(rng, _pypi_url(rng, f"{name.replace('-', '_')}-{ver}.tar.gz"), True)

    def torch_edges(name: str, vers: tuple[str, str, str]) -> list[str]:
        return [
            _edge(name, _render(_expand(F_PYPI, rng)), vers[0], PYPI),
            _edge(name, _render(_expand(F_CU128, rng)), vers[1], CU128),
            _edge(name, _render(_expand(F_CU130, rng)), vers[2], CU130),
        ]

    torch_vers = (TORCH, f"{TORCH}+cu128", f"{TORCH}+cu130")
    vision_vers = (VISION, f"{VISION}+cu128", f"{VISION}+cu130")
    fork_res = {
        "pypi": [DARWIN, OTHER, f"{LINUX} and {N8} and {N13}"],
        "cu128": [f"{LINUX} and {X8} and {N13}"],
        "cu130": [f"{LINUX} and {N8} and {X13}"],
    }

    # fixed ML core
    special: list[Pkg] = []
    nv12 = [
        Pkg(
            f"nvidia-{n}-cu12",
            f"12.8.{rng.randrange(10, 99)}",
            reg(PYPI),
            _wheels(rng, f"nvidia-{n}-cu12", "12.8.0", 2),
        )
        for n in NVIDIA
    ]
    nv13 = [
        Pkg(
            f"nvidia-{n}-cu13",
            f"13.0.{rng.randrange(10, 99)}",
            reg(PYPI),
            _wheels(rng, f"nvidia-{n}-cu13", "13.0.0", 2),
        )
        for n in NVIDIA
    ]
    triton = Pkg("triton", "3.6.0", reg(PYPI), _wheels(rng, "triton", "3.6.0", 8))
    special += [*nv12, *nv13, triton]
    on_linux_gpu = "platform_machine == 'x86_64' and sys_platform == 'linux'"
    torches = []
    for kind, ver, index, nv in (
        ("pypi", torch_vers[0], PYPI, nv12),
        ("cu128", torch_vers[1], CU128, nv12),
        ("cu130", torch_vers[2], CU130, nv13),
    ):
        t = Pkg(
            "torch",
            ver,
            reg(index),
            _wheels(rng, "torch", ver, 24 if kind == "pypi" else 10, index),
            resolution=fork_res[kind],
        )
        extra_cond = "" if kind == "pypi" else f" and {X8 if kind == 'cu128' else X13}"
        t.deps = [
            _edge(n, f"{on_linux_gpu}{extra_cond}")
            for n in ("filelock", "fsspec", "jinja2", "networkx", "sympy", "typing-extensions")
        ]
        t.deps += [_edge(p.name, _render(_expand([[on_linux_gpu + extra_cond]], rng))) for p in nv]
        t.deps.append(_edge("triton", on_linux_gpu + extra_cond))
        torches.append(t)
    visions = []
    for kind, ver, index, tv in zip(
        ("pypi", "cu128", "cu130"), vision_vers, (PYPI, CU128, CU130), torch_vers, strict=True
    ):
        v = Pkg(
            "torchvision",
            ver,
            reg(index),
            _wheels(rng, "torchvision", ver, 12 if kind == "pypi" else 6, index),
            resolution=fork_res[kind],
        )
        v.deps = [_edge("numpy"), _edge("pillow"), _edge("torch", None, tv, index)]
        visions.append(v)
    fa_version = FAULTS[fault] if fault else FA_HEALTHY
    fa_file = f"flash_attn-{fa_version.replace('abitrue', 'abiTRUE')}-cp312-cp312-linux_x86_64.whl"
    fa_url = f"https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/{fa_file}"
    fa = Pkg(
        "flash-attn",
        fa_version,
        f'{{ url = "{fa_url}" }}',
        [f'{{ url = "{fa_url}", hash = "sha256:{_hex(rng)}" }}'],
    )
    fa.deps = [_edge("einops"), _edge("torch", None, torch_vers[1], CU128)]
    special += [*torches, *visions, fa]

    # ordinary packages: the well-known names first (they sit near the top of the graph), then
    # filler
    n_plain = max(len(WELL_KNOWN), packages - len(special) - 2)
    names = list(WELL_KNOWN)
    i = 0
    while len(names) < n_plain:
        names.append(f"{WORDS[i % len(WORDS)]}-{'lib' if i % 3 else 'py'}{i // len(WORDS)}")
        i += 1
    plain: list[Pkg] = []
    for name in names:
        ver = version()
        binary = rng.random() < 0.2
        n = rng.randrange(max(2, wheels - 2), wheels + 2) if binary else 1
        plain.append(
            Pkg(
                name,
                ver,
                reg(PYPI),
                _wheels(rng, name, ver, n),
                sdist(name, ver) if not lean and (binary or rng.random() < 0.6) else None,
            )
        )
    by_name = {p.name: p for p in plain}
    # a DAG: each package depends on a few later ones; every later one is some earlier one's
    # dependency
    for j, p in enumerate(plain):
        later = range(j + 1, len(plain))
        k = min(len(later), rng.randrange(0, 3))
        for target in rng.sample(later, k) if k else []:
            p.deps.append(_edge(plain[target].name, rng.choice(pool)))
    pointed = {d.split('"')[1] for p in plain for d in p.deps}
    for j in range(len(WELL_KNOWN), len(plain)):
        if plain[j].name not in pointed:
            parent = plain[rng.randrange(max(1, j // 4), j)]
            parent.deps.append(_edge(plain[j].name, rng.choice(pool)))
    for name in sorted(TORCH_DEPENDENTS):
        by_name[name].deps += torch_edges("torch", torch_vers)
    for name in sorted(VISION_DEPENDENTS):
        by_name[name].deps += torch_edges("torchvision", vision_vers)
    for p in plain:
        p.deps.sort()

    # the workspace: trainer (virtual, the conflicting extras) and trainer-data (editable)
    root = Pkg(PROJECT, "0.1.0", '{ virtual = "." }', [])
    top = sorted(WELL_KNOWN[:40])
    root.deps = [_edge(n, rng.choice(pool)) for n in top] + [_edge("trainer-data")]

    def accel(kind: str, index: str, tv: str, vv: str) -> list[str]:
        out = [
            _edge("torch", f"{LINUX}", tv, index),
            _edge("torch", NOT_LINUX, torch_vers[0], PYPI),
            _edge("torchvision", f"{LINUX}", vv, index),
            _edge("torchvision", NOT_LINUX, vision_vers[0], PYPI),
        ]
        if kind == "cu128":
            out.append(_edge("flash-attn", f"{LINUX} and platform_machine == 'x86_64'"))
        return out

    root.optional = {
        "cu128": accel("cu128", CU128, torch_vers[1], vision_vers[1]),
        "cu130": accel("cu130", CU130, torch_vers[2], vision_vers[2]),
    }
    more, sets = _shape(shape, [p.name for p in plain], sorted(TORCH_DEPENDENTS), rng)
    root.optional.update(more)
    root.groups = {"dev": [_edge("rich"), _edge("tensorboard")]}
    req = [f'{{ name = "{n}", specifier = ">={by_name[n].version}" }}' for n in top]
    for extra, index in (("cu128", CU128), ("cu130", CU130)):
        conflict = f'conflict = {{ package = "{PROJECT}", extra = "{extra}" }}'
        req += [
            f"{{ name = \"torch\", marker = \"sys_platform == 'linux' and extra == '{extra}'\", "
            f'specifier = "=={TORCH}", index = "{index}", {conflict} }}',
            f"{{ name = \"torch\", marker = \"sys_platform != 'linux' and extra == '{extra}'\", "
            f'specifier = "=={TORCH}" }}',
            '{ name = "torchvision", marker = "sys_platform == \'linux\' and extra =='
            f" '{extra}'\", "
            f'specifier = "=={VISION}", index = "{index}", {conflict} }}',
        ]
    req.append(
        f'{{ name = "flash-attn", marker = "sys_platform == \'linux\' and platform_machine =='
        f" 'x86_64' "
        f'and extra == \'cu128\'", url = "{fa_url}" }}'
    )
    req.append('{ name = "trainer-data", editable = "packages/trainer-data" }')
    root.metadata = sorted(req)
    root.metadata_tail = [
        'provides-extras = ["cu128", "cu130"]',
        "",
        "[package.metadata.requires-dev]",
        "dev = [",
        '    { name = "rich", specifier = ">=13" },',
        '    { name = "tensorboard" },',
        "]",
    ]
    data = Pkg("trainer-data", "0.1.0", '{ editable = "packages/trainer-data" }', [])
    data.deps = [_edge(n, rng.choice(pool)) for n in ("datasets", "pyarrow", "xxhash")]
    data.metadata = [f'{{ name = "{n}" }}' for n in ("datasets", "pyarrow", "xxhash")]

    allp = sorted([*special, *plain, root, data], key=lambda p: (p.name, p.version))
    head = [
        "version = 1",
        "revision = 3",
        'requires-python = ">=3.10"',
        "resolution-markers = [",
        f'    "{LINUX}",',
        f'    "{DARWIN}",',
        f'    "{OTHER}",',
        "]",
        "conflicts = ["
        + ", ".join(
            "[" + ", ".join(f'{{ package = "{PROJECT}", extra = "{x}" }}' for x in cs) + "]"
            for cs in sets
        )
        + "]",
        "",
        "[manifest]",
        f'members = ["{PROJECT}", "trainer-data"]',
        'constraints = [{ name = "numpy", specifier = "<2.4" }]',
        "",
    ]
    body = "\n\n".join(p.render() for p in allp)
    return "\n".join(head) + "\n" + body + "\n"


# ----------------------------------------------------------------------------- measuring


def _env() -> dict[str, str]:
    """NO_COLOR=1; PYTHONDONTWRITEBYTECODE dropped (some sandboxes set it: then every start compiles
    envbuild's modules again, which no normal host does; bench_noop.py does the same)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NO_COLOR"] = "1"
    return env


def _proc(argv: list[str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd="/")
    return time.perf_counter() - t0, out.returncode, out.stdout + out.stderr


def _stats(xs: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(xs), 4),
        "min": round(min(xs), 4),
        "max": round(max(xs), 4),
    }


def measure(lock: Path, fault_lock: Path, rounds: int) -> dict[str, Any]:
    from envbuild.gate import Policy, check_file

    text = lock.read_text()
    check_file(lock, Policy(), offline=True)  # warm the imports
    # and the bytecode of every module the CLI imports
    _proc([ENVBUILD, "check-lock", "--offline", str(lock)])
    cli = [ENVBUILD, "check-lock", "--offline"]
    toml_prog = "import tomllib,sys; tomllib.load(open(sys.argv[1],'rb'))"
    trivial = lock.parent.parent / "trivial" / "requirements.txt"
    trivial.parent.mkdir(parents=True, exist_ok=True)
    trivial.write_text("torch==2.10.0\n")
    imports = (
        "import envbuild.cli, envbuild.commands.check_lock, envbuild.gate.formats.uvlock,"
        " envbuild.gate.output"
    )
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "cli",
            "tomllib_proc",
            "python_proc",
            "check_file",
            "tomllib",
            "cli_fault",
            "cli_imports",
            "cli_trivial",
        )
    }
    codes: dict[str, set[int]] = {"cli": set(), "cli_fault": set(), "tomllib_proc": set()}
    tails: dict[str, str] = {}
    for _ in range(rounds):
        t, rc, out = _proc([*cli, str(lock)])
        times["cli"].append(t)
        codes["cli"].add(rc)
        tails["cli"] = out
        t, rc, _ = _proc([PY, "-c", toml_prog, str(lock)])
        times["tomllib_proc"].append(t)
        codes["tomllib_proc"].add(rc)
        times["python_proc"].append(_proc([PY, "-c", "pass"])[0])
        t0 = time.perf_counter()
        report = check_file(lock, Policy(), offline=True)
        times["check_file"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tomllib.loads(lock.read_text())
        times["tomllib"].append(time.perf_counter() - t0)
        t, rc, out = _proc([*cli, str(fault_lock)])
        times["cli_fault"].append(t)
        codes["cli_fault"].add(rc)
        tails["cli_fault"] = out
        times["cli_imports"].append(_proc([PY, "-c", imports])[0])
        times["cli_trivial"].append(_proc([*cli, str(trivial)])[0])
    st = {k: _stats(v) for k, v in times.items()}
    return {
        "lock": {
            "bytes": len(text.encode()),
            "packages": len(tomllib.loads(text)["package"]),
            "environments": len(report.environments),
            "torches": report.torches,
        },
        "seconds": st,
        "ratios": {
            "cli_over_tomllib_proc": round(st["cli"]["median"] / st["tomllib_proc"]["median"], 2),
            "check_file_over_tomllib": round(
                st["check_file"]["median"] / st["tomllib"]["median"], 2
            ),
        },
        "exit": {k: sorted(v) for k, v in codes.items()},
        "targets": {
            "cli_median_le_0_5s": st["cli"]["median"] <= 0.5,
            "cli_le_1_5x_tomllib_proc": st["cli"]["median"] <= 1.5 * st["tomllib_proc"]["median"],
        },
        "output": {"cli": tails["cli"][-3000:], "cli_fault": tails["cli_fault"][-1500:]},
    }


_SHAPE_PROG = """
import json, resource, sys, time
from pathlib import Path
from envbuild.gate import Policy, check_file
t0 = time.perf_counter()
r = check_file(Path(sys.argv[1]), Policy(), offline=True)
t = time.perf_counter() - t0
print(json.dumps({"seconds": t, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": len(r.environments), "environments": sum(x.count for x in r.environments),
                  "selections": max((x.selections for x in r.environments), default=0),
                  "ok": r.ok, "findings": [f.text() for f in r.failing][:3], "notices": r.notices}))
"""  # noqa: E501 - code written out or run as it is


def shapes(folder: Path, packages: int, rounds: int) -> list[dict[str, Any]]:
    """The conflict shapes of the issue, each checked in a fresh process (``check_file`` time and
    the process's peak RSS, which includes the interpreter and the parsed lock)."""
    out = []
    for shape in ("rl", "wide"):
        path = folder / f"shape-{shape}" / "uv.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generate(packages, shape=shape))
        runs = []
        for _ in range(rounds):
            proc = subprocess.run(
                [PY, "-c", _SHAPE_PROG, str(path)], capture_output=True, text=True, env=_env()
            )
            if proc.returncode != 0:
                raise SystemExit(f"shape {shape}: {proc.stderr[-2000:]}")
            runs.append(json.loads(proc.stdout))
        best = runs[0]
        out.append(
            {
                "shape": shape,
                "bytes": path.stat().st_size,
                "rows": best["rows"],
                "environments": best["environments"],
                "ok": best["ok"],
                "findings": best["findings"],
                "notices": best["notices"],
                "seconds": _stats([r["seconds"] for r in runs]),
                "maxrss_mb": round(max(r["maxrss_mb"] for r in runs), 1),
                "targets": {
                    "in_process_le_0_5s": statistics.median(r["seconds"] for r in runs) <= 0.5,
                    "peak_le_200mb": max(r["maxrss_mb"] for r in runs) <= 200,
                },
            }
        )
    return out


def stress(folder: Path, sizes: list[str]) -> list[dict[str, Any]]:
    """``N`` (1 wheel per package, marked edges) or ``N:lean`` (no sdist, unmarked ordinary
    edges)."""
    out = []
    for spec in sizes:
        n, _, style = spec.partition(":")
        lean = style == "lean"
        path = folder / f"stress-{spec.replace(':', '-')}" / "uv.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        path.write_text(generate(int(n), wheels=1, markers=400, seed=int(n), lean=lean))
        made = time.perf_counter() - t0
        t, rc, text = _proc([ENVBUILD, "check-lock", "--offline", str(path)])
        tp, _, _ = _proc(
            [PY, "-c", "import tomllib,sys; tomllib.load(open(sys.argv[1],'rb'))", str(path)]
        )
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:]
        out.append(
            {
                "packages": int(n),
                "style": "lean" if lean else "marked",
                "bytes": path.stat().st_size,
                "generate_seconds": round(made, 2),
                "cli_seconds": round(t, 3),
                "tomllib_proc_seconds": round(tp, 3),
                "exit": rc,
                "traceback": "Traceback" in text,
                "last_line": last[0][-300:] if last else "",
            }
        )
        path.unlink()
    return out


def profile(lock: Path, top: int = 25) -> dict[str, Any]:
    from envbuild.gate import Policy, check_file

    check_file(lock, Policy(), offline=True)
    pr = cProfile.Profile()
    pr.enable()
    check_file(lock, Policy(), offline=True)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(top)
    tbuf = io.StringIO()
    pstats.Stats(pr, stream=tbuf).sort_stats("tottime").print_stats(top)
    phases = _phases(lock)
    imp = subprocess.run(
        [PY, "-X", "importtime", ENVBUILD, "check-lock", "--offline", str(lock)],
        capture_output=True,
        text=True,
        env=_env(),
    )
    rows = []
    for ln in imp.stderr.splitlines():
        if ln.startswith("import time:") and "|" in ln and "self" not in ln:
            _, cum, name = (x.strip() for x in ln[len("import time:") :].split("|"))
            rows.append((int(cum), name))
    top_imports = [f"{us / 1000:7.1f} ms  {name}" for us, name in sorted(rows, reverse=True)[:20]]
    return {
        "phases_ms": phases,
        "cumulative": buf.getvalue(),
        "tottime": tbuf.getvalue(),
        "imports_cumulative": top_imports,
    }


def _phases(lock: Path) -> dict[str, float]:
    """check_file's steps timed one by one (best of 3): read+parse, environments, what each
    installs, rules."""
    from envbuild.gate import Policy
    from envbuild.gate.check import _views, read_lockfile
    from envbuild.gate.context import Context
    from envbuild.gate.environments import Narrow, make_space
    from envbuild.gate.formats import parse
    from envbuild.gate.groups import group, judged_names
    from envbuild.gate.rules import FAMILIES

    best: dict[str, float] = {}
    for _ in range(3):
        got: dict[str, float] = {}
        t0 = time.perf_counter()
        text = read_lockfile(lock)
        t1 = time.perf_counter()
        tomllib.loads(text)
        got["tomllib.loads"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        parsed = parse(lock, text, "uv.lock")
        got["parse (uvlock, tomllib included)"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        names = judged_names(parsed, Policy())
        space = make_space(parsed, Narrow(default_python=Policy().python), names)
        got["environments (the grid)"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        reach = parsed.walk(space)
        views = _views(parsed, group(space, reach, names), reach, "torch")
        got[f"walk + group ({space.active.bit_count()} environments -> {len(views)} views)"] = (
            time.perf_counter() - t1
        )
        ctx = Context(str(lock), parsed, Policy(), views, offline=True)
        for family in FAMILIES:
            t1 = time.perf_counter()
            family.check(ctx)
            got[f"rule {family.__name__.rsplit('.', 1)[-1]}"] = time.perf_counter() - t1
        got["total"] = time.perf_counter() - t0 - got["tomllib.loads"]
        for k, v in got.items():
            best[k] = min(best.get(k, v), v)
    return {k: round(v * 1000, 1) for k, v in best.items()}


def _table(res: dict[str, Any]) -> str:
    s, r = res["seconds"], res["ratios"]
    lk = res["lock"]
    rows = [
        (
            f"lock: {lk['bytes'] / 1e6:.2f} MB, {lk['packages']} packages, {lk['environments']}"
            f" environments, torch {', '.join(lk['torches'])}"
        ),
        f"{'variant':36s} {'median':>9s} {'min':>9s}",
    ]
    names = {
        "cli": "envbuild check-lock --offline (CLI)",
        "tomllib_proc": "python -c tomllib.load (process)",
        "python_proc": "python -c pass (process)",
        "check_file": "check_file (in-process)",
        "tomllib": "tomllib.loads (in-process, stdlib)",
        "cli_fault": "CLI, planted flash-attn fault",
        "cli_imports": "python -c 'import <CLI modules>'",
        "cli_trivial": "CLI on a 1-line requirements file",
    }
    for k, label in names.items():
        rows.append(f"{label:36s} {s[k]['median'] * 1000:7.0f}ms {s[k]['min'] * 1000:7.0f}ms")
    rows.append(
        f"ratio CLI / tomllib process: {r['cli_over_tomllib_proc']:.2f}   "
        f"check_file / tomllib.loads: {r['check_file_over_tomllib']:.2f}"
    )
    rows.append(f"exit codes: healthy {res['exit']['cli']}, planted {res['exit']['cli_fault']}")
    rows.append(
        f"targets: CLI <= 0.5 s: {res['targets']['cli_median_le_0_5s']}; "
        f"CLI <= 1.5x tomllib: {res['targets']['cli_le_1_5x_tomllib_proc']}"
    )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=600)
    ap.add_argument(
        "--wheels",
        type=int,
        default=5,
        help="wheels of a binary package (n-2 to n+1; 1: pure only)",
    )
    ap.add_argument("--markers", type=int, default=400, help="distinct 20+-clause edge markers")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--stress",
        default="20000,20000:lean,100000,100000:lean",
        help="comma-separated package counts, N or N:lean ('' for none)",
    )
    ap.add_argument(
        "--profile", action="store_true", help="cProfile check_file and -X importtime the CLI"
    )
    ap.add_argument("--keep", type=Path, help="write the locks here (default: a temporary folder)")
    ap.add_argument("--write", type=Path, help="only write the lock to this file and exit")
    ap.add_argument("--fault", choices=sorted(FAULTS), help="with --write: plant this fault")
    ap.add_argument(
        "--shape", choices=SHAPES, default="plain", help="with --write: the conflict shape"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.write:
        args.write.write_text(
            generate(
                args.packages,
                wheels=args.wheels,
                markers=args.markers,
                fault=args.fault,
                shape=args.shape,
            )
        )
        return 0
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-gate-"))
    lock, fault_lock = folder / "healthy" / "uv.lock", folder / "planted" / "uv.lock"
    for p, fault in ((lock, None), (fault_lock, "flash-attn-torch29")):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(generate(args.packages, wheels=args.wheels, markers=args.markers, fault=fault))
    res: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "args": {
            "packages": args.packages,
            "wheels": args.wheels,
            "markers": args.markers,
            "rounds": args.rounds,
        },
    }
    res.update(measure(lock, fault_lock, args.rounds))
    print(_table(res))
    res["shapes"] = shapes(folder, args.packages, args.rounds)
    for sh in res["shapes"]:
        print(
            f"shape {sh['shape']:5s} {sh['bytes'] / 1e6:4.2f} MB: check_file median"
            f" {sh['seconds']['median'] * 1000:5.0f} ms, peak RSS {sh['maxrss_mb']:5.0f} MB,"
            f" {sh['environments']} environments in {sh['rows']} groups, ok={sh['ok']}; targets"
            f" {sh['targets']}"
        )
    res["targets"].update(
        {f"{sh['shape']}_{k}": v for sh in res["shapes"] for k, v in sh["targets"].items()}
    )
    sizes = [x.strip() for x in args.stress.split(",") if x.strip()]
    if sizes:
        res["stress"] = stress(folder, sizes)
        for s in res["stress"]:
            print(
                f"stress {s['packages']:>6d} packages ({s['style']}), {s['bytes'] / 1e6:5.1f} MB:"
                f" CLI {s['cli_seconds']:6.2f} s (tomllib process {s['tomllib_proc_seconds']:.2f}"
                f" s), exit {s['exit']}, traceback {s['traceback']}: {s['last_line'][-110:]}"
            )
    if args.profile or not all(res["targets"].values()):
        res["profile"] = profile(lock)
        print(
            "phases (ms): "
            + ", ".join(f"{k} {v:.0f}" for k, v in res["profile"]["phases_ms"].items())
        )
        print(res["profile"]["tottime"][:4000])
        print("\n".join(res["profile"]["imports_cumulative"]))
    if args.out:
        args.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if all(res["targets"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
