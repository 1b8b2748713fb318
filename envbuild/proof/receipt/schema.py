"""What a receipt is: its schema, kinds and sections as ``TypedDict``s, and the check that holds a
file read back to them (``validate``), so its readers stay typed.

A receipt written before a section or field was added (``backend``, a provision's ``failure``)
still validates: those are optional here (``total=False``), and readers ask for them with
``.get``. Every other top-level section every ``envbuild.receipt/1`` writer wrote, so ``validate``
requires it; within a section, the values the readers read are held to their types (``_SHAPE``),
the rest is carried as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

from envbuild.errors import ConfigError
from envbuild.host.preflight import GPUInventoryJSON
from envbuild.proof.backend import BackendJSON
from envbuild.proof.diststep.launch import WorkerResult
from envbuild.proof.provenance import ProvenanceJSON

SCHEMA: Literal["envbuild.receipt/1"] = "envbuild.receipt/1"
KINDS = ("provision", "smoke", "dist-step", "verify", "preflight")
ReceiptKind = Literal["provision", "smoke", "dist-step", "verify", "preflight"]  # KINDS

# ----------------------------------------------------------------------------- the document
# What a receipt holds, as this envbuild writes it. Its readers (``diff_receipts``, ``summary``)
# take a ``ReceiptBody``: one this envbuild just made, or a file ``validate`` held to these types.


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

    # the venv's overlay: the runtime baseline and the data root's caches
    overlay: dict[str, str | None]
    unset_by_overlay: list[str]  # the variables the overlay unsets
    # the variables that matter to the run as they were (null: unset)
    in_force: dict[str, str | None]


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

    # true: the last verdict was reused (no distribution, interpreter or overlay changed)
    cached: bool


class WarmupJSON(TypedDict):
    """The import warm-up: torch's bytecode written in the background (``provision/warmup.py``)."""

    module: str  # the module it warms (torch)
    # compile the files the last import loaded, import it, import it from the prepared step,
    # compile what its import statements name in the prepared step (walk), or nothing before the
    # final check (check: only the walk beside the check's import ran)
    mode: Literal["compile", "import", "prepare", "walk", "check"]
    files: int  # the files compiled (mode compile), or the .pyc linked into the venv (prepare/walk)
    seconds: float | None  # how long it ran, once stopped
    # whether it ended by itself before the final check needed it
    finished_before_check: bool | None
    exit: int | None  # its exit status (null: not stopped yet; negative: killed by that signal)
    # the .pyc the walk beside the final check's import wrote (null: there was no fresh import)
    beside_check: int | None


class VenvAfterFailureJSON(TypedDict):
    """What a failed provision left of the venv (``provision.restore``)."""

    # untouched: it failed before anything was installed (not-made: there was no venv, and none
    # was made); restored: it had begun installing, and the venv is back as it was before the
    # run; left: it had begun installing into a venv this run made (or one it could not copy),
    # and what is there is said, with how provision resumes
    state: Literal["untouched", "not-made", "restored", "left"]
    detail: str  # one sentence: what is there, and how provision resumes


class _ProvisionFailure(TypedDict):
    """Why a provision stopped before it finished: the stage, the exit code and the paragraph it
    printed. The receipt's ``software`` is what was installed at that point."""

    stage: str  # the step that failed, or the phase it stopped in (venv, import_check)
    exit_code: int  # the exit code envbuild left with (docs/reference/exit-codes.md)
    error: str  # the error's kind: InstallError, ABIViolation, LockError, Interrupted, ...
    reason: str  # the one paragraph envbuild printed
    hint: str | None  # what to do, as envbuild said it (null: no hint)
    interrupted: bool  # true: stopped by Ctrl-C (SIGINT) or SIGTERM, not by a failure
    # the steps done (ok) when it stopped, in order, this run's and earlier ones'
    completed: list[str]


class ProvisionFailureJSON(_ProvisionFailure, total=False):
    venv: VenvAfterFailureJSON  # what it left of the venv (receipts before it do not say)


class _ProvisionPayload(TypedDict):
    ran: list[str]  # the steps run
    skipped: list[str]  # the steps already done
    warnings: list[str]  # the guard's warnings
    seconds: float  # the provision's wall time
    backend: str  # the installer: pip or uv
    steps: list[ProvisionStepJSON]  # every step of the state file
    # the final `import torch`'s answer (version, cuda, file, ...)
    full_check: dict[str, Any] | None
    import_check: ImportCheckJSON | None  # how it was judged (null: no final check)
    import_warmup: WarmupJSON | None  # the import warm-up (null: not run)
    timings: dict[str, float]  # wall seconds per phase
    # how the lock was used: bypassed (--no-lock), locked_steps, and with --lock the lock file and
    # the environment chosen of it
    lock: dict[str, object]


class ProvisionPayload(_ProvisionPayload, total=False):
    """A `provision` receipt's payload."""

    # present only where the run failed or was interrupted (`receipt show` and `verify` say so)
    failure: ProvisionFailureJSON


