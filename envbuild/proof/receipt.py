"""Receipts: one versioned JSON record per run (provision, smoke, dist-step, verify), and diffs.

A receipt holds provenance (``envbuild.provenance``), the three names, the hardware (driver,
GPUs, topology), the software (every distribution with version and RECORD sha256, torch /
CUDA / cuDNN / NCCL versions; collected by the venv's own interpreter with a small script that
imports neither envbuild nor torch), the environment overlay and the baseline values in force,
and the command's payload (step timings, check results, peak memory). Secrets are redacted
(credentials in URLs, values of variables named like tokens/passwords/keys). Written
atomically under ``<root>/receipts``.

``diff_receipts`` compares what must not drift between hosts or runs: packages (added, removed,
version, files), torch versions, Python, environment, hardware, and the image the run came
from (section ``image``: ``backend.image``, see ``envbuild.proof.backend``). Where it ran (section
``run``: task, job, pod, host, boot), provenance and payload differences are shown as
information, never as drift. Receipts written before the ``backend`` section still load and
diff (schema ``envbuild.receipt/1``: the section is an addition readers ignore, so the schema
name stays and older envbuilds keep reading newer receipts).

A distribution's files are compared by what was installed, not where: ``content_sha256`` (see
``envbuild.proof.inventory``) leaves out or normalises what depends on where and how it was
installed (console scripts' shebangs, the baseline stamp, the installer's ``direct_url.json`` and
``uv_cache.json``, bytecode) and reads the files on disk, so two
provisions of one stack at two roots, or a host and an image built from the same lock, compare
equal, and a changed byte in one of torch's own files is drift naming the file. Receipts written
before it fall back to ``files_sha256``, then to RECORD's sha256.

A verification that finds nothing new is a line, not a receipt: a provision that ran no step, or
a ``verify``, that passed and whose receipt ``diff_receipts`` finds no drift in against the
newest provision or verify receipt of the data root (same spec, software, environment, hardware
and image) and that ran where it did (same host, boot, container: no ``run`` difference) is
appended to ``<root>/receipts/verified.jsonl`` (when, what, its payload, the receipt it confirms
and the information-only differences, such as another repository revision), and that receipt's
path is returned. ``receipt show`` and ``receipt
list`` say when a receipt was last confirmed.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

from envbuild import events
from envbuild._io import atomic_write_json, sha256_bytes
from envbuild.errors import ConfigError
from envbuild.host.preflight import GPUInventoryJSON
from envbuild.index import net
from envbuild.index.metacache import cache_dir
from envbuild.layout import RUNTIME_BASELINE, UNSET_IN_BASELINE, Paths, overlay_env
from envbuild.proof.backend import Backend, BackendJSON, detect
from envbuild.proof.diststep.launch import WorkerResult
from envbuild.proof.provenance import Provenance, ProvenanceJSON, capture
from envbuild.run import run
from envbuild.spec import StackSpec

SCHEMA: Literal["envbuild.receipt/1"] = "envbuild.receipt/1"
KINDS = ("provision", "smoke", "dist-step", "verify", "preflight")
_SECRET_KEY = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE_KEY|AUTH)", re.I)
_ENV_PREFIXES = ("NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "NVIDIA_", "OMP_", "TRITON_", "HF_", "PIP_", "UV_")
INVENTORY_SCRIPT = Path(__file__).resolve().parent / "inventory.py"

ReceiptKind = Literal["provision", "smoke", "dist-step", "verify", "preflight"]  # KINDS


# ----------------------------------------------------------------------------- the document
# What a receipt holds, as this envbuild writes it. Its readers (``load_receipt``, ``diff_receipts``,
# ``summary``) take any mapping and read with ``.get``: a receipt written before a section was
# added (``backend``) still loads, and ``_check_shape`` holds a file to the types they read.


class _CPUJSON(GPUInventoryJSON):
    cpu_count: int | None  # the CPUs (`os.cpu_count()`)


class _MemoryJSON(TypedDict, total=False):
    memory_gb: float  # its memory, GB (from /proc/meminfo, where it can be read)


class HardwareJSON(_CPUJSON, _MemoryJSON):
    """The host's hardware (``hardware``)."""


