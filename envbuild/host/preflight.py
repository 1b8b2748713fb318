"""Preflight: can this host run the stack (driver, GPUs, topology, NUMA, gcc, CUDA toolkit, Python,
disk, environment, index reachability)? Every check is pass / warn / fail / skip with what was
measured and what was expected; the verdict is the worst of them (fail -> exit 3).

The facts are gathered once (``HostFacts.gather``: nvidia-smi, /proc, gcc, nvcc, disks, the
environment) and the checks are pure functions of them, so the parsers are tested on captured
outputs (``tests/data``). No GPU (no ``nvidia-smi``) makes the GPU checks ``skip`` with the
reason, except that a spec which asks for GPUs (``[host] gpu_count``) fails the GPU count.

The NCCL / allocator baseline (``layout.RUNTIME_BASELINE``) is checked on the environment a
training process will get: the current environment with the venv's overlay applied (the overlay
file provision wrote, or, before provisioning, the overlay it would write). A shell that disagrees
with the overlay is a warning: activating the venv fixes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict
from urllib.parse import urlsplit

from packaging.version import InvalidVersion, Version

from envbuild import events, nvidia
from envbuild.errors import ConfigError
from envbuild.index import net
from envbuild.layout import RUNTIME_BASELINE, UNSET_IN_BASELINE, Paths, overlay_env
from envbuild.run import run
from envbuild.spec import StackSpec

Verdict = Literal["pass", "warn", "fail", "skip"]
CHECK_GROUPS: tuple[str, ...] = (
    "driver",
    "gpus",
    "topology",
    "numa",
    "gcc",
    "cuda-toolkit",
    "python",
    "disk",
    "env",
    "index",
)
_ORDER = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
GPU_FIELDS = ("index", "name", "driver_version", "memory.total", "pci.bus_id")


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    measured: str
    expected: str
    detail: str = ""


class CheckJSON(TypedDict):
    """One preflight check."""

    name: str  # the check (`driver`, `disk`, ...)
    verdict: Verdict  # pass, warn, fail or skip
    measured: str  # what the host has
    expected: str  # what the stack needs
    detail: str  # a note: what to do about it


class PreflightReportJSON(TypedDict):
    """The host's report (``PreflightReport.to_dict``)."""

    verdict: Verdict  # the worst verdict of the checks: pass, warn or fail
    checks: list[CheckJSON]  # every check run, in order


@dataclass(frozen=True)
class PreflightReport:
    checks: tuple[Check, ...]

    @property
    def verdict(self) -> Verdict:
        worst = max((_ORDER[c.verdict] for c in self.checks), default=0)
        verdicts: tuple[Verdict, ...] = ("pass", "warn", "fail")
        return verdicts[worst]

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "fail"]

    def to_dict(self) -> PreflightReportJSON:
        return {
            "verdict": self.verdict,
            "checks": [
                {
                    "name": c.name,
                    "verdict": c.verdict,
                    "measured": c.measured,
                    "expected": c.expected,
                    "detail": c.detail,
                }
                for c in self.checks
            ],
        }


class GPUJSON(TypedDict):
    """One GPU, as `nvidia-smi` lists it."""

    index: int  # its index
    name: str  # its name (`NVIDIA H200`)
    driver: str  # the driver version
    memory_mib: int | None  # its memory
    bus_id: str  # its PCI bus id


class GPUInventoryJSON(TypedDict):
    """Driver and GPUs (``gpu_inventory``): what a receipt records of the host's hardware."""

    driver: str | None  # the NVIDIA driver version (null: no NVIDIA GPU)
    gpus: list[GPUJSON]  # the GPUs, in `nvidia-smi`'s order
    # the kinds of GPU-to-GPU links `nvidia-smi topo -m` shows (`NV18`, `SYS`)
    topology: list[str] | None
    numa_balancing: str | None  # /proc/sys/kernel/numa_balancing
    gcc: str | None  # gcc's version
    nvcc: str | None  # the CUDA toolkit's release (`nvcc --version`)


@dataclass(frozen=True)
class GPUFacts:
    """One GPU as preflight's query lists it (``GPU_FIELDS``)."""

    index: int
    name: str
    driver: str
    memory_mib: int | None
    bus_id: str