class _SmokeTiming(TypedDict):
    launched_at: float  # when the checks' process started (seconds since the epoch)
    # the (first) worker's phases: [name, time it began, CPU seconds by then]: python, imports,
    # start, cuda, each check, result
    timeline: list[list[str | float]]


class SmokeTimingJSON(_SmokeTiming, total=False):
    """When the smoke tests ran and where the seconds went."""

    # envbuild's own moments: [name, time]: process, command, gpus listed, launched, collected,
    # output (the receipt's copy ends at collected)
    parent: list[list[str | float]]
    # the (first) worker's CUDA context and NVML, opened during its imports: began, ready,
    # nvml_ready (times), or error
    early_cuda: dict[str, Any]
    # on a GPU, the torch.compile check's own process beside the worker: its timeline,
    # early_cuda, seconds, lost (true: it wrote no result)
    compile_part: dict[str, Any]


class SmokeSelectionJSON(TypedDict):
    """The checks for what a lock installed (an environment provisioned with --lock)."""

    lock_file: str  # the lock
    checks: list[str]  # the kernel checks run
    imports: list[str]  # the distributions whose modules were imported


class _SmokePayload(TypedDict):
    ok: bool  # every check passed or was skipped
    seconds: float  # the checks' wall time
    # torch, CUDA, cuDNN and NCCL versions and the device, as torch saw them
    environment: dict[str, Any]
    # each check's result: name, verdict (pass, fail, skip), rel_err, tol, seconds, reason, ...
    # (the receipt leaves out a failed check's traceback; `smoke --json` prints it)
    checks: list[dict[str, Any]]
    launch_regime: str  # single-process, or one worker per GPU (`per-gpu 4 workers`)
    timing: SmokeTimingJSON  # when it ran and where the seconds went


class _SmokeGpu(TypedDict):
    index: int  # nvidia-smi's index
    uuid: str  # the GPU's UUID
    bus_id: str  # its PCI bus id
    name: str  # its name
    ok: bool  # every check passed or was skipped on it
    seconds: float  # its worker's wall time
    environment: dict[str, Any]  # torch, CUDA and the device, as its worker saw them
    checks: list[dict[str, Any]]  # its checks' results, as `checks` above
    log: str | None  # its worker's log


class SmokeGpuJSON(_SmokeGpu, total=False):
    """One GPU's smoke worker: which GPU, and its own results."""

    timeline: list[list[str | float]]  # its worker's phases, as `timing.timeline`
    early_cuda: dict[str, Any]  # its worker's early CUDA context, as `timing.early_cuda`
    compile_part: dict[str, Any]  # its worker's torch.compile process, as `timing.compile_part`


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


class _DistributionName(TypedDict):
    name: str  # its canonical name
    version: str  # its version


class DistributionJSON(_DistributionName, total=False):
    """One installed distribution (``software.distributions``), as ``proof/inventory.py`` read
    it."""

    installer: str | None  # what installed it (INSTALLER: pip, uv)
    record_sha256: str | None  # sha256 of its dist-info RECORD
    files_sha256: str | None  # its files' digest, as receipts before content_sha256 wrote it
    # its files' identity wherever the environment lives (what diffs compare)
    content_sha256: str | None
    modified: list[str]  # the first files whose bytes on disk are not the ones RECORD lists
    modified_count: int  # how many such files there are


class SoftwareJSON(TypedDict, total=False):
    """The environment's software as its own interpreter read it (``proof/inventory.py``), or
    ``error`` where it could not be read."""

    python: str  # the interpreter's version
    implementation: str  # cpython, pypy, ...
    executable: str  # the interpreter
    prefix: str  # the environment (sys.prefix)
    distributions: list[DistributionJSON]  # every installed distribution, by name
    torch: dict[str, str | None]  # torch's versions (version, cuda, git_version, cudnn, nccl)
    content_from: str  # where content_sha256 was read: record (a provision's own) or disk
    error: str  # why no inventory was read (then nothing else is there)


class _ReceiptSections(TypedDict):
    schema: Literal["envbuild.receipt/1"]  # the receipt's format
    kind: ReceiptKind  # the command that wrote it
    created: str  # when (UTC, ISO 8601)
    # the three names that make receipts comparable: host_lineage, profile, launch_regime
    names: dict[str, str]
    provenance: ProvenanceJSON  # who ran what, from which source, on which machine
    hardware: HardwareJSON  # the host: driver, GPUs, topology, compilers, CPUs and memory
    software: SoftwareJSON  # the environment's software, as its own interpreter read it
    spec: ReceiptSpecJSON | None  # the stack spec (null: a receipt of no stack)
    env: ReceiptEnvJSON  # the environment overlay and the variables in force
    payload: ReceiptPayload  # the command's own result: one shape per kind


