"""The NVIDIA driver as envbuild asks it: the one way to run ``nvidia-smi`` (``smi``), the one
reader of its ``--query-gpu ... --format=csv,noheader,nounits`` answers (``parse_query``), and the
GPUs this process may use (``visible_gpus``).

The GPU list comes from the driver's ``/proc/driver/nvidia/gpus`` (one folder per GPU, read in
microseconds, where ``nvidia-smi`` takes 0.1-1 s and opens every GPU), else from nvidia-smi, and is
narrowed by ``CUDA_VISIBLE_DEVICES`` as CUDA narrows it (indices or UUID prefixes, up to the first
entry it cannot use). Preflight, the receipt, smoke, the distributed step, the kernel warm-up and
the wheelhouse's arch list all ask here; the smoke workers, which run in the target venv without
envbuild, read the driver themselves.
"""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild.run import run

__all__ = [
    "GPU",
    "LIST_FIELDS",
    "PROC_GPUS",
    "SmiAnswer",
    "gpus_of",
    "narrow",
    "parse_query",
    "proc_gpus",
    "query",
    "smi",
    "visible_gpus",
]

PROC_GPUS = "/proc/driver/nvidia/gpus"
PROC_GPUS_ENV = "ENVBUILD_SMOKE_PROC_GPUS"  # another folder in its place: the tests' ("-": none)
LIST_FIELDS = ("index", "uuid", "pci.bus_id", "name")
NOT_FOUND = "nvidia-smi not found (no NVIDIA driver on this host)"


@dataclass(frozen=True)
class SmiAnswer:
    """What one ``nvidia-smi`` run said: its output when it succeeded, else why not."""

    output: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.output is not None


def smi(args: Sequence[str], env: Mapping[str, str] | None = None) -> SmiAnswer:
    """``nvidia-smi ARGS`` (found on ``env``'s PATH, run with ``env``; 30 s at most): its output
    when it exits 0 with something to say, else the reason in words."""
    path = (os.environ if env is None else env).get("PATH")
    if shutil.which("nvidia-smi", path=path) is None:
        return SmiAnswer(None, NOT_FOUND)
    try:
        res = run(["nvidia-smi", *args], capture=True, separate_stderr=True, timeout=30, env=env)
    except (FileNotFoundError, PermissionError):
        return SmiAnswer(None, NOT_FOUND)
    text = res.output or ""
    if res.ok and text.strip():
        return SmiAnswer(text)
    said = (text.strip() or (res.stderr or "").strip()).splitlines()
    if res.timed_out:
        return SmiAnswer(None, f"nvidia-smi did not answer within {res.timeout:g} s")
    return SmiAnswer(None, "nvidia-smi failed: " + (said[0] if said else "no output"))


def query(fields: Sequence[str], env: Mapping[str, str] | None = None) -> SmiAnswer:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``, which ``parse_query``
    reads."""
    return smi([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], env)


def parse_query(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a ``--query-gpu=FIELDS --format=csv,noheader,nounits`` answer, one mapping of
    field to value per GPU; a line of another width (a driver's message) is not a row, nor one
    whose ``index`` is not a number."""
    rows = []
    for cells in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(cells) != len(fields):
            continue
        row = dict(zip(fields, (c.strip() for c in cells), strict=True))
        if "index" in row and not row["index"].isdigit():
            continue
        rows.append(row)
    return rows


@dataclass(frozen=True)
class GPU:
    """One GPU this process may use (``fake``: the CPU standing in for it, in smoke's tests)."""

    index: int  # nvidia-smi's index
    uuid: str
    bus_id: str  # PCI bus id
    name: str
    fake: bool = False

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

    def describe(self) -> str:
        return f"GPU {self.index} ({self.name}, {self.uuid}, PCI {self.bus_id})"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "bus_id": self.bus_id,
            "name": self.name,
            **({"fake": True} if self.fake else {}),
        }


def gpus_of(text: str) -> list[GPU]:
    """The GPUs of a ``--query-gpu=index,uuid,pci.bus_id,name`` answer (``LIST_FIELDS``)."""
    return [
        GPU(int(r["index"]), r["uuid"], r["pci.bus_id"], r["name"])
        for r in parse_query(text, LIST_FIELDS)
    ]


def visible_gpus(env: Mapping[str, str] | None = None) -> list[GPU]:
    """The GPUs this process may use (``proc_gpus``, else nvidia-smi's), narrowed by
    ``CUDA_VISIBLE_DEVICES``; [] without a GPU."""
    env = os.environ if env is None else env
    listed = proc_gpus(Path(env.get(PROC_GPUS_ENV) or PROC_GPUS))
    if listed is None:
        answer = query(LIST_FIELDS, env)
        listed = gpus_of(answer.output) if answer.output else []
    return narrow(listed, env.get("CUDA_VISIBLE_DEVICES"))


def proc_gpus(folder: Path, dev: Path = Path("/dev")) -> list[GPU] | None:
    """The GPUs the NVIDIA driver lists under ``/proc/driver/nvidia/gpus`` (one folder per GPU,
    its ``information``: model, UUID, bus location, device minor), in PCI bus order as nvidia-smi
    numbers them, those whose ``/dev/nvidia<minor>`` this process may open (a container's own);
    None where the folder is not there or a GPU's file lacks one of these (nvidia-smi then)."""
    try:
        entries = sorted(p for p in folder.iterdir() if (p / "information").is_file())
    except OSError:
        return None
    found: list[tuple[str, str, str]] = []
    for entry in entries:
        try:
            text = (entry / "information").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        info = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines())}
        uuid, bus, model = info.get("GPU UUID", ""), info.get("Bus Location", ""), info.get("Model")
        minor = info.get("Device Minor", "")
        if not uuid.startswith("GPU-") or not bus or not model or not minor.isdigit():
            return None
        if info.get("GPU Excluded", "No").lower().startswith("yes"):
            continue
        if os.access(dev / f"nvidia{minor}", os.R_OK | os.W_OK):
            found.append((_bus_key(bus), uuid, model))
    if not entries:
        return None
    found.sort()
    return [GPU(i, uuid, bus, model) for i, (bus, uuid, model) in enumerate(found)]


def _bus_key(bus: str) -> str:
    """A PCI bus id as nvidia-smi writes it: an 8-digit domain (``0000:00:06.0`` ->
    ``00000000:00:06.0``), upper-case hex."""
    domain, _, rest = bus.partition(":")
    return f"{domain.zfill(8)}:{rest}".upper() if rest else bus.upper()


def narrow(gpus: Sequence[GPU], wanted: str | None) -> list[GPU]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves CUDA (None: all), in its order."""
    if wanted is None:
        return list(gpus)
    out: list[GPU] = []
    for item in (w.strip() for w in wanted.split(",")):
        if not item or item == "-1":
            break  # CUDA stops at the first entry it cannot use
        match = [
            g
            for g in gpus
            if (item.isdigit() and g.index == int(item))
            or (not item.isdigit() and g.uuid.startswith(item))
        ]
        if not match:
            break
        out += [g for g in match if g not in out]
    return out
