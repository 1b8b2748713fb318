"""The ``--json`` documents of the commands: one ``TypedDict`` per document a command prints.

Every document is a JSON object whose first key is ``schema``: ``envbuild.<command>/<version>``,
the command's words joined by dots (``envbuild.wheelhouse.mirror/1``), then the option that gives
the document another shape (``envbuild.lock.check/1`` is ``lock --check``, ``envbuild.plan.lock/1``
is ``plan --lock FILE``). Two documents keep the schema they had first: ``check-lock``'s is the
number 1 (``envbuild.gate.output``), ``receipt show`` prints the receipt itself
(``envbuild.receipt/1``, ``envbuild.proof.receipt``). ``wheelhouse build --json`` prints a list,
one object per wheel, with no schema key. Within a schema version fields are only ever added; a
field removed or changed in meaning is a new version.

The parts made by the library (a plan, a lock's stages, a preflight report, a gate report) are
the library's own ``TypedDict`` classes; ``DOCUMENTS`` lists every document for the reference page
(``docs/reference/json.md``, ``make docs-reference``) and the tests that run each command. The
commands import this module for their annotations only: it imports the library stages that make
the documents' parts, which a command's start does not need.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, TypedDict, final

from envbuild.gate.findings import FileReportJSON
from envbuild.gate.output import CheckLockDocument, CheckLockOwnDocument
from envbuild.gate.selection import ChosenJSON
from envbuild.host.preflight import PreflightReportJSON
from envbuild.images.modal import Mode
from envbuild.plan import Backend, PlanABIJSON, PlanStepJSON
from envbuild.projectlock.stages import StagePlanJSON
from envbuild.proof.receipt import (
    DifferenceJSON,
    DistStepPayload,
    LoadedReceipt,
    ReceiptKind,
    SmokePayload,
    WarmupJSON,
)
from envbuild.stacklock.changes import ChangeJSON

# ----------------------------------------------------------------------------- plan, provision,
# verify


class PlanStepDocument(PlanStepJSON):
    """One install step of `plan --json`, with the commands `provision` runs for it."""

    argv: list[list[str]]  # the exact installer commands, paths included


class PlanDocument(TypedDict):
    """The ordered install steps and the exact commands `provision` would run. Executes nothing."""

    schema: Literal["envbuild.plan/1"]  # this document's format
    stack: str  # the stack's name
    spec: str  # the stack spec file
    spec_digest: str  # the spec's digest (what the lock records)
    python: str  # the Python version the spec asks for
    backend: Backend  # the installer provision would use
    abi: PlanABIJSON  # the baseline
    steps: list[PlanStepDocument]  # the install steps, in order
    root: str  # the data root the commands are shown for
    venv: str  # the environment they install into
    python_refused: str | None  # why provision would refuse the interpreter (exit 3), when it would


class _PlanLockSchema(TypedDict):
    schema: Literal["envbuild.plan.lock/1"]  # this document's format


class PlanLockDocument(_PlanLockSchema, StagePlanJSON):
    """`plan --lock FILE`: the environment chosen of a lockfile, its stages in install order, and
    the gate's verdict on it. Executes nothing."""

    # the builds stage: for each package, a cached built wheel or that it compiles
    builds: dict[str, str]
    gate: FileReportJSON  # the gate's verdict on the chosen environment (exit 8 when it fails)


class WarmKernelsPart(TypedDict, total=False):
    """`provision --warm-kernels`: what the kernel warm-up did (commands.smoke)."""

    # --warm-kernels: gpu (null: none), checks, compiled, failed (name, reason), seconds,
    # skipped (why nothing ran), or error (why the checks did not run)
    warm_kernels: dict[str, Any]


class _ProvisionSchema(TypedDict):
    schema: Literal["envbuild.provision/1"]  # this document's format


