"""The baseline: the environment's ABI identity frozen after the baseline step (``Baseline``,
stored in the manifest) and the protected set (``protected_set``: the one rule for the guard and
the lock). The identity is content only and lives in the manifest: nothing is written into the
dist-info it protects (see the package's docstring, "Identity").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envbuild.guard.site import (
    Dist,
    active_requirements,
    read_cuda,
    read_runtime_version,
    scan,
)
from envbuild.spec import ABI


@dataclass
class Baseline:
    """The environment's ABI identity, frozen after the baseline step (stored in the manifest).

    Content only (see "Identity" above): ``record_key`` is kept so that an unchanged RECORD needs
    no file check, never to decide that something was reinstalled."""

    package: str
    version: str  # what `import torch; torch.__version__` says
    cuda: str | None
    record_sha256: str
    record_key: tuple[int, int, int] = (0, 0, 0)
    # name -> {version, record_sha256, payload_sha256, stamped, record_key}
    protected: dict[str, dict[str, Any]] = field(default_factory=dict)
    dist_version: str = ""  # the dist-info version, what an installer's constraint must name
    payload_sha256: str = ""
    # a baseline frozen before envbuild stopped writing into dist-info folders: the torch it saw
    # held the stamp ``ENVBUILD_BASELINE`` (``guard.site.STAMP``), which a reinstall removes
    stamped: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Baseline:
        return cls(
            package=data["package"],
            version=data["version"],
            cuda=data.get("cuda"),
            record_sha256=data["record_sha256"],
            record_key=_key(data),
            protected={k: dict(v) for k, v in data.get("protected", {}).items()},
            dist_version=data.get("dist_version") or data["version"],
            payload_sha256=data.get("payload_sha256", ""),
            stamped=bool(data.get("stamped", False)),
        )

    def pins(self) -> list[str]:
        """Constraint lines: the ABI package and the protected set at their exact versions."""
        lines = [f"{self.package}=={self.dist_version or self.version}"]
        lines += [f"{n}=={p['version']}" for n, p in sorted(self.protected.items())]
        return lines


def _key(data: Mapping[str, Any]) -> tuple[int, int, int]:
    """``record_key``; a manifest written before it has ``record_id`` (inode, mtime_ns)."""
    raw = data.get("record_key") or [*data.get("record_id", (0, 0))[:2], -1]
    return int(raw[0]), int(raw[1]), int(raw[2])


def _identity(d: Dist) -> dict[str, Any]:
    return {
        "version": d.version,
        "record_sha256": d.record_sha256,
        "payload_sha256": d.payload_sha256(),
        "stamped": d.stamped,
        "record_key": list(d.record_key),
    }


def protected_set(
    abi: ABI, installed: Collection[str], torch_requires: Iterable[Requirement]
) -> set[str]:
    """The frozen set, the one rule for the ABI guard and the lock: the ``abi.protect`` matches
    among ``installed`` (canonical names) plus torch's own triton and nvidia-* requirements that
    are installed. The ABI package itself is checked on its own and is not in it."""
    names = {n for n in installed if n != abi.package and abi.is_protected(n)}
    for req in torch_requires:
        n = canonicalize_name(req.name)
        if (n.startswith("nvidia-") or "triton" in n) and n in installed:
            names.add(n)
    return names


def protected_names(abi: ABI, dists: Mapping[str, Dist], env: Mapping[str, str]) -> set[str]:
    """The frozen set of an environment (``protected_set`` over its distributions)."""
    torch = dists.get(abi.package)
    return protected_set(
        abi, dists.keys(), active_requirements(torch, env) if torch is not None else ()
    )


def take_baseline(abi: ABI, site: Path, env: Mapping[str, str]) -> Baseline:
    """The environment's identity now, read from its files (nothing is written)."""
    dists = scan(site)
    torch = dists.get(abi.package)
    if torch is None:
        raise LookupError(abi.package)
    names = sorted(protected_names(abi, dists, env))
    module = abi.package.replace("-", "_")
    return Baseline(
        package=abi.package,
        version=read_runtime_version(site, module) or torch.version,
        dist_version=torch.version,
        cuda=read_cuda(site, module),
        record_sha256=torch.record_sha256,
        record_key=torch.record_key,
        payload_sha256=torch.payload_sha256(),
        stamped=torch.stamped,
        protected={n: _identity(dists[n]) for n in names},
    )
