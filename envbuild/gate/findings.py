"""What the gate reports, for a team's lockfile and for envbuild's own locks alike: findings (each
in the environments where it holds), one report per lockfile or stack, the rules, and the policy."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TypedDict

from packaging.utils import canonicalize_name

__all__ = ["NO_FILE", "OWN_RULES", "RULES", "EnvRow", "FileReport", "Finding", "Policy"]

# what a row says where no file of its torch installs on its platform and Pythons
NO_FILE = "no file for this platform and Python"

# Every rule the gate applies, with one line on what it means (the docs and --json list these).
RULES: dict[str, str] = {
    "broken-lock": "the file is not a readable lock of its format",
    "broken-line": (
        "a line of a requirements file that pip cannot read (not a requirement, URL, path or"
        " option); the rest of the file is judged"
    ),
    "broken-marker": (
        "a marker in the lock does not parse (PEP 508), so where the entry applies is unknown"
    ),
    "torch-pins": (
        "an environment installs torch more than once, or a torch that is not pinned exactly"
    ),
    "torch-min": "torch is below the policy's minimum (--torch-min or the stack's torch)",
    "torch-local": "torch's local tag is not the one the policy wants (--torch-local, e.g. cu132)",
    "protected-pins": "a --protect package is pinned more than once in one environment",
    "pypi-triton": "PyPI triton is installed beside pytorch-triton (both own the `triton` module)",
    "torch-requirement": (
        "a locked package requires a torch (or protected package) the locked one does not satisfy"
    ),
    "extension-abi": (
        "a prebuilt extension was built for another torch minor, CUDA major or C++ ABI "
        "than the torch it is installed with"
    ),
    "conda-torch-build": (
        "a conda package (pixi.lock) depends on another pytorch or libtorch "
        "build than the one the environment installs"
    ),
    "conda-and-pypi": (
        "a pixi environment installs a module from conda and again from PyPI (conda pytorch,"
        " pytorch-gpu or libtorch beside PyPI torch; torchvision, xformers, triton)"
    ),
    "torch-runtime": (
        "torch declares runtime requirements (nvidia-*, cuda-toolkit, triton) the lock does not "
        "install, or installs at another version"
    ),
    "torch-downgrade": "with --base: an environment's torch is older than at the base revision",
    "torch-swap": (
        "with --base: the same torch version with another local tag (a re-tag: +cu130 -> +cu128)"
    ),
    "torch-gone": (
        "with --base: an environment that installed torch at the base revision no longer does"
        " (paired by platform and selection: across a Python bump, torch had a file at the old"
        " Python and has none at the new)"
    ),
    "file-overlap": (
        "two packages an environment installs own the same file and one of them is torch or its"
        " protected runtime: the other overwrites torch's copy (an overlap between other packages"
        " is a note: one copy wins)"
    ),
    "no-file": (
        "with --environment naming it: the lock has no wheel or sdist of torch that installs there "
        f'(otherwise a note: the row says "{NO_FILE}")'
    ),
}

# Every rule ``check-lock`` applies to envbuild's own locks (a stack's lock.json and its step files,
# ``envbuild.gate.rules.ownlock``): rule -> (when it runs, what it means). The docs and --json list
# these.
OWN_RULES: dict[str, tuple[str, str]] = {
    "stale-lock": (
        "static",
        (
            "the lock was made from another spec (digest, step list), or a step file changed "
            "after `envbuild lock` wrote it"
        ),
    ),
    "missing-file": ("static", "lock.json, or the file of a locked step, is not there"),
    "broken-lock": (
        "static",
        "lock.json or a step file does not read as a lock, or a line's hash is malformed",
    ),
    "missing-hash": (
        "static",
        "a line of a step file has no --hash (pip --require-hashes refuses it)",
    ),
    "not-pinned": (
        "static",
        "a line of a step file is not pinned with == (a git requirement: not to a commit)",
    ),
    "protected-pin-mismatch": (
        "static",
        (
            "torch or a protected package pinned to different versions in different "
            "steps (or torch not to abi.version)"
        ),
    ),
    "protected-after-baseline": (
        "static",
        (
            "torch or a protected package in a step after the baseline (frozen "
            "once the baseline step ran)"
        ),
    ),
    "step-disagrees": (
        "static",
        (
            "a later step pins a package an earlier step pinned, at another version, and its "
            "spec does not say replaces = [NAME] (the lock refuses to write this)"
        ),
    ),
    "torch-requirement": (
        "static",
        (
            "a locked package of a step with dependencies requires a torch (or protected "
            "package) that the pinned version does not satisfy"
        ),
    ),
    "unmet-requirement": (
        "static",
        (
            "a locked package of a step with dependencies requires a version of a package "
            "that is locked at another version (by this step or an earlier one)"
        ),
    ),
    "pypi-triton": (
        "static",
        (
            "PyPI triton is locked, or required by a package of a step with dependencies, while "
            "the baseline's triton comes from another distribution (pytorch-triton)"
        ),
    ),
    "torch-downgrade": (
        "--base",
        "the lock at the base revision pins a newer torch (or protected package)",
    ),
    "torch-swap": (
        "--base",
        (
            "the lock at the base revision pins the same torch version with another local tag "
            "(a re-tag: +cu130 -> +cu128)"
        ),
    ),
    "artifact-gone": (
        "--online",
        (
            "a locked file left its index (a pruned nightly) and nothing else the lock pins "
            "for that package installs on the target; says whether the wheelhouse has it"
        ),
    ),
    "artifact-changed": (
        "--online",
        "a locked file is on its index with another sha256 (re-uploaded or tampered)",
    ),
    "dry-run-protected": (
        "dry run",
        (
            "pip install --dry-run of a step, on stand-ins of the locked baseline, would "
            "install a protected package (or PyPI triton)"
        ),
    ),
    "dry-run-failed": (
        "dry run",
        "pip install --dry-run of a step on the locked baseline does not resolve",
    ),
}


@dataclass(frozen=True, kw_only=True)
class Policy:
    package: str = "torch"
    minimum: str | None = None  # --torch-min, or the stack's abi.version
    local: str | None = None  # --torch-local, or the stack's abi.local
    protect: tuple[str, ...] = ()
    # when the lock says nothing of Python
    python: str = f"{sys.version_info[0]}.{sys.version_info[1]}"

    @property
    def torch(self) -> str:
        return canonicalize_name(self.package)

    @property
    def protected(self) -> set[str]:
        return {self.torch, *(canonicalize_name(n) for n in self.protect)}


class FindingJSON(TypedDict):
    """One finding: a rule a package of a lockfile breaks."""

    file: str  # the lockfile (envbuild's own lock: the step file the package is in)
    line: int | None  # its 1-based line there, when known
    package: str  # the package
    rule: str  # the rule (one of `rules`)
    reason: str  # what is wrong, and what to do
    environments: list[str]  # the environments where it holds (empty: the whole file)
    accepted: str | None  # the reviewed exception's reason, when one accepts it (--accept)


class EnvRowJSON(TypedDict):
    """One judged group of environments."""

    name: str  # the environment, or the group of environments judged as one
    torch: str | None  # its torch version
    findings: int  # how many findings it has
    selections: int  # how many selections of conflicting extras or groups it stands for
    environments: int  # how many environments it stands for
    # false: no file of its torch installs there; null: not known (offline, the lock names no file)
    installable: bool | None


class _OwnLockJSON(TypedDict, total=False):
    stack: str  # envbuild's own lock only: the stack's name
    folder: str | None  # envbuild's own lock only: the folder of its lock


class FileReportJSON(_OwnLockJSON):
    """The verdict on one lockfile, or on one stack's own lock (then `stack` and `folder` come first
    and `file` is its lock.json)."""

    file: str  # the lockfile
    format: str  # its format
    ok: bool  # true: no finding that is not accepted
    torch: str | None  # the one torch of every environment, else null
    torches: list[str]  # every torch version of its environments
    environments: list[EnvRowJSON]  # the environments judged
    findings: list[FindingJSON]  # the findings no exception accepts
    accepted: list[FindingJSON]  # the findings an exception accepts
    notices: list[str]  # notes that are not findings
    unverified: list[str]  # --explain: what could not be verified, and why
    unchecked: list[str]  # what was not checked, and why
    seconds: float  # how long the check took


@dataclass
class Finding:
    file: str
    package: str
    rule: str
    reason: str
    environments: list[str] = field(default_factory=list)  # where it holds ([]: the whole file)
    line: int | None = None
    accepted: str | None = None  # the reviewed exception's reason, when one accepts it

    def where(self) -> str:
        if not self.environments:
            return ""
        if len(self.environments) <= 3:
            return "; ".join(self.environments)
        return (
            "; ".join(self.environments[:2])
            + f" and {len(self.environments) - 2} more environments"
        )

    def text(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        where = f" in {self.where()}" if self.environments else ""
        return f"{loc}: {self.package}: {self.reason} [{self.rule}]{where}"

    def to_json(self) -> FindingJSON:
        return {
            "file": self.file,
            "line": self.line,
            "package": self.package,
            "rule": self.rule,
            "reason": self.reason,
            "environments": list(self.environments),
            "accepted": self.accepted,
        }


@dataclass
class EnvRow:
    """One judged group of environments: its name, its torch, how many selections and environments
    it stands for."""

    name: str
    torch: str | None
    findings: int = 0
    selections: int = 1
    count: int = 1
    installable: bool | None = True  # False: no file of its torch installs here; None: not known
    unknown: str = "not known offline"  # what the result says when ``installable`` is None

    def to_json(self) -> EnvRowJSON:
        return {
            "name": self.name,
            "torch": self.torch,
            "findings": self.findings,
            "selections": self.selections,
            "environments": self.count,
            "installable": self.installable,
        }

    @property
    def result(self) -> str:
        """What the table's result column says of it."""
        if self.findings:
            return f"{self.findings} finding(s)"
        if self.installable is None:
            return self.unknown
        return "ok" if self.installable else NO_FILE