class ProvisionDocument(_ProvisionSchema, WarmKernelsPart):
    """What `provision` did."""

    root: str  # the data root
    venv: str  # the environment
    ran: list[str]  # the steps run
    skipped: list[str]  # the steps already done
    warnings: list[str]  # the guard's warnings
    seconds: float  # the provision's wall time
    guard_seconds: list[float]  # each ABI guard run's time
    # the final `import torch`'s answer (version, cuda, file, ...)
    full_check: dict[str, Any] | None
    import_cached: bool  # true: the last import verdict was reused (nothing changed since)
    import_warmup: WarmupJSON | None  # the import warm-up (null: not run)
    receipt: str | None  # the receipt written, or the one this run confirms (null: not written)
    timings: dict[str, float]  # wall seconds per phase


class _ProvisionLockSchema(TypedDict):
    schema: Literal["envbuild.provision.lock/1"]  # this document's format


class ProvisionLockDocument(_ProvisionLockSchema, StagePlanJSON, WarmKernelsPart):
    """`provision --lock FILE`: the environment chosen of a lockfile, its stages, and what ran."""

    root: str  # the data root
    venv: str  # the environment
    ran: list[str]  # the stages run
    skipped: list[str]  # the stages already done
    adopted_torch: str | None  # --venv: the venv's torch, kept as the baseline
    warnings: list[str]  # the guard's warnings
    seconds: float  # the provision's wall time
    receipt: str | None  # the receipt written, or the one this run confirms


class ProvisionSliceDocument(TypedDict):
    """`provision --lock SLICE`: one image layer of `docker --lock` installed (its Dockerfile's RUN
    line)."""

    schema: Literal["envbuild.provision.slice/1"]  # this document's format
    lock_file: str  # the stage slice
    environment: str  # the lock's environment it was rendered for
    slice: bool  # always true
    root: str  # the data root
    venv: str  # the environment
    ran: list[str]  # the stages run
    skipped: list[str]  # the stages already done
    seconds: float  # the provision's wall time
    receipt: str | None  # the receipt written, or the one this run confirms


class ViolationJSON(TypedDict):
    """One way the environment departs from its baseline."""

    # the guard rule: version, local, cuda, reinstalled, protected, triton, overlap, provenance,
    # unmet
    rule: str
    package: str  # the package it names
    message: str  # what happened


class VerifyDocument(TypedDict):
    """`verify`: the ABI guard and a fresh `import torch` on an existing environment."""

    schema: Literal["envbuild.verify/1"]  # this document's format
    venv: str  # the environment verified
    baseline_from: str  # where its baseline came from (the manifest, or the environment itself)
    # no violation, no file changed on disk (exit 6 otherwise), and the last provision finished
    # (exit 7)
    ok: bool
    # the last provision of the environment stopped short: where, why and the steps done (null: it
    # finished)
    unfinished: str | None
    violations: list[ViolationJSON]  # the guard's violations, then the import check's findings
    # torch and its protected set: files whose bytes are not the ones RECORD lists
    changed_on_disk: list[str]
    # a root provisioned from a lock with exact sync: packages its selection does not install
    extraneous: list[str]
    # a root provisioned from a lock: packages its selection installs that the venv does not hold
    missing: list[str]
    torch: dict[str, Any] | None  # the `import torch` check's answer (version, cuda, file, ...)
    guard_seconds: float  # how long the guard took
    receipt: str | None  # the receipt written (null: --no-receipt, or no manifest)


# ----------------------------------------------------------------------------- proofs


class _SmokeSchema(TypedDict):
    schema: Literal["envbuild.smoke/1"]  # this document's format


class SmokeDocument(_SmokeSchema, SmokePayload):
    """`smoke`: the kernel checks' results (exit 7 when one fails): the receipt's payload, with each
    failed check's traceback."""

    # the receipt written (null: --no-receipt, or a data root that cannot take it)
    receipt: str | None


class _DistStepSchema(TypedDict):
    schema: Literal["envbuild.dist-step/1"]  # this document's format


class DistStepDocument(_DistStepSchema, DistStepPayload):
    """`dist-step`: a real distributed training step (exit 7 when a check fails): the receipt's
    payload."""

    # the receipt written (null: --no-receipt, or a data root that cannot take it)
    receipt: str | None


class _PreflightHead(TypedDict):
    schema: Literal["envbuild.preflight/1"]  # this document's format
    profile: str  # the stack's name
    root: str  # the data root checked


