"""What ``check-lock``'s static rules (``lock.check``) and its dry runs (``lock.dryrun``) share:
the finding and report types, one step's parsed view, the protected set and the target markers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild.lock.model import Lock, LockedPackage, LockedReq
from envbuild.spec import StackSpec

TRITON = "triton"

__all__ = ["TRITON", "CheckReport", "Finding", "StepView", "file_at_ref", "marker_env", "protected_names"]


@dataclass(frozen=True)
class Finding:
    file: str
    package: str
    rule: str
    reason: str

    def line(self) -> str:
        return f"{self.file}: {self.package}: {self.reason} [{self.rule}]"


@dataclass
class CheckReport:
    stack: str
    folder: Path
    findings: list[Finding] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "folder": str(self.folder), "ok": self.ok,
                "findings": [asdict(f) for f in self.findings], "notices": self.notices,
                "seconds": round(self.seconds, 4)}


@dataclass
class StepView:
    """One locked step as check-lock sees it: its spec position, its file's pins, its lock.json entries."""

    index: int  # position in the spec (len(spec.steps) for a step the spec no longer has)
    name: str
    file: str  # shown path
    no_deps: bool
    reqs: list[LockedReq]
    packages: dict[str, LockedPackage]  # lock.json entries by name


def protected_names(spec: StackSpec, lock: Lock) -> set[str]:
    """The lock's recorded protected set plus the spec's ABI package."""
    recorded = lock.abi.protected if lock.abi else ()
    return {canonicalize_name(n) for n in recorded} | {spec.abi.package}


def marker_env(spec: StackSpec) -> dict[str, str]:
    """The target environment the lock is for: the stack's CPython on Linux, on the CPU of its
    ``[target]`` platform (x86_64, or aarch64 for GH200/GB200/GB10 hosts)."""
    return {"python_version": spec.python, "python_full_version": spec.python + ".0", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": spec.target.arch,
            "platform_python_implementation": "CPython", "implementation_name": "cpython",
            "implementation_version": spec.python + ".0", "platform_release": "", "platform_version": "",
            "extra": ""}


def file_at_ref(path: Path, ref: str) -> tuple[str, str | None]:
    """``--base REF``: the file at ``path`` as it is at git revision ``ref``.

    Returns (its path relative to the repository's top, its text or None when it does not exist
    there). Raises ConfigError when ``path`` is not in a git repository or ``ref`` does not exist.
    """
    from envbuild.errors import ConfigError
    from envbuild.run import run

    def git(*args: str) -> tuple[int, str]:
        res = run(["git", *args], cwd=path.resolve().parent, capture=True, separate_stderr=True, timeout=30)
        return res.returncode, res.output or ""

    rc, top = git("rev-parse", "--show-toplevel")
    if rc != 0:
        raise ConfigError(f"--base {ref}: {path.resolve().parent} is not inside a git repository")
    if git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")[0] != 0:
        raise ConfigError(f"--base {ref}: no such git revision", hint="Fetch it first (CI: fetch-depth: 0), "
                          "or name a branch, tag or commit that exists.")
    rel = path.resolve().relative_to(Path(top.strip()).resolve()).as_posix()
    rc, text = git("show", f"{ref}:{rel}")
    return rel, (text if rc == 0 else None)