class ReceiptBody(_ReceiptSections, total=False):
    """A receipt before its digest: everything the digest covers."""

    # where it ran (always written; receipts written before this section lack it)
    backend: BackendJSON


class Receipt(ReceiptBody):
    """One record per run (provision, smoke, dist-step, verify), written under `<root>/receipts`."""

    digest: str  # sha256 of the rest: its JSON with sorted keys


class LoadedReceipt(Receipt):
    """A receipt as ``load_receipt`` reads it (and ``receipt show --json`` prints it): the file, and
    the path it was read from."""

    _path: str  # the file it was read from (not in the file)


# ----------------------------------------------------------------------------- the check


def validate(doc: object, path: Path) -> LoadedReceipt:
    """``doc``, read from ``path``, as a ``LoadedReceipt``; a ``ConfigError`` naming the key where
    it is not one this envbuild reads (another schema, a section missing, a value of another
    type)."""
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("envbuild.receipt/"):
        raise ConfigError(f"{path} is not an envbuild receipt (no 'schema': '{SCHEMA}')")
    if doc["schema"] != SCHEMA:
        raise ConfigError(
            f"{path} has schema {doc['schema']}; this envbuild reads {SCHEMA}",
            hint="Use the envbuild version that wrote it.",
        )
    if doc.get("kind") not in KINDS:
        shown = json.dumps(doc.get("kind"), default=str)[:60]
        raise ConfigError(
            f"{path}: kind: must be one of {', '.join(KINDS)}, not {shown}; "
            "the receipt was edited or damaged",
            hint=_UNEDITED,
        )
    if "spec" not in doc:
        raise ConfigError(
            f"{path}: spec: missing; the receipt was edited or damaged", hint=_UNEDITED
        )
    _check_shape(doc, path)
    doc["_path"] = str(path)
    return cast("LoadedReceipt", doc)  # held above to what the readers rely on


_UNEDITED = "Use the receipt as envbuild wrote it (receipts are not edited by hand)."


# What ``receipt show`` and ``receipt diff`` read, and the type each must have where present
# (``!``: required). A receipt edited or damaged into another shape is a ConfigError naming the key.
_NUM = (int, float)
_SHAPE: dict[str, tuple[tuple[type, ...], bool]] = {
    "kind": ((str,), True),
    "created": ((str,), True),
    "names": ((dict,), True),
    "provenance": ((dict,), True),
    "provenance.repo": ((dict,), False),
    "provenance.repo.revision": ((str,), False),
    "hardware": ((dict,), True),
    "hardware.gpus": ((list,), False),
    "hardware.gpus[]": ((dict,), True),
    "hardware.gpus[].name": ((str,), True),
    "software": ((dict,), True),
    "software.torch": ((dict,), False),
    "software.distributions": ((list,), False),
    "software.distributions[]": ((dict,), True),
    "software.distributions[].name": ((str,), True),
    "software.distributions[].version": ((str,), True),
    "software.distributions[].record_sha256": ((str,), False),
    "software.distributions[].files_sha256": ((str,), False),
    "software.distributions[].content_sha256": ((str,), False),
    "software.distributions[].modified": ((list,), False),
    "software.distributions[].modified_count": ((int,), False),
    "env": ((dict,), True),
    "env.overlay": ((dict,), False),
    "env.in_force": ((dict,), False),
    "payload": ((dict,), True),
    "spec": ((dict,), False),
    "backend": ((dict,), False),
    "backend.kind": ((str,), True),
    "backend.image": ((dict,), True),
    "backend.run": ((dict,), True),
}
_PAYLOAD_SHAPE: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "smoke": {
        "payload.checks": ((list,), False),
        "payload.checks[]": ((dict,), True),
        "payload.checks[].seconds": (_NUM, False),
    },
    "provision": {
        "payload.failure": ((dict,), False),
        "payload.failure.stage": ((str,), True),
        "payload.failure.exit_code": ((int,), True),
        "payload.failure.reason": ((str,), True),
        "payload.failure.completed": ((list,), True),
    },
    "dist-step": {
        "payload.checks": ((dict,), False),
        "payload.timing": ((dict,), False),
        "payload.timing.steady_step_seconds": (_NUM, False),
        "payload.allreduce": ((dict,), False),
        "payload.allreduce.busbw_gbps": (_NUM, True),
    },
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
                    shown = f"{where + '.' if where else ''}{leaf}[{i}]"
                    _check_value(path, shown, item, item_types, True)


def _walk(doc: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(shown path, value) of every object at the dotted ``key``, ``[]`` standing for each list
    item."""
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
        names = {
            dict: "a table",
            list: "a list",
            str: "a string",
            int: "a number",
            float: "a number",
        }
        want = " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))
        shown = json.dumps(value, default=str)[:60]
        got = "missing" if value is None else f"{type(value).__name__} {shown}"
        raise ConfigError(
            f"{path}: {key}: must be {want}, not {got}; the receipt was edited or damaged",
            hint=_UNEDITED,
        )