class ReceiptSpecJSON(TypedDict):
    """The stack spec the run was for."""

    name: str  # the stack's name
    path: str  # its spec file
    digest: str  # the spec's digest


class ReceiptEnvJSON(TypedDict):
    """The environment: the overlay envbuild sets and the variables in force (secrets redacted)."""

    overlay: dict[str, str | None]  # the venv's overlay: the runtime baseline and the data root's caches
    unset_by_overlay: list[str]  # the variables the overlay unsets
    in_force: dict[str, str | None]  # the variables that matter to the run as they were (null: unset)


class ProvisionStepJSON(TypedDict):
    """One step of a provision, as its state file recorded it."""

    name: str  # the step
    status: str  # pending, running, ok or failed
    seconds: float | None  # how long it installed
    guard_seconds: float | None  # how long the ABI guard after it took
    started: str | None  # when it started (local time, ISO 8601)
    ended: str | None  # when it ended


class ImportCheckJSON(TypedDict):
    """How the final `import torch` was judged."""

    cached: bool  # true: the last verdict was reused (no distribution, interpreter or overlay changed)


class WarmupJSON(TypedDict):
    """The import warm-up: torch's bytecode written in the background (``provision/warmup.py``)."""

    module: str  # the module it warms (torch)
    mode: Literal["compile", "import"]  # compile the files the last import loaded, or import it
    files: int  # the files compiled (mode compile)
    seconds: float | None  # how long it ran, once stopped
    finished_before_check: bool | None  # whether it ended by itself before the final check needed it
    exit: int | None  # its exit status (null: not stopped yet; negative: killed by that signal)


class ProvisionPayload(TypedDict):
    """A `provision` receipt's payload."""

    ran: list[str]  # the steps run
    skipped: list[str]  # the steps already done
    warnings: list[str]  # the guard's warnings
    seconds: float  # the provision's wall time
    backend: str  # the installer: pip or uv
    steps: list[ProvisionStepJSON]  # every step of the state file
    full_check: dict[str, Any] | None  # the final `import torch`'s answer (version, cuda, file, ...)
    import_check: ImportCheckJSON | None  # how it was judged (null: no final check)
    import_warmup: WarmupJSON | None  # the import warm-up (null: not run)
    timings: dict[str, float]  # wall seconds per phase
    # how the lock was used: bypassed (--no-lock), locked_steps, and with --lock the lock file and
    # the environment chosen of it
    lock: dict[str, object]


class SmokeTimingJSON(TypedDict):
    """When the smoke tests ran and where the seconds went."""

    launched_at: float  # when the checks' process started (seconds since the epoch)
    timeline: list[list[str | float]]  # the checks' phases: [name, time, CPU seconds]


class SmokeSelectionJSON(TypedDict):
    """The checks for what a lock installed (an environment provisioned with --lock)."""

    lock_file: str  # the lock
    checks: list[str]  # the kernel checks run
    imports: list[str]  # the distributions whose modules were imported


class _SmokePayload(TypedDict):
    ok: bool  # every check passed or was skipped
    seconds: float  # the checks' wall time
    environment: dict[str, Any]  # torch, CUDA, cuDNN and NCCL versions and the device, as torch saw them
    # each check's result: name, verdict (pass, fail, skip), rel_err, tol, seconds, reason, ...
    # (the receipt leaves out a failed check's traceback; `smoke --json` prints it)
    checks: list[dict[str, Any]]
    launch_regime: str  # single-process, or one worker per GPU (`per-gpu 4 workers`)
    timing: SmokeTimingJSON  # when it ran and where the seconds went


class SmokeGpuJSON(TypedDict):
    """One GPU's smoke worker: which GPU, and its own results."""

    index: int  # nvidia-smi's index
    uuid: str  # the GPU's UUID
    bus_id: str  # its PCI bus id
    name: str  # its name
    ok: bool  # every check passed or was skipped on it
    seconds: float  # its worker's wall time
    environment: dict[str, Any]  # torch, CUDA and the device, as its worker saw them
    checks: list[dict[str, Any]]  # its checks' results, as `checks` above
    log: str | None  # its worker's log


