"""What the gate reports: findings (each in the environments where it holds), and the policy."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from envbuild.gate.names import canonical

__all__ = ["Finding", "Policy", "RULES"]

# Every rule the gate applies, with one line on what it means (the docs and --json list these).
RULES: dict[str, str] = {
    "broken-lock": "the file is not a readable lock of its format",
    "broken-marker": "a marker in the lock does not parse (PEP 508), so where the entry applies is unknown",
    "torch-pins": "an environment installs torch more than once, or a torch that is not pinned exactly",
    "torch-min": "torch is below the policy's minimum (--torch-min or the stack's torch)",
    "torch-local": "torch's local tag is not the one the policy wants (--torch-local, e.g. cu132)",
    "protected-pins": "a --protect package is pinned more than once in one environment",
    "pypi-triton": "PyPI triton is installed beside pytorch-triton (both own the `triton` module)",
    "torch-requirement": "a locked package requires a torch (or protected package) the locked one does not satisfy",
    "extension-abi": "a prebuilt extension was built for another torch minor, CUDA major or C++ ABI "
                     "than the torch it is installed with",
    "torch-runtime": "torch declares runtime requirements (nvidia-*, cuda-toolkit, triton) the lock does not "
                     "install, or installs at another version",
    "torch-downgrade": "with --base: an environment's torch is older than at the base revision",
    "torch-swap": "with --base: the same torch version with another local tag (a re-tag: +cu130 -> +cu128)",
    "torch-gone": "with --base: an environment that installed torch at the base revision no longer does",
}


@dataclass(frozen=True, kw_only=True)
class Policy:
    package: str = "torch"
    minimum: str | None = None  # --torch-min, or the stack's abi.version
    local: str | None = None  # --torch-local, or the stack's abi.local
    protect: tuple[str, ...] = ()
    python: str = f"{sys.version_info[0]}.{sys.version_info[1]}"  # when the lock says nothing of Python

    @property
    def torch(self) -> str:
        return canonical(self.package)

    @property
    def protected(self) -> set[str]:
        return {self.torch, *(canonical(n) for n in self.protect)}


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
        return "; ".join(self.environments[:2]) + f" and {len(self.environments) - 2} more environments"

    def text(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        where = f" in {self.where()}" if self.environments else ""
        return f"{loc}: {self.package}: {self.reason} [{self.rule}]{where}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "package": self.package, "rule": self.rule,
                "reason": self.reason, "environments": list(self.environments), "accepted": self.accepted}
