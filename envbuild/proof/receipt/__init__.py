"""Receipts: one versioned JSON record per run (provision, smoke, dist-step, verify), and diffs.

Four modules: ``schema`` (what a receipt is, and ``validate``, which holds a file read back to it
so its readers stay typed), ``collect`` (the host, the environment's software, the variables in
force, redaction), ``store`` (writing, finding, loading, the ledger of verifications) and ``diff``
(comparing two receipts, and ``receipt show``'s summary). Everything public is named here.

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

A provision that stops short (an error, Ctrl-C, SIGTERM) writes a ``provision`` receipt too, whose
payload's ``failure`` says the stage, the exit code, the paragraph envbuild printed and the steps
done by then; its ``software`` is what was installed at that point. It never confirms nor is
confirmed by a verification, ``receipt show`` and ``verify`` say how the run ended, and
``receipt diff`` shows two runs that ended differently in the ``outcome`` section (drift).
"""

from __future__ import annotations

from envbuild.proof.receipt.collect import (
    INVENTORY_SCRIPT,
    HostSnapshot,
    env_section,
    hardware,
    inventory,
    redact_any,
    redact_env,
    snapshot_host,
)
from envbuild.proof.receipt.diff import (
    Difference,
    DifferenceJSON,
    backend_diff,
    diff_receipts,
    failure,
    image_changed,
    outcome,
    run_changed,
    stopped_short,
    summary,
)
from envbuild.proof.receipt.schema import (
    KINDS,
    SCHEMA,
    DistributionJSON,
    DistStepPayload,
    HardwareJSON,
    ImportCheckJSON,
    LoadedReceipt,
    ProvisionFailureJSON,
    ProvisionPayload,
    ProvisionStepJSON,
    Receipt,
    ReceiptBody,
    ReceiptEnvJSON,
    ReceiptKind,
    ReceiptPayload,
    ReceiptSpecJSON,
    SmokePayload,
    SmokeSelectionJSON,
    SmokeTimingJSON,
    SoftwareJSON,
    VenvAfterFailureJSON,
    VerifyPayload,
    WarmupJSON,
    validate,
)
from envbuild.proof.receipt.store import (
    VERIFIED_LOG,
    last_provision,
    load_receipt,
    receipt_files,
    verifications,
    write_receipt,
)

__all__ = [
    "Difference",
    "DifferenceJSON",
    "DistStepPayload",
    "DistributionJSON",
    "HardwareJSON",
    "HostSnapshot",
    "INVENTORY_SCRIPT",
    "ImportCheckJSON",
    "KINDS",
    "LoadedReceipt",
    "ProvisionFailureJSON",
    "VenvAfterFailureJSON",
    "ProvisionPayload",
    "ProvisionStepJSON",
    "Receipt",
    "ReceiptBody",
    "ReceiptEnvJSON",
    "ReceiptKind",
    "ReceiptPayload",
    "ReceiptSpecJSON",
    "SCHEMA",
    "SmokePayload",
    "SmokeSelectionJSON",
    "SmokeTimingJSON",
    "SoftwareJSON",
    "VERIFIED_LOG",
    "VerifyPayload",
    "WarmupJSON",
    "backend_diff",
    "diff_receipts",
    "env_section",
    "failure",
    "hardware",
    "image_changed",
    "inventory",
    "last_provision",
    "load_receipt",
    "outcome",
    "receipt_files",
    "redact_any",
    "redact_env",
    "run_changed",
    "snapshot_host",
    "stopped_short",
    "summary",
    "validate",
    "verifications",
    "write_receipt",
]