class PreflightDocument(_PreflightHead, PreflightReportJSON):
    """`preflight` (and `preflight --lock FILE`): the host checked against the stack (exit 3 on a
    fail)."""


# ----------------------------------------------------------------------------- images


class DockerDocument(TypedDict):
    """`docker`: the Dockerfile written, one layer per step."""

    schema: Literal["envbuild.docker/1"]  # this document's format
    stack: str  # the stack's name
    dockerfile: str  # the Dockerfile written
    # the spec slices and lock files written beside it, relative to the build context
    files: list[str]


class DockerCheckDocument(TypedDict):
    """`docker --check`: whether the Dockerfile and its files are what `docker` would write now
    (exit 8 when stale, after the document)."""

    schema: Literal["envbuild.docker.check/1"]  # this document's format
    stack: str  # the stack's name
    dockerfile: str  # the Dockerfile checked
    stale: list[str]  # the files that differ or are missing (empty: current)


class DockerLockDocument(TypedDict):
    """`docker --lock FILE`: the Dockerfile written, one layer per stage of the lock's
    environment."""

    schema: Literal["envbuild.docker.lock/1"]  # this document's format
    lock: str  # the lockfile, as given
    environment: str  # the environment chosen of it
    dockerfile: str  # the Dockerfile written
    files: list[str]  # the stage slices written beside it, relative to the build context


class DockerLockCheckDocument(TypedDict):
    """`docker --lock FILE --check`: whether the Dockerfile and its slices are current (exit 8 when
    stale, after the document)."""

    schema: Literal["envbuild.docker.lock.check/1"]  # this document's format
    lock: str  # the lockfile, as given
    dockerfile: str  # the Dockerfile checked
    stale: list[str]  # the files that differ or are missing (empty: current)


class ModalDocument(TypedDict):
    """`modal`: the Modal image definition written."""

    schema: Literal["envbuild.modal/1"]  # this document's format
    stack: str  # the stack's name
    mode: Mode  # steps (one layer per step) or dockerfile (`Image.from_dockerfile`)
    file: str  # the Python file written
    module: str  # the module to import it as (`from MODULE import image`)
    dockerfile: str | None  # the Dockerfile written beside it (mode dockerfile)
    context: str  # the build context its files are read from
    steps: list[str]  # the layers, in order
    files: list[str]  # the spec slices and lock files written, relative to the build context


# ----------------------------------------------------------------------------- locks


class TorchMoveJSON(TypedDict):
    """torch's pin moved."""

    old: str  # the old version
    new: str  # the new one


class RebuildJSON(TypedDict):
    """A wheelhouse wheel built against the old torch: build it again against the new one."""

    wheel: str  # the wheel
    name: str  # its distribution
    version: str  # its version
    built_against: str  # the torch it was built against


class LockDocument(TypedDict):
    """`lock`: what the lock run wrote and what moved."""

    schema: Literal["envbuild.lock/1"]  # this document's format
    folder: str  # the lock's folder
    files: list[str]  # the files this run wrote
    skipped: list[str]  # the steps not locked (they resolve from the spec)
    seconds: float  # the run's wall time
    up_to_date: bool  # true: the lock was current; nothing was resolved or written
    resolved: list[str]  # the steps resolved again
    kept: list[str]  # the steps kept as the last lock had them
    changes: list[ChangeJSON]  # every pin that moved
    torch: TorchMoveJSON | None  # torch's move (null: it did not move)
    rebuild: list[RebuildJSON]  # wheelhouse wheels to build again when torch moved


class StaleStepJSON(TypedDict):
    """A step whose lock file is not current."""

    step: str  # the step
    reason: str  # why


class LockCheckDocument(TypedDict):
    """`lock --check`: whether the lock is current for the spec (exit 8 when not, after the
    document)."""

    schema: Literal["envbuild.lock.check/1"]  # this document's format
    current: bool  # true: the lock is current
    reason: str | None  # why it is not, when every step is current (lock.json's spec digest)
    stale: list[StaleStepJSON]  # the stale steps


# ----------------------------------------------------------------------------- receipts


