"""What a receipt says, gathered: the host (GPUs, driver, provenance: ``snapshot_host``), the
environment's software (``inventory``, by the venv's own interpreter), the environment variables
in force, and the redaction of secrets (credentials in URLs, values of variables named like
tokens, passwords or keys) applied to all of it before it is written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from envbuild.host.preflight import GPUInventoryJSON
from envbuild.index import net
from envbuild.index.metacache import cache_dir
from envbuild.layout import RUNTIME_BASELINE, UNSET_IN_BASELINE, Paths, overlay_env
from envbuild.proof.provenance import Provenance, capture
from envbuild.proof.receipt.schema import HardwareJSON, ReceiptEnvJSON, SoftwareJSON, _MemoryJSON
from envbuild.run import run
from envbuild.spec import StackSpec

_SECRET_KEY = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE_KEY|AUTH)", re.I
)
_ENV_PREFIXES = (
    "NCCL_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "NVIDIA_",
    "OMP_",
    "TRITON_",
    "HF_",
    "PIP_",
    "UV_",
)
INVENTORY_SCRIPT = Path(__file__).resolve().parents[1] / "inventory.py"


# ----------------------------------------------------------------------------- redaction


def redact_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in env.items():
        if value is None:
            out[key] = None
        elif _SECRET_KEY.search(key):
            out[key] = "***"
        else:
            out[key] = net.redact(value)
    return out


def redact_any(value: Any, key: str = "") -> Any:
    if isinstance(value, str):
        return "***" if key and _SECRET_KEY.search(key) else net.redact(value)
    if isinstance(value, Mapping):
        return {k: redact_any(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_any(v) for v in value]
    return value


# ----------------------------------------------------------------------------- collection


def inventory(python: Path, *, trust_record: bool = False) -> SoftwareJSON:
    """Installed distributions and torch versions of ``python``'s environment (no torch import).
    The files' hashes are remembered in envbuild's cache folder, by stat key: a first inventory
    reads every file (seconds for a CUDA torch), a later one of the same environment stats them.
    ``trust_record``: the receipt of the provision that just installed them takes each file's
    hash from its RECORD (the installers wrote it from hash-checked wheels; the guard read torch's
    and the protected set's files); ``receipt`` and ``verify`` read them from disk."""
    argv = [
        str(python),
        str(INVENTORY_SCRIPT),
        "--cache-dir",
        str(cache_dir() / "file-hashes"),
        *(["--trust-record"] if trust_record else []),
    ]
    try:
        res = run(argv, capture=True, timeout=300)
    except FileNotFoundError:
        return {"error": f"no interpreter at {python}"}
    if not res.ok:
        return {"error": f"inventory failed (exit {res.returncode}): {res.tail[-500:]}"}
    try:
        doc = json.loads((res.output or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "inventory printed no JSON"}
    if not isinstance(doc, dict):
        return {"error": "inventory printed no JSON object"}
    return cast("SoftwareJSON", doc)  # the script's own document (``proof/inventory.py``)


def hardware(gpu_facts: GPUInventoryJSON | None = None) -> HardwareJSON:
    from envbuild.host.preflight import gpu_inventory

    gpus = gpu_facts if gpu_facts is not None else gpu_inventory()
    return {**gpus, "cpu_count": os.cpu_count(), **_memory()}


def _memory() -> _MemoryJSON:
    """The host's memory (none where /proc/meminfo cannot be read)."""
    memory: _MemoryJSON = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory["memory_gb"] = round(int(line.split()[1]) / 1e6, 1)
    except OSError:
        pass
    return memory


def env_section(spec: StackSpec | None, paths: Paths, environ: Mapping[str, str]) -> ReceiptEnvJSON:
    overlay = overlay_env(spec, paths) if spec is not None else dict(RUNTIME_BASELINE)
    keys = sorted(
        {
            *RUNTIME_BASELINE,
            *UNSET_IN_BASELINE,
            "NCCL_MNNVL_ENABLE",
            "PYTORCH_CUDA_ALLOC_CONF",
            *(k for k in environ if k.startswith(_ENV_PREFIXES)),
        }
    )
    # the spec's from_env values are never written, whatever their names (only whether they are set)
    hidden = {ref.name for _, ref in spec.env_refs()} if spec is not None else set()
    in_force = {
        k: ("***" if environ.get(k) else environ.get(k)) if k in hidden else environ.get(k)
        for k in keys
    }
    return {
        "overlay": redact_env(overlay),
        "unset_by_overlay": list(UNSET_IN_BASELINE),
        "in_force": redact_env(in_force),
    }


@dataclass(frozen=True)
class HostSnapshot:
    """What a receipt says about the host, apart from the environment: GPUs and driver,
    provenance."""

    gpus: GPUInventoryJSON
    provenance: Provenance


def snapshot_host(
    spec: StackSpec | None = None,
    environ: Mapping[str, str] | None = None,
    provenance: Provenance | None = None,
) -> HostSnapshot:
    """``nvidia-smi`` (twice: query and topology), compilers, git: up to a second on a GPU host, and
    independent of what is installed, so a command can take it on a thread while it works.
    ``provenance``, when the caller captured it already, is kept."""
    from envbuild.host.preflight import gpu_inventory

    env = os.environ if environ is None else environ
    gpus = gpu_inventory()
    prov = provenance or capture(
        gpu_names=[g["name"] for g in gpus["gpus"]],
        profile=spec.name if spec else None,
        environ=env,
    )
    return HostSnapshot(gpus=gpus, provenance=prov)