@dataclass
class FileReport:
    """The verdict on one lockfile, or on one stack's own lock (``stack`` set: ``file`` is its
    lock.json, its findings name the step files they are in)."""

    file: str
    format: str
    environments: list[EnvRow] = field(default_factory=list)
    # accepted ones included (``accepted`` set)
    findings: list[Finding] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    # --explain: what could not be verified, and why
    unverified: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stack: str | None = None  # envbuild's own lock: the stack's name
    folder: str | None = None  # and the folder of its lock

    @property
    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted is None]

    @property
    def accepted(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted is not None]

    @property
    def ok(self) -> bool:
        return not self.failing

    @property
    def torches(self) -> list[str]:
        return sorted({r.torch for r in self.environments if r.torch})

    def to_json(self) -> FileReportJSON:
        torches = self.torches
        head: _OwnLockJSON = (
            {} if self.stack is None else {"stack": self.stack, "folder": self.folder}
        )
        return {
            **head,
            "file": self.file,
            "format": self.format,
            "ok": self.ok,
            "torch": torches[0] if len(torches) == 1 else None,
            "torches": torches,
            "environments": [r.to_json() for r in self.environments],
            "findings": [f.to_json() for f in self.failing],
            "accepted": [f.to_json() for f in self.accepted],
            "notices": self.notices,
            "unverified": self.unverified,
            "unchecked": self.unchecked,
            "seconds": round(self.seconds, 4),
        }