@final  # no other keys: `"error" in row` tells the two apart
class ReceiptListEntry(TypedDict):
    """One receipt of the data root."""

    file: str  # its file name
    kind: ReceiptKind | None  # the command that wrote it
    created: str | None  # when (UTC, ISO 8601)
    host: str | None  # the host it was written on
    # its payload's verdict (a provision: false where it stopped short, else true)
    ok: bool | None
    # a provision that stopped short: how (`failed in rest (exit 5)`); null otherwise
    stopped: str | None
    confirmed: int  # how many later runs found nothing new and confirmed it (`verified.jsonl`)
    last_confirmed: str | None  # when the last of them ran


@final
class ReceiptListError(TypedDict):
    """A file of the receipts folder that is not a readable receipt."""

    file: str  # its file name
    error: str  # why it cannot be read


class ReceiptListDocument(TypedDict):
    """`receipt list`: the data root's receipts, newest first."""

    schema: Literal["envbuild.receipt.list/1"]  # this document's format
    folder: str  # the receipts folder
    receipts: list[ReceiptListEntry | ReceiptListError]  # one per receipt file, newest first


class DiffGroupsJSON(TypedDict):
    """The differences by group."""

    environment: list[DifferenceJSON]  # packages, torch, Python, env, hardware, provenance
    image: list[DifferenceJSON]  # what the software came from (drift)
    run: list[DifferenceJSON]  # where it ran: task, job, pod, container, host, boot (information)


class ReceiptDiffEntry(TypedDict):
    """One receipt compared with the reference."""

    file: str  # the receipt
    host: str | None  # the host it was written on
    drift: bool  # true: something drifted
    image_changed: bool  # true: the image changed (drift)
    run_changed: bool  # true: the run changed (information)
    differences: list[DifferenceJSON]  # every difference
    groups: DiffGroupsJSON  # the same, by group


class ReceiptDiffDocument(TypedDict):
    """`receipt diff`: what changed between receipts (exit 10 when any drifted, after the
    document)."""

    schema: Literal["envbuild.receipt.diff/1"]  # this document's format
    reference: str  # the receipt the others are compared with
    drift: bool  # true: some receipt drifted
    image_changed: bool  # true: some receipt's image changed
    run_changed: bool  # true: some receipt ran elsewhere (information)
    receipts: list[ReceiptDiffEntry]  # one per receipt compared


# ----------------------------------------------------------------------------- wheelhouse


class WheelhouseBuildItem(TypedDict):
    """One wheel `wheelhouse build` built or found in its cache."""

    name: str  # the distribution
    version: str  # its version (with envbuild's local label)
    wheel: str  # the wheel in --out
    cached: bool  # true: taken from the build cache
    seconds: float  # how long it took
    cache_key: str  # the build cache's key (source, torch, CUDA, Python, flags)
    log: str | None  # the build log
    removed_requires: list[str]  # requirements taken out of the wheel's metadata
    # where the wheel came from: how (built here, local cache, build cache), built_on, built_at,
    # cache (the shared build cache it was taken from)
    origin: dict[str, str | None]


class TargetJSON(TypedDict):
    """The target a mirror is for."""

    python: str  # its Python
    platform: str  # its platform


class VcsBuiltJSON(TypedDict):
    """A git or URL pin built into a wheel at its commit."""

    name: str  # the distribution
    step: str  # the step that locks it
    wheel: str  # the wheel's file name
    sha256: str  # its sha256 (lock.json records it)
    source: str  # where it was built from (redacted URL)
    commit: str | None  # the commit
    reused: bool  # true: already in the wheelhouse with the hash lock.json records


class WheelhouseMirrorDocument(TypedDict):
    """`wheelhouse mirror`: every locked file, hash-checked, in a folder with its index."""

    schema: Literal["envbuild.wheelhouse.mirror/1"]  # this document's format
    out: str  # the wheelhouse folder
    downloaded: list[str]  # the files downloaded
    present: list[str]  # the files already there
    manifest: str  # the wheelhouse's manifest (`wheelhouse.json`)
    index: str  # its PEP 503 index
    target: TargetJSON | None  # the lock's target it was mirrored for (null: every platform)
    left_out: list[str]  # files for other targets, not mirrored
    bytes_saved: int  # their size, where known
    bytes_unknown: int  # how many of them have no known size
    bytes_mirrored: int  # the size of the files mirrored
    built: list[VcsBuiltJSON]  # git and URL pins built into wheels


