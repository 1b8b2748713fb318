"""What a lock provision leaves in its venv, and what the commands after it read from there.

``provision --lock`` writes the venv's environment record (``envbuild-environment.json``, the
record ``commands.common`` reads to find an environment) with a ``lock`` section: the lock file,
its sha256, the chosen environment, the stack provision ran (so ``smoke``, ``verify`` and
``receipt`` find the environment with no spec file to point at) and what each stage installed.

``smoke`` picks its checks from that record (``smoke_selection``): torch's own checks (matmul,
sdpa, triton, torch.compile), the kernel check of each extension the lock installed or, in an
adopted venv, found there at the locked version (flash-attn, causal-conv1d, mamba-ssm, fla, ...),
none for what the environment does not have, and an import of every
package the lock put in the extension and source-build stages: the place an ``undefined
symbol`` shows, on a host with no GPU too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild._io import atomic_write_json
from envbuild.errors import ConfigError
from envbuild.spec import ABI, Host, Layout, Overlap, StackSpec, Step

if TYPE_CHECKING:
    from envbuild.proof.receipt import SmokeSelectionJSON

__all__ = [
    "RECORD",
    "SmokeSelection",
    "lock_record",
    "read_record",
    "smoke_selection",
    "spec_from_record",
]

RECORD = "envbuild-environment.json"  # the name commands.common reads (ENVIRONMENT_RECORD)
SCHEMA = "envbuild.environment/1"
TORCH_CHECKS = ("matmul", "sdpa", "triton", "torch.compile")
# the distribution(s) each kernel check tests (canonical names)
KERNEL_CHECKS: dict[str, tuple[str, ...]] = {
    "flash_attn": ("flash-attn",),
    "causal_conv1d": ("causal-conv1d",),
    "mamba_ssm.selective_scan": ("mamba-ssm",),
    "fla": ("fla-core", "flash-linear-attention"),
    "flash_attn_4": ("flash-attn-4",),
}
_IMPORT_STAGES = ("extensions", "builds")


def lock_record(spec: StackSpec, lock: Mapping[str, object]) -> dict[str, Any]:
    """The ``lock`` section of the venv's record: the lock's identity and the stack provision
    ran."""
    abi = spec.abi
    return {
        **lock,
        "stack": {
            "name": spec.name,
            "description": spec.description,
            "python": spec.python,
            "digest": spec.digest,
            "root": spec.layout.root,
            "abi": {
                "version": abi.version,
                "local": abi.local,
                "protect": list(abi.protect),
                "triton_provider": abi.triton_provider,
                "adopt": abi.adopt,
                # the overlaps provision found and gave a winner (``provision.overlaps``)
                "overlaps": [
                    {"packages": list(o.packages), "winner": o.winner} for o in abi.overlaps
                ],
            },
            "steps": [
                {
                    "name": s.name,
                    "packages": list(s.packages),
                    "no_build_isolation": s.no_build_isolation,
                }
                for s in spec.steps
            ],
        },
    }


def write_record(venv: Path, root: Path, spec: StackSpec, lock: Mapping[str, object]) -> bool:
    """Write the venv's record (False where the venv is not one envbuild may write into)."""
    if not (venv / "pyvenv.cfg").is_file():
        return False
    doc = {
        "schema": SCHEMA,
        "root": str(root.absolute()),
        "venv": str(venv),
        "stack": str(spec.path.absolute()),
        "stack_name": spec.name,
        "lock": lock_record(spec, lock),
    }
    try:
        atomic_write_json(venv / RECORD, doc)
    except OSError:
        return False
    return True


def read_record(venv: Path) -> dict[str, Any] | None:
    """The ``lock`` section of ``venv``'s record; None where the venv was not provisioned from a
    lock."""
    try:
        doc = json.loads((venv / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    lock = doc.get("lock") if isinstance(doc, dict) else None
    return lock if isinstance(lock, dict) and isinstance(lock.get("stack"), dict) else None


def spec_from_record(lock: dict[str, Any]) -> StackSpec:
    """The stack a lock provision ran, as its record keeps it (no lock file to read again)."""
    try:
        s = lock["stack"]
        a = s["abi"]
        steps = tuple(
            Step(
                name=str(x["name"]),
                packages=tuple(str(p) for p in x["packages"]),
                no_deps=True,
                no_index=True,
                no_build_isolation=bool(x.get("no_build_isolation")),
            )
            for x in s["steps"]
        )
        return StackSpec(
            path=Path(str(lock["lock_file"])),
            name=str(s["name"]),
            description=str(s.get("description") or ""),
            python=str(s["python"]),
            abi=ABI(
                package="torch",
                version=str(a["version"]),
                local=a.get("local"),
                protect=tuple(str(p) for p in a.get("protect") or ()),
                triton_provider=a.get("triton_provider"),
                adopt=bool(a.get("adopt")),
                overlaps=tuple(
                    Overlap(packages=tuple(str(p) for p in o["packages"]), winner=str(o["winner"]))
                    for o in a.get("overlaps") or ()
                ),
            ),
            layout=Layout(root=str(s["root"]), links={}, min_free_gb=1.0),
            host=Host(),
            env={},
            steps=steps,
            digest=str(s["digest"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"the environment's record of its lock provision is unreadable ({type(exc).__name__}:"
            f" {exc})",
            hint="Provision it again with the same `envbuild provision --lock FILE`.",
        ) from exc


@dataclass(frozen=True)
class SmokeSelection:
    """The checks ``smoke`` runs after a lock provision, and why."""

    only: tuple[str, ...]  # kernel checks
    imports: tuple[str, ...]  # distributions whose modules are imported
    lock_file: str

    def to_json(self) -> SmokeSelectionJSON:
        return {
            "lock_file": self.lock_file,
            "checks": list(self.only),
            "imports": list(self.imports),
        }


def smoke_selection(lock: dict[str, Any]) -> SmokeSelection:
    """The checks for what the lock installed (see the module docstring)."""
    steps = lock["stack"]["steps"]
    installed: dict[str, str] = {}
    for step in steps:
        for p in step["packages"]:
            try:  # name==version, name, or name @ URL (the pip backend's project)
                name = Requirement(str(p)).name
            except InvalidRequirement:
                continue
            installed[str(canonicalize_name(name))] = str(step["name"])
    kept = lock.get("kept")  # in an adopted venv: what it already held, as the lock pins it
    if isinstance(kept, dict):
        for name, stage in kept.items():
            installed.setdefault(str(canonicalize_name(str(name))), str(stage))
    kernels = [name for name, dists in KERNEL_CHECKS.items() if any(d in installed for d in dists)]
    imports = [n for n, stage in installed.items() if stage in _IMPORT_STAGES]
    return SmokeSelection(
        (*TORCH_CHECKS, *kernels), tuple(sorted(imports)), str(lock.get("lock_file", ""))
    )