@dataclass(frozen=True)
class HostFacts:
    """Raw observations; ``None`` means "not available" (the command or file is missing)."""

    gpu_query: str | None = None  # nvidia-smi --query-gpu=... --format=csv,noheader,nounits
    gpu_error: str | None = None  # why nvidia-smi gave nothing ("not found", its error text)
    topo: str | None = None  # nvidia-smi topo -m
    numa_balancing: str | None = None  # /proc/sys/kernel/numa_balancing
    gcc: str | None = None  # gcc -dumpfullversion
    nvcc: str | None = None  # nvcc --version
    environ: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def gather(cls, environ: Mapping[str, str] | None = None) -> HostFacts:
        env = dict(os.environ if environ is None else environ)
        answer = nvidia.query(GPU_FIELDS, env)
        topo = nvidia.smi(["topo", "-m"], env).output if answer.ok else None
        numa = None
        with contextlib.suppress(OSError):
            numa = Path("/proc/sys/kernel/numa_balancing").read_text().strip()
        gcc = _capture(["gcc", "-dumpfullversion", "-dumpversion"])
        nvcc = _capture(["nvcc", "--version"])
        return cls(
            gpu_query=answer.output,
            gpu_error=answer.error,
            topo=topo,
            numa_balancing=numa,
            gcc=gcc[1].strip() if gcc and gcc[0] == 0 else None,
            nvcc=nvcc[1] if nvcc and nvcc[0] == 0 else None,
            environ=env,
        )


def _capture(argv: list[str]) -> tuple[int, str] | None:
    try:
        res = run(argv, capture=True, timeout=30)
    except (FileNotFoundError, PermissionError):
        return None
    return res.returncode, res.output or ""


# ----------------------------------------------------------------------------- parsers


def parse_gpus(text: str) -> list[GPUFacts]:
    """The GPUs of an ``nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id
    --format=csv,noheader,nounits`` answer (``nvidia.parse_query`` reads it)."""
    return [
        GPUFacts(
            int(row["index"]),
            row["name"],
            row["driver_version"],
            int(float(row["memory.total"]))
            if re.fullmatch(r"[0-9.]+", row["memory.total"])
            else None,
            row["pci.bus_id"],
        )
        for row in nvidia.parse_query(text, GPU_FIELDS)
    ]


@dataclass(frozen=True)
class Topology:
    gpus: tuple[str, ...]  # "GPU0", "GPU1", ...
    cells: Mapping[tuple[str, str], str]  # (row, column) -> "NV18", "SYS", "X", ...

    def pairs(self) -> list[tuple[str, str, str]]:
        out = []
        for i, a in enumerate(self.gpus):
            for b in self.gpus[i + 1 :]:
                out.append((a, b, self.cells.get((a, b), "?")))
        return out