class SmokePayload(_SmokePayload, total=False):
    """A `smoke` receipt's payload."""

    selection: SmokeSelectionJSON  # provisioned from a lock: the checks for what it installed
    # one worker per GPU (`--gpus`): each GPU's results; `checks` then holds, per check, its
    # first failure (`failed_gpus`: where it failed) or the first GPU's result (`gpu`: which)
    gpus: list[SmokeGpuJSON]
    # slow GPUs: index, uuid, bus_id, name, check, tflops, compared_with, reference_tflops,
    # below (a fraction), verdict (fail: below its peers; warn: below its model's figure), nvml
    slow: list[dict[str, Any]]
    slow_margin: float | None  # how far below its peers' median a GPU is slow (null: not compared)


class _DistStepExtra(TypedDict, total=False):
    # the all-reduce bus bandwidth against what the ranks' GPU links should give (one host):
    # measured_busbw_gbps, expected_busbw_gbps, basis, gpus, links, verdict (warn: far below)
    allreduce_expected: dict[str, Any]


class DistStepPayload(WorkerResult, _DistStepExtra):
    """A `dist-step` receipt's payload: what the workers measured, then how torchrun ended."""

    returncode: int  # torchrun's exit status
    torchrun_seconds: float  # torchrun's wall time
    torchrun_launched_at: float  # when torchrun started (seconds since the epoch)
    launch_regime: str  # how it ran (`torchrun-standalone 1x2 gloo dp1xtp2 ep2`)


class VerifyPayload(TypedDict):
    """A `verify` receipt's payload."""

    ok: bool  # no violation
    venv: str  # the environment verified
    baseline_from: str  # where its baseline came from (the manifest, or the environment itself)
    violations: list[str]  # what departs from the baseline, and the files changed on disk
    torch: dict[str, Any] | None  # the `import torch` check's answer (version, cuda, file, ...)
    guard_seconds: float  # how long the guard took


ReceiptPayload = ProvisionPayload | SmokePayload | DistStepPayload | VerifyPayload


class ReceiptBody(TypedDict):
    """A receipt before its digest: everything the digest covers."""

    schema: Literal["envbuild.receipt/1"]  # the receipt's format
    kind: ReceiptKind  # the command that wrote it
    created: str  # when (UTC, ISO 8601)
    names: dict[str, str]  # the three names that make receipts comparable: host_lineage, profile, launch_regime
    provenance: ProvenanceJSON  # who ran what, from which source, on which machine
    backend: BackendJSON  # where it ran (receipts written before this section lack it)
    hardware: HardwareJSON  # the host: driver, GPUs, topology, compilers, CPUs and memory
    # the environment's software, as its own interpreter read it (``proof/inventory.py``): python,
    # torch (its versions), distributions (one table each: name, version, record_sha256,
    # content_sha256, modified, ...); or error
    software: dict[str, Any]
    spec: ReceiptSpecJSON | None  # the stack spec (null: a receipt of no stack)
    env: ReceiptEnvJSON  # the environment overlay and the variables in force
    payload: ReceiptPayload  # the command's own result: one shape per kind


class Receipt(ReceiptBody):
    """One record per run (provision, smoke, dist-step, verify), written under `<root>/receipts`."""

    digest: str  # sha256 of the rest: its JSON with sorted keys


class LoadedReceipt(Receipt):
    """A receipt as ``load_receipt`` reads it (and ``receipt show --json`` prints it): the file, and
    the path it was read from."""

    _path: str  # the file it was read from (not in the file)


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