class _MirrorLockSchema(TypedDict):
    schema: Literal["envbuild.wheelhouse.mirror.lock/1"]  # this document's format


class WheelhouseMirrorLockDocument(_MirrorLockSchema, ChosenJSON):
    """`wheelhouse mirror --lock FILE`: every file the chosen environment of a lockfile installs."""

    out: str  # the wheelhouse folder
    downloaded: list[str]  # the files downloaded
    present: list[str]  # the files already there
    not_mirrored: list[str]  # what has no file to mirror (`name: why`: git pins)
    index: str  # its PEP 503 index
    bytes_mirrored: int  # the size of the files mirrored


class WheelhouseIndexDocument(TypedDict):
    """`wheelhouse index`: the PEP 503 index of a folder of wheels."""

    schema: Literal["envbuild.wheelhouse.index/1"]  # this document's format
    root: str  # the folder
    projects: dict[str, list[str]]  # each project (canonical name): its files


# ----------------------------------------------------------------------------- all of them

Document = (
    PlanDocument
    | PlanLockDocument
    | ProvisionDocument
    | ProvisionLockDocument
    | ProvisionSliceDocument
    | VerifyDocument
    | SmokeDocument
    | DistStepDocument
    | PreflightDocument
    | DockerDocument
    | DockerCheckDocument
    | DockerLockDocument
    | DockerLockCheckDocument
    | ModalDocument
    | LockDocument
    | LockCheckDocument
    | CheckLockDocument
    | CheckLockOwnDocument
    | LoadedReceipt
    | ReceiptListDocument
    | ReceiptDiffDocument
    | list[WheelhouseBuildItem]
    | WheelhouseMirrorDocument
    | WheelhouseMirrorLockDocument
    | WheelhouseIndexDocument
)


class DocumentEntry(NamedTuple):
    """One document: the command line that prints it and its ``TypedDict`` (``many``: a list of
    them)."""

    command: str
    document: type
    many: bool = False


DOCUMENTS: tuple[DocumentEntry, ...] = (
    DocumentEntry("plan --json", PlanDocument),
    DocumentEntry("plan --lock FILE --json", PlanLockDocument),
    DocumentEntry("provision --json", ProvisionDocument),
    DocumentEntry("provision --lock FILE --json", ProvisionLockDocument),
    DocumentEntry("provision --lock SLICE --json", ProvisionSliceDocument),
    DocumentEntry("verify --json", VerifyDocument),
    DocumentEntry("smoke --json", SmokeDocument),
    DocumentEntry("dist-step --json", DistStepDocument),
    DocumentEntry("preflight --json", PreflightDocument),
    DocumentEntry("docker --json", DockerDocument),
    DocumentEntry("docker --check --json", DockerCheckDocument),
    DocumentEntry("docker --lock FILE --json", DockerLockDocument),
    DocumentEntry("docker --lock FILE --check --json", DockerLockCheckDocument),
    DocumentEntry("modal --json", ModalDocument),
    DocumentEntry("lock --json", LockDocument),
    DocumentEntry("lock --check --json", LockCheckDocument),
    DocumentEntry("check-lock FILE... --json", CheckLockDocument),
    DocumentEntry("check-lock --json", CheckLockOwnDocument),
    DocumentEntry("receipt show --json", LoadedReceipt),
    DocumentEntry("receipt list --json", ReceiptListDocument),
    DocumentEntry("receipt diff --json", ReceiptDiffDocument),
    DocumentEntry("wheelhouse build --json", WheelhouseBuildItem, many=True),
    DocumentEntry("wheelhouse mirror --json", WheelhouseMirrorDocument),
    DocumentEntry("wheelhouse mirror --lock FILE --json", WheelhouseMirrorLockDocument),
    DocumentEntry("wheelhouse index --json", WheelhouseIndexDocument),
)