def parse_topo(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m``: the GPU x GPU block of its matrix (NIC rows/columns
    ignored)."""
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.splitlines()]
    header: list[str] | None = None
    gpus: list[str] = []
    cells: dict[tuple[str, str], str] = {}
    for line in lines:
        if not line.strip():
            if header and gpus:
                break
            continue
        if line.lstrip().startswith("Legend"):
            break
        parts = [p.strip() for p in re.split(r"\t+| {2,}", line.strip())]
        if header is None:
            if parts and parts[0].startswith("GPU0"):
                header = parts
            continue
        if re.fullmatch(r"GPU\d+", parts[0]):
            row = parts[0]
            gpus.append(row)
            for col, value in zip(header, parts[1:], strict=False):
                if re.fullmatch(r"GPU\d+", col):
                    cells[(row, col)] = value
    return Topology(tuple(gpus), cells)


def _version(text: str | None) -> Version | None:
    if not text:
        return None
    m = re.search(r"\d+(\.\d+)*", text)
    try:
        return Version(m.group(0)) if m else None
    except InvalidVersion:
        return None


def nvcc_release(text: str | None) -> str | None:
    m = re.search(r"release (\d+\.\d+)", text or "")
    return m.group(1) if m else None


# ----------------------------------------------------------------------------- checks


def check_driver(spec: StackSpec, facts: HostFacts) -> list[Check]:
    want = spec.host.driver_min
    expected = f">= {want}" if want else "any"
    if facts.gpu_query is None:
        return [Check("driver", "skip", "none", expected, facts.gpu_error or "no GPUs")]
    gpus = parse_gpus(facts.gpu_query)
    drivers = sorted({g.driver for g in gpus})
    measured = ", ".join(drivers) or "unknown"
    if want and any((_version(d) or Version("0")) < Version(want) for d in drivers):
        return [
            Check(
                "driver",
                "fail",
                measured,
                expected,
                "upgrade the NVIDIA driver; the stack's CUDA needs it",
            )
        ]
    return [Check("driver", "pass", measured, expected)]


def check_gpus(spec: StackSpec, facts: HostFacts) -> list[Check]:
    want_n, want_name = spec.host.gpu_count, spec.host.gpu_name
    expected = f"{want_n or '>= 1'} x {want_name or 'any NVIDIA GPU'}"
    if facts.gpu_query is None:
        if want_n:
            return [
                Check(
                    "gpus",
                    "fail",
                    "0",
                    expected,
                    f"{facts.gpu_error}; the spec asks for {want_n} GPU(s)",
                )
            ]
        return [Check("gpus", "skip", "0", expected, facts.gpu_error or "no GPUs")]
    gpus = parse_gpus(facts.gpu_query)
    names = sorted({g.name for g in gpus})
    measured = f"{len(gpus)} x {', '.join(names)}"
    if want_name and not all(want_name.lower() in g.name.lower() for g in gpus):
        return [Check("gpus", "fail", measured, expected, f"not every GPU is a {want_name}")]
    if want_n and len(gpus) < want_n:
        return [Check("gpus", "fail", measured, expected, "fewer GPUs than the spec asks for")]
    if want_n and len(gpus) > want_n:
        return [Check("gpus", "warn", measured, expected, "more GPUs than the spec asks for")]
    return [Check("gpus", "pass", measured, expected)]


def check_topology(spec: StackSpec, facts: HostFacts) -> list[Check]:
    expected = "NV# between every GPU pair" + (" (NV18 on H100/H200 SXM)" if _sxm(spec) else "")
    if facts.gpu_query is None:
        return [Check("topology", "skip", "none", expected, facts.gpu_error or "no GPUs")]
    if facts.topo is None:
        return [Check("topology", "warn", "unknown", expected, "nvidia-smi topo -m gave no matrix")]
    topo = parse_topo(facts.topo)
    if len(topo.gpus) < 2:
        return [
            Check(
                "topology",
                "skip",
                f"{len(topo.gpus)} GPU",
                expected,
                "one GPU: no GPU pairs to check",
            )
        ]
    pairs = topo.pairs()
    bad = [(a, b, v) for a, b, v in pairs if not re.fullmatch(r"NV\d+", v)]
    kinds = sorted({v for _, _, v in pairs})
    if bad:
        shown = ", ".join(f"{a}-{b} {v}" for a, b, v in bad[:6]) + (
            f" and {len(bad) - 6} more" if len(bad) > 6 else ""
        )
        return [
            Check(
                "topology",
                "fail",
                f"{len(bad)} of {len(pairs)} pairs without NVLink",
                expected,
                f"{shown}: PCIe/CPU fallback ({'/'.join(sorted({v for *_, v in bad}))}); fix the "
                "topology before tuning anything (check NVLink/NVSwitch, fabric manager)",
            )
        ]
    measured = f"all {len(pairs)} pairs {'/'.join(kinds)}"
    if _sxm(spec) and kinds != ["NV18"]:
        return [
            Check(
                "topology",
                "warn",
                measured,
                expected,
                "NVLink, but not the NV18 an HGX H100/H200 shows",
            )
        ]
    return [Check("topology", "pass", measured, expected)]


def _sxm(spec: StackSpec) -> bool:
    return any(k in (spec.host.gpu_name or "") for k in ("H100", "H200"))


def check_numa(spec: StackSpec, facts: HostFacts) -> list[Check]:
    if facts.numa_balancing is None:
        return [
            Check(
                "numa",
                "skip",
                "n/a",
                "0",
                "/proc/sys/kernel/numa_balancing is absent (kernel without it)",
            )
        ]
    if facts.numa_balancing.strip() == "0":
        return [Check("numa", "pass", "0", "0")]
    return [
        Check(
            "numa",
            "warn",
            facts.numa_balancing,
            "0",
            "automatic NUMA balancing migrates pages under running GPU jobs; "
            "turn it off: sudo sysctl -w kernel.numa_balancing=0",
        )
    ]


def check_gcc(spec: StackSpec, facts: HostFacts) -> list[Check]:
    want = spec.host.gcc
    expected = f">= {want}" if want else "present (torch.compile on CPU, extension builds)"
    if facts.gcc is None:
        return [
            Check(
                "gcc",
                "fail" if want else "warn",
                "missing",
                expected,
                "install gcc/g++ (build-essential)",
            )
        ]
    have = _version(facts.gcc)
    if want and (have is None or have < Version(want)):
        return [Check("gcc", "fail", facts.gcc, expected, "gcc is older than the spec's minimum")]
    return [Check("gcc", "pass", facts.gcc, expected)]


def check_cuda_toolkit(spec: StackSpec, facts: HostFacts) -> list[Check]:
    want = spec.host.cuda_toolkit
    expected = f"{want}.x or a newer {want.split('.')[0]}.x" if want else "any (not required)"
    have = nvcc_release(facts.nvcc)
    if have is None:
        return [
            Check(
                "cuda-toolkit",
                "fail" if want else "skip",
                "missing",
                expected,
                "nvcc not found: CUDA extensions cannot be built here",
            )
        ]
    if want:
        h, w = Version(have), Version(want)
        if h.major != w.major:
            return [
                Check(
                    "cuda-toolkit",
                    "fail",
                    have,
                    expected,
                    "a different CUDA major than the stack's torch",
                )
            ]
        if h < w:
            return [Check("cuda-toolkit", "warn", have, expected, "older than the stack's CUDA")]
    return [Check("cuda-toolkit", "pass", have, expected)]


def check_python(spec: StackSpec, paths: Paths, python: str | None = None) -> list[Check]:
    """The interpreter the stack runs on: the venv's when it exists, else the one provision would
    make it with (``--python`` or the search), refused as provision refuses it (``unfit_reason``).
    """
    from envbuild.errors import PreflightError
    from envbuild.installer.python import find_interpreter, probe_python, unfit_reason

    expected = f"a final CPython {spec.python} release"
    if paths.python.exists():
        info = probe_python(paths.python)
        if info is None:
            return [
                Check(
                    "python",
                    "fail",
                    f"{paths.python} does not run",
                    expected,
                    "the venv's interpreter is broken: move the venv away and provision again",
                )
            ]
        reason = unfit_reason(info, spec.abi.package)
        return [
            Check(
                "python",
                "fail" if reason else "pass",
                f"{info.release} ({paths.python}, the venv's)",
                expected,
                f"Python {info.release}, {reason}" if reason else "",
            )
        ]
    try:
        info = find_interpreter(spec.python, python, spec.abi.package)
    except PreflightError as exc:
        return [
            Check(
                "python",
                "fail",
                "no usable interpreter",
                expected,
                exc.message + (f" {exc.hint}" if exc.hint else ""),
            )
        ]
    return [Check("python", "pass", f"{info.release} ({info.executable})", expected)]


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(spec: StackSpec, paths: Paths) -> list[Check]:
    out = []
    root_min = spec.host.root_min_free_gb
    data_min = spec.host.data_min_free_gb or spec.layout.min_free_gb
    root_free = shutil.disk_usage("/").free / 1e9
    out.append(
        _disk_check(
            "disk:/",
            root_free,
            root_min,
            "the root disk fills with pip/uv caches and temp files; move caches to the data root",
        )
    )
    data = _existing(paths.root)
    data_free = shutil.disk_usage(data).free / 1e9
    out.append(
        _disk_check(
            f"disk:{paths.root}",
            data_free,
            data_min,
            "free space on the data root or pick another --root",
        )
    )
    if spec.layout.separate_root_fs and os.stat(data).st_dev == os.stat("/").st_dev:
        out.append(
            Check(
                "disk:separate",
                "warn",
                f"{paths.root} on /",
                "a separate filesystem",
                "the data root is on the root filesystem; mount the data volume first",
            )
        )
    return out


def _disk_check(name: str, free: float, minimum: float | None, hint: str) -> Check:
    expected = f">= {minimum:g} GB free" if minimum else "any"
    measured = f"{free:.1f} GB free"
    if minimum and free < minimum:
        return Check(name, "fail", measured, expected, hint)
    return Check(name, "pass", measured, expected)


BASELINE_RULES: tuple[tuple[str, str, Callable[[str | None], bool]], ...] = (
    ("CUDA_DEVICE_MAX_CONNECTIONS", "unset", lambda v: v is None),
    *((k, v, (lambda want: lambda got: got == want)(v)) for k, v in RUNTIME_BASELINE.items()),
    ("NCCL_MNNVL_ENABLE", "unset, 0 or 2 (not 1)", lambda v: v != "1"),
    ("NCCL_P2P_DISABLE", "unset or 0", lambda v: v in (None, "0")),
)


def read_overlay(path: Path) -> tuple[dict[str, str], set[str]] | None:
    """The ``export K=V`` / ``unset K`` lines of an overlay file (None when it does not exist)."""
    if not path.is_file():
        return None
    sets: dict[str, str] = {}
    unsets: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, _, value = words[1].partition("=")
            sets[key] = value
            unsets.discard(key)
        elif len(words) >= 2 and words[0] == "unset":
            for key in words[1:]:
                unsets.add(key)
                sets.pop(key, None)
    return sets, unsets


def effective_env(
    spec: StackSpec, paths: Paths, environ: Mapping[str, str]
) -> tuple[dict[str, str], str]:
    """The environment after the venv's overlay is applied, and where the overlay came from."""
    found = read_overlay(paths.overlay)
    if found is None:
        sets, unsets, source = (
            overlay_env(spec, paths),
            set(UNSET_IN_BASELINE),
            "the overlay provision will write",
        )
    else:
        (sets, unsets), source = found, str(paths.overlay)
    env = {k: v for k, v in environ.items() if k not in unsets}
    env.update(sets)
    return env, source


def check_env(spec: StackSpec, paths: Paths, facts: HostFacts) -> list[Check]:
    env, source = effective_env(spec, paths, facts.environ)
    out = []
    for key, expected, ok in BASELINE_RULES:
        value, shell = env.get(key), facts.environ.get(key)
        measured = "unset" if value is None else value
        if not ok(value):
            out.append(
                Check(
                    f"env:{key}", "fail", measured, expected, f"with {source}; fix the spec's [env]"
                )
            )
        elif shell is not None and not ok(shell):
            out.append(
                Check(
                    f"env:{key}",
                    "warn",
                    measured,
                    expected,
                    f"this shell has {key}={shell or '(unset)'}; activate the venv (its overlay"
                    " fixes it)",
                )
            )
        else:
            out.append(Check(f"env:{key}", "pass", measured, expected))
    alias = env.get("PYTORCH_CUDA_ALLOC_CONF")
    if alias is not None and alias != env.get("PYTORCH_ALLOC_CONF"):
        out.append(
            Check(
                "env:PYTORCH_CUDA_ALLOC_CONF",
                "warn",
                alias,
                "unset or equal to PYTORCH_ALLOC_CONF",
                "the deprecated alias disagrees with PYTORCH_ALLOC_CONF",
            )
        )
    return out


def index_locations(spec: StackSpec) -> list[str]:
    seen: list[str] = []
    for step in spec.steps:
        for loc in (step.index_url, *step.extra_index_urls, *step.find_links):
            if loc and loc not in seen:
                seen.append(loc)
    return seen


def check_index(spec: StackSpec, timeout: float = 3.0) -> list[Check]:
    """Probe every source of the steps (``net.probe``: retried within its deadline; ``timeout`` is
    the first attempt's, and a longer one stretches the deadline). An index is asked for the page
    of the first project of a step that reads it, not for its root (PyPI's lists every project)."""
    locations = index_locations(spec)
    if not locations:
        return [
            Check("index", "skip", "n/a", "reachable", "the steps use pip's configured sources")
        ]
    pages: dict[str, str] = {}
    for step in spec.steps:
        for loc in (step.index_url, *step.extra_index_urls):
            if loc and step.packages:
                pages.setdefault(loc, step.names[0])
    with ThreadPoolExecutor(max_workers=min(8, len(locations))) as pool:
        probes = list(
            pool.map(lambda loc: net.probe(loc, timeout, project=pages.get(loc)), locations)
        )
    locked_only = _read_by_locked_steps_only(spec)
    out = []
    for loc, p in zip(locations, probes, strict=True):
        if p.ok:
            out.append(Check(f"index:{p.location}", "pass", p.detail, "reachable"))
        elif loc in locked_only:
            # provision takes a locked step's files by sha256 from any configured source that serves
            # them (envbuild.provision.sources): this host's silence alone stops nothing
            out.append(
                Check(
                    f"index:{p.location}",
                    "warn",
                    p.detail,
                    "reachable",
                    "read by locked steps only: provision takes their files by sha256 from pip's "
                    "configured sources or a wheelhouse when they serve them, else stops before "
                    "anything is made (exit 3)",
                )
            )
        else:
            out.append(
                Check(f"index:{p.location}", "fail", p.detail, "reachable", _unreachable(spec, loc))
            )
    return out


def _unreachable(spec: StackSpec, loc: str) -> str:
    """The advice for a source that does not answer: a local folder is made or its path fixed; a
    remote one goes through the network, a mirror (the variable the step took it from) or a
    wheelhouse."""
    names = [
        v
        for s in spec.steps
        if loc in (s.index_url, *s.extra_index_urls, *s.find_links)
        for v in s.source_vars
    ]
    via = f" (it comes from ${{{names[0]}}}: set {names[0]} to another)" if names else ""
    if urlsplit(loc).scheme in ("", "file"):
        return (
            f"a local folder: make it (a wheelhouse: `envbuild wheelhouse mirror --out DIR`) or"
            f" correct the path{via}"
        )
    mirror = f"point {names[0]} at a mirror" if names else "use a mirror in the step's index_url"
    return f"unreachable: fix the network/proxy, {mirror}, or provision --offline from a wheelhouse"


def _read_by_locked_steps_only(spec: StackSpec) -> set[str]:
    """The sources that only steps with a lock entry read (their files are pinned by sha256)."""
    from envbuild.stacklock.model import lock_dir, read_stack_lock

    lock = read_stack_lock(lock_dir(spec))
    locked: set[str] = set()
    unlocked: set[str] = set()
    for step in spec.steps:
        where = locked if lock is not None and lock.step(step.name) is not None else unlocked
        where.update(
            loc for loc in (step.index_url, *step.extra_index_urls, *step.find_links) if loc
        )
    return locked - unlocked


def run_preflight(
    spec: StackSpec,
    paths: Paths,
    *,
    checks: Iterable[str] | None = None,
    facts: HostFacts | None = None,
    index_timeout: float = 3.0,
    python: str | None = None,
) -> PreflightReport:
    """Run the named check groups (default: all of ``CHECK_GROUPS``) and return the report."""
    wanted = list(checks) if checks is not None else list(CHECK_GROUPS)
    unknown = [c for c in wanted if c not in CHECK_GROUPS]
    if unknown:
        raise ConfigError(
            f"unknown preflight check(s): {', '.join(unknown)}; known: {', '.join(CHECK_GROUPS)}"
        )
    facts = facts or HostFacts.gather()
    runners: dict[str, Callable[[], list[Check]]] = {
        "driver": lambda: check_driver(spec, facts),
        "gpus": lambda: check_gpus(spec, facts),
        "topology": lambda: check_topology(spec, facts),
        "numa": lambda: check_numa(spec, facts),
        "gcc": lambda: check_gcc(spec, facts),
        "cuda-toolkit": lambda: check_cuda_toolkit(spec, facts),
        "python": lambda: check_python(spec, paths, python),
        "disk": lambda: check_disk(spec, paths),
        "env": lambda: check_env(spec, paths, facts),
        "index": lambda: check_index(spec, index_timeout),
    }
    out: list[Check] = []
    for group in CHECK_GROUPS:
        if group in wanted:
            for check in runners[group]():
                events.emit("debug", f"preflight {check.name}: {check.verdict} ({check.measured})")
                out.append(check)
    return PreflightReport(tuple(out))


def gpu_inventory(facts: HostFacts | None = None) -> GPUInventoryJSON:
    """Driver and GPUs for a receipt (empty lists on a host without NVIDIA GPUs)."""
    facts = facts or HostFacts.gather()
    gpus = parse_gpus(facts.gpu_query) if facts.gpu_query else []
    return {
        "driver": gpus[0].driver if gpus else None,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "driver": g.driver,
                "memory_mib": g.memory_mib,
                "bus_id": g.bus_id,
            }
            for g in gpus
        ],
        "topology": sorted({v for *_, v in parse_topo(facts.topo).pairs()}) if facts.topo else None,
        "numa_balancing": facts.numa_balancing,
        "gcc": facts.gcc,
        "nvcc": nvcc_release(facts.nvcc),
    }