def inventory(python: Path, *, trust_record: bool = False) -> dict[str, Any]:
    """Installed distributions and torch versions of ``python``'s environment (no torch import).
    The files' hashes are remembered in envbuild's cache folder, by stat key: a first inventory
    reads every file (seconds for a CUDA torch), a later one of the same environment stats them.
    ``trust_record``: the receipt of the provision that just installed them takes each file's
    hash from its RECORD (the installers wrote it from hash-checked wheels; the guard read torch's
    and the protected set's files); ``receipt`` and ``verify`` read them from disk."""
    argv = [str(python), str(INVENTORY_SCRIPT), "--cache-dir", str(cache_dir() / "file-hashes"),
            *(["--trust-record"] if trust_record else [])]
    try:
        res = run(argv, capture=True, timeout=300)
    except FileNotFoundError:
        return {"error": f"no interpreter at {python}"}
    if not res.ok:
        return {"error": f"inventory failed (exit {res.returncode}): {res.tail[-500:]}"}
    try:
        doc: dict[str, Any] = json.loads((res.output or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "inventory printed no JSON"}
    return doc


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
    keys = sorted({*RUNTIME_BASELINE, *UNSET_IN_BASELINE, "NCCL_MNNVL_ENABLE", "PYTORCH_CUDA_ALLOC_CONF",
                   *(k for k in environ if k.startswith(_ENV_PREFIXES))})
    # the spec's from_env values are never written, whatever their names (only whether they are set)
    hidden = {ref.name for _, ref in spec.env_refs()} if spec is not None else set()
    in_force = {k: ("***" if environ.get(k) else environ.get(k)) if k in hidden else environ.get(k) for k in keys}
    return {"overlay": redact_env(overlay), "unset_by_overlay": list(UNSET_IN_BASELINE),
            "in_force": redact_env(in_force)}


@dataclass(frozen=True)
class HostSnapshot:
    """What a receipt says about the host, apart from the environment: GPUs and driver, provenance."""

    gpus: GPUInventoryJSON
    provenance: Provenance


def snapshot_host(spec: StackSpec | None = None, environ: Mapping[str, str] | None = None,
                  provenance: Provenance | None = None) -> HostSnapshot:
    """``nvidia-smi`` (twice: query and topology), compilers, git: up to a second on a GPU host, and
    independent of what is installed, so a command can take it on a thread while it works.
    ``provenance``, when the caller captured it already, is kept."""
    from envbuild.host.preflight import gpu_inventory

    env = os.environ if environ is None else environ
    gpus = gpu_inventory()
    prov = provenance or capture(gpu_names=[g["name"] for g in gpus["gpus"]],
                                 profile=spec.name if spec else None, environ=env)
    return HostSnapshot(gpus=gpus, provenance=prov)


def write_receipt(
    paths: Paths,
    kind: ReceiptKind,
    payload: ReceiptPayload,
    *,
    spec: StackSpec | None = None,
    python: Path | None = None,
    provenance: Provenance | None = None,
    environ: Mapping[str, str] | None = None,
    host: HostSnapshot | None = None,
    software: dict[str, Any] | None = None,
    backend: Backend | None = None,
) -> Path:
    """Write one receipt under ``paths.receipts``; returns its path.

    ``provenance`` should be captured at the start of the command (``provenance.capture``), or
    ``host`` taken (``snapshot_host``); either is captured here when not given. ``python`` is the
    target environment's interpreter (default: ``paths.python`` when it exists); ``software`` its
    ``inventory``, when the caller already has it; ``backend`` where it runs (default: detected).
    """
    env = os.environ if environ is None else environ
    snap = host or snapshot_host(spec, env, provenance)
    gpus, prov = snap.gpus, provenance or snap.provenance
    names = dict(prov.names)
    regime = payload.get("launch_regime")
    if regime and not env.get("ENVBUILD_LAUNCH_REGIME"):
        names["launch_regime"] = str(regime)
    if spec is not None and not env.get("ENVBUILD_PROFILE"):
        names["profile"] = spec.name
    interp = python or (paths.python if paths.python.exists() else None)
    doc: ReceiptBody = {
        "schema": SCHEMA,
        "kind": kind,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "names": names,
        "provenance": prov.to_dict(),
        "backend": (backend or detect(environ)).to_dict(),
        "hardware": hardware(gpus),
        "software": software if software is not None else (
            inventory(interp) if interp is not None else {"error": "no target interpreter"}),
        "spec": {"name": spec.name, "path": str(spec.path), "digest": spec.digest} if spec else None,
        "env": env_section(spec, paths, env),
        "payload": payload,
    }
    doc = redact_any(doc)
    confirmed = _confirmed_by(paths.receipts, doc)
    if confirmed is not None:
        _log_verification(paths.receipts, doc, confirmed)
        events.emit("info", f"nothing changed since {confirmed.name}: this {kind} is recorded in "
                            f"{paths.receipts / VERIFIED_LOG}")
        return confirmed
    receipt: Receipt = {**doc, "digest": sha256_bytes(json.dumps(doc, sort_keys=True, default=str).encode())}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    hostname = re.sub(r"[^A-Za-z0-9.-]+", "-", prov.hostname)[:40]
    path = paths.receipts / f"{kind}-{stamp}-{hostname}.json"
    n = 1
    while path.exists():
        n += 1
        path = paths.receipts / f"{kind}-{stamp}-{hostname}-{n}.json"
    atomic_write_json(path, receipt, private=True)  # a record of a run: sources, env, errors
    events.emit("info", f"receipt written: {path}")
    return path


# ----------------------------------------------------------------------------- verifications

VERIFIED_LOG = "verified.jsonl"
_VERIFYING = ("provision", "verify")  # the kinds whose receipt only confirms when nothing changed


def _confirmed_by(folder: Path, doc: ReceiptBody) -> Path | None:
    """The newest provision or verify receipt in ``folder`` when ``doc`` is a passing verification
    (a provision that ran no step, or a verify) that differs from it in nothing: else None."""
    payload = doc.get("payload") or {}
    if doc["kind"] not in _VERIFYING or payload.get("ok") is False or (doc["kind"] == "provision" and payload.get("ran")):
        return None
    if "error" in (doc.get("software") or {}):
        return None
    newest = next(iter(receipt_files(folder, kinds=_VERIFYING)), None)
    if newest is None:
        return None
    try:
        ref = load_receipt(newest)
    except ConfigError:
        return None
    if ref.get("spec") != doc.get("spec") or "error" in (ref.get("software") or {}):
        return None
    diffs = diff_receipts(ref, doc)
    if any(d.drift or d.section == "run" for d in diffs):
        return None
    return newest


def _log_verification(folder: Path, doc: ReceiptBody, confirmed: Path) -> None:
    """One line: when, what, its payload, and what the confirmed receipt says otherwise (information
    only: another envbuild version or repository revision)."""
    line = {"created": doc["created"], "kind": doc["kind"], "confirms": confirmed.name,
            "host": doc["provenance"].get("hostname"), "payload": doc.get("payload"),
            "information": [d.to_dict() for d in diff_receipts(load_receipt(confirmed), doc)]}
    fd = os.open(folder / VERIFIED_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(line, sort_keys=True, default=str) + "\n").encode())  # one write: one whole line
    finally:
        os.close(fd)


def verifications(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The lines of ``verified.jsonl`` by the receipt they confirm (file name), oldest first."""
    try:
        text = (folder / VERIFIED_LOG).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a full disk: the others stand
        if isinstance(entry, dict) and isinstance(entry.get("confirms"), str):
            out.setdefault(entry["confirms"], []).append(entry)
    return out


def receipt_files(folder: Path, kinds: tuple[str, ...] = KINDS) -> list[Path]:
    """The receipts in ``folder`` of these kinds (by file name), newest first."""
    try:
        found = [p for p in folder.glob("*.json") if p.name.startswith(tuple(f"{k}-" for k in kinds))]
        stamped = [(p.stat().st_mtime_ns, p.name, p) for p in found]
    except OSError:
        return []
    return [p for _, _, p in sorted(stamped, reverse=True)]


# ----------------------------------------------------------------------------- reading and diffing


def load_receipt(path: Path) -> LoadedReceipt:
    """Load a receipt file, or the newest receipt in a folder; ``ConfigError`` when it is not one."""
    if path.is_dir():
        found = receipt_files(path)
        if not found:
            raise ConfigError(f"{path} holds no receipts ({'|'.join(KINDS)}-*.json)",
                              hint="Every provision, verify, smoke and dist-step writes one under <data root>/receipts.")
        path = found[0]
    if not path.is_file():
        raise ConfigError(f"no receipt at {path}", hint="Receipts live under <data root>/receipts.")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); it is not an envbuild receipt") from exc
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("envbuild.receipt/"):
        raise ConfigError(f"{path} is not an envbuild receipt (no 'schema': '{SCHEMA}')")
    if doc["schema"] != SCHEMA:
        raise ConfigError(f"{path} has schema {doc['schema']}; this envbuild reads {SCHEMA}",
                          hint="Use the envbuild version that wrote it.")
    _check_shape(doc, path)
    doc["_path"] = str(path)
    return cast("LoadedReceipt", doc)  # its shape checked above, as far as the readers rely on it


# What ``receipt show`` and ``receipt diff`` read, and the type each must have where present
# (``!``: required). A receipt edited or damaged into another shape is a ConfigError naming the key.
_NUM = (int, float)
_SHAPE: dict[str, tuple[tuple[type, ...], bool]] = {
    "names": ((dict,), False), "provenance": ((dict,), False), "provenance.repo": ((dict,), False),
    "provenance.repo.revision": ((str,), False), "hardware": ((dict,), False), "hardware.gpus": ((list,), False),
    "hardware.gpus[]": ((dict,), True), "hardware.gpus[].name": ((str,), True),
    "software": ((dict,), False), "software.torch": ((dict,), False), "software.distributions": ((list,), False),
    "software.distributions[]": ((dict,), True), "software.distributions[].name": ((str,), True),
    "software.distributions[].version": ((str,), True), "software.distributions[].record_sha256": ((str,), False),
    "software.distributions[].files_sha256": ((str,), False),
    "software.distributions[].content_sha256": ((str,), False),
    "software.distributions[].modified": ((list,), False),
    "software.distributions[].modified_count": ((int,), False),
    "env": ((dict,), False), "env.overlay": ((dict,), False), "env.in_force": ((dict,), False),
    "payload": ((dict,), False),
    "backend": ((dict,), False), "backend.kind": ((str,), True), "backend.image": ((dict,), True),
    "backend.run": ((dict,), True),
}
_PAYLOAD_SHAPE: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "smoke": {"payload.checks": ((list,), False), "payload.checks[]": ((dict,), True),
              "payload.checks[].seconds": (_NUM, False)},
    "dist-step": {"payload.checks": ((dict,), False), "payload.timing": ((dict,), False),
                  "payload.timing.steady_step_seconds": (_NUM, False), "payload.allreduce": ((dict,), False),
                  "payload.allreduce.busbw_gbps": (_NUM, True)},
}


def _check_shape(doc: dict[str, Any], path: Path) -> None:
    shape = {**_SHAPE, **_PAYLOAD_SHAPE.get(str(doc.get("kind")), {})}
    for key, (types, required) in shape.items():
        parent_key, _, leaf = key.rpartition(".")
        for where, parent in _walk(doc, parent_key):
            if leaf.endswith("[]"):
                continue  # list items are checked through their list below
            value = parent.get(leaf) if isinstance(parent, dict) else None
            _check_value(path, f"{where}.{leaf}" if where else leaf, value, types, required)
            if isinstance(value, list) and f"{key}[]" in shape:
                item_types, _ = shape[f"{key}[]"]
                for i, item in enumerate(value):
                    _check_value(path, f"{where + '.' if where else ''}{leaf}[{i}]", item, item_types, True)


def _walk(doc: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(shown path, value) of every object at the dotted ``key``, ``[]`` standing for each list item."""
    if not key:
        yield "", doc
        return
    for where, parent in _walk(doc, key.rpartition(".")[0]):
        leaf = key.rpartition(".")[2]
        name = leaf.removesuffix("[]")
        value = parent.get(name) if isinstance(parent, dict) else None
        shown = f"{where}.{name}" if where else name
        if leaf.endswith("[]"):
            for i, item in enumerate(value if isinstance(value, list) else []):
                yield f"{shown}[{i}]", item
        elif isinstance(value, dict):
            yield shown, value


def _check_value(path: Path, key: str, value: Any, types: tuple[type, ...], required: bool) -> None:
    if value is None and not required:
        return
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = {dict: "a table", list: "a list", str: "a string", int: "a number", float: "a number"}
        want = " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))
        got = "missing" if value is None else f"{type(value).__name__} {json.dumps(value, default=str)[:60]}"
        raise ConfigError(f"{path}: {key}: must be {want}, not {got}; the receipt was edited or damaged",
                          hint="Use the receipt as envbuild wrote it (receipts are not edited by hand).")


class DifferenceJSON(TypedDict):
    """One difference between two receipts."""

    section: str  # packages, torch, python, env, hardware, image, run or provenance
    key: str  # what differs: a package (`NAME (files)`: its files), a version, a variable, a key
    a: Any  # the reference's value (null: absent); any JSON value
    b: Any  # the other receipt's value; any JSON value
    drift: bool  # true: drift; false: information (host name, revision, another run of the same image)


@dataclass(frozen=True)
class Difference:
    section: str  # packages, torch, python, env, hardware, image, run, provenance
    key: str
    a: Any
    b: Any
    drift: bool = True  # False: informational (host name, revision, time)

    def to_dict(self) -> DifferenceJSON:
        return {"section": self.section, "key": self.key, "a": self.a, "b": self.b, "drift": self.drift}


def _packages(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in doc.get("software", {}).get("distributions", []) or []}


_IDENTITY_KEYS = ("content_sha256", "files_sha256", "record_sha256")  # the best both receipts have


def _files_differ(x: dict[str, Any], y: dict[str, Any]) -> tuple[Any, Any] | None:
    """Same version, different files? None, or what to show for each side: the identity both
    receipts hold (``content_sha256``: independent of where the environment lives, read from
    disk), shortened, and the files changed on disk since the install where there are any."""
    key = next((k for k in _IDENTITY_KEYS if x.get(k) and y.get(k)), "record_sha256")
    if x.get(key) == y.get(key):
        return None
    return _files_shown(x, key), _files_shown(y, key)


def _files_shown(d: dict[str, Any], key: str) -> str:
    shown = str(d.get(key) or "-")[:12]
    count = d.get("modified_count") or 0
    if not count:
        return shown
    names = [str(n) for n in d.get("modified") or []]
    more = f" and {count - len(names)} more" if count > len(names) else ""
    return f"{shown}; {count} file(s) changed on disk: {', '.join(names)}{more}"


def diff_receipts(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    out: list[Difference] = []
    pa, pb = _packages(a), _packages(b)
    for name in sorted(set(pa) | set(pb)):
        x, y = pa.get(name), pb.get(name)
        if x is None or y is None:
            out.append(Difference("packages", name, x and x["version"], y and y["version"]))
        elif x["version"] != y["version"]:
            out.append(Difference("packages", name, x["version"], y["version"]))
        elif (files := _files_differ(x, y)) is not None:
            out.append(Difference("packages", f"{name} (files)", *files))
    sa, sb = a.get("software", {}), b.get("software", {})
    for key, x, y in _flat_diff(sa.get("torch") or {}, sb.get("torch") or {}):
        out.append(Difference("torch", key, x, y))
    if sa.get("python") != sb.get("python"):
        out.append(Difference("python", "version", sa.get("python"), sb.get("python")))
    ea, eb = a.get("env", {}), b.get("env", {})
    for sub in ("overlay", "in_force"):
        for key, x, y in _flat_diff(ea.get(sub) or {}, eb.get(sub) or {}):
            if sub == "overlay" and key.endswith(("_CACHE_DIR", "_CACHE_PATH", "HF_HOME")):
                continue  # cache folders follow the data root
            out.append(Difference("env", f"{sub}.{key}", x, y))
    ha, hb = a.get("hardware", {}), b.get("hardware", {})
    for key in ("driver", "topology", "nvcc", "gcc", "numa_balancing"):
        if ha.get(key) != hb.get(key):
            out.append(Difference("hardware", key, ha.get(key), hb.get(key)))
    ga, gb = [g.get("name") for g in ha.get("gpus", [])], [g.get("name") for g in hb.get("gpus", [])]
    if ga != gb:
        out.append(Difference("hardware", "gpus", f"{len(ga)} x {', '.join(sorted(set(ga))) or '-'}",
                              f"{len(gb)} x {', '.join(sorted(set(gb))) or '-'}"))
    va, vb = a.get("provenance", {}), b.get("provenance", {})
    if va.get("machine_class") != vb.get("machine_class"):
        out.append(Difference("hardware", "machine_class", va.get("machine_class"), vb.get("machine_class")))
    out += backend_diff(a.get("backend"), b.get("backend"))
    both = bool(a.get("backend") and b.get("backend"))  # then the host name is in the run group
    for key in ("envbuild_version",) if both else ("hostname", "envbuild_version"):
        if va.get(key) != vb.get(key):
            out.append(Difference("provenance", key, va.get(key), vb.get(key), drift=False))
    ra, rb = (va.get("repo") or {}).get("revision"), (vb.get("repo") or {}).get("revision")
    if ra != rb:
        out.append(Difference("provenance", "repo revision", ra, rb, drift=False))
    return out


def backend_diff(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[Difference]:
    """``image`` differences (drift: the software came from another image, or one side ran in a
    container and the other not) and ``run`` differences (information: the same image ran as
    another task, job, pod, container, host or boot, or under another scheduler: a Slurm job on
    a host is the host's image). A receipt without the section (written before it) says nothing
    about either: one informational line."""
    if not a or not b:
        if a or b:
            return [Difference("image", "backend", (a or {}).get("kind") or "not recorded",
                               (b or {}).get("kind") or "not recorded", drift=False)]
        return []
    out: list[Difference] = []
    if bool(a.get("container")) != bool(b.get("container")):
        out.append(Difference("image", "container", bool(a.get("container")), bool(b.get("container"))))
    for key, x, y in _flat_diff(a.get("image") or {}, b.get("image") or {}):
        out.append(Difference("image", key, x, y))
    if a.get("kind") != b.get("kind"):
        out.append(Difference("run", "backend kind", a.get("kind"), b.get("kind"), drift=False))
    for key, x, y in _flat_diff(a.get("run") or {}, b.get("run") or {}):
        out.append(Difference("run", key, x, y, drift=False))
    return out


def image_changed(diffs: list[Difference]) -> bool:
    return any(d.section == "image" and d.drift for d in diffs)


def run_changed(diffs: list[Difference]) -> bool:
    return any(d.section == "run" for d in diffs)


def _flat_diff(x: Mapping[str, Any], y: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(k, x.get(k), y.get(k)) for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]


def summary(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The few lines ``receipt show`` prints first."""
    sw, hw, prov = doc.get("software", {}), doc.get("hardware", {}), doc.get("provenance", {})
    repo = prov.get("repo") or {}
    torch = sw.get("torch") or {}
    gpus = hw.get("gpus") or []
    changed = [f"{d['name']} ({d['modified_count']})" for d in sw.get("distributions") or []
               if isinstance(d.get("modified_count"), int) and d["modified_count"] > 0]
    return {
        "file": doc.get("_path"),
        "kind": doc.get("kind"),
        "created": doc.get("created"),
        "host lineage / profile / regime": " / ".join(str(doc.get("names", {}).get(k)) for k in
                                                      ("host_lineage", "profile", "launch_regime")),
        "host": f"{prov.get('hostname')} ({prov.get('machine_class')})",
        "source": f"{(repo.get('revision') or 'no git')[:12]}{' dirty' if repo.get('dirty') else ''}",
        "envbuild": prov.get("envbuild_version"),
        "python": sw.get("python"),
        "torch": " ".join(f"{k}={v}" for k, v in torch.items()) or "not installed",
        "packages": len(sw.get("distributions") or []),
        **({"files changed on disk": ", ".join(changed)} if changed else {}),
        "driver / GPUs": f"{hw.get('driver') or '-'} / {len(gpus)} x "
                         f"{', '.join(sorted({g.get('name') for g in gpus})) or '-'}",
        "backend": _backend_line(doc.get("backend")),
    }


def _backend_line(backend: Mapping[str, Any] | None) -> str:
    if not backend:
        return "not recorded"
    image = backend.get("image") or {}
    shown = next((f"{k}={image[k]}" for k in ("modal_image_id", "digest", "id", "ref") if image.get(k)), None)
    run = backend.get("run") or {}
    where = next((f"{k}={run[k]}" for k in ("modal_task_id", "slurm_job_id", "k8s_pod", "container_id")
                  if run.get(k)), f"hostname={run.get('hostname')}")
    return f"{backend.get('kind')}: image {shown or image.get('os') or 'unknown'}, run {where}"
