"""Provenance for receipts: who ran what, from which source, on which machine, under which names.

Captured at the start of a command, before anything heavy runs (no torch import): the source
revision, a short working-tree status and the machine class as they were when the run began.
Cheap: a few ``git`` calls and ``nvidia-smi -L``-level facts, no torch.

The three names that make two receipts comparable:

* host lineage (``ENVBUILD_HOST_LINEAGE``; default: the host name): which fleet/image lineage
  this host belongs to, so receipts of sibling hosts can be compared;
* profile (the stack spec's name, or ``ENVBUILD_PROFILE``);
* launch regime (``ENVBUILD_LAUNCH_REGIME``; default: set by the command, e.g.
  ``torchrun-standalone 2x1``).
"""

from __future__ import annotations

import os
import platform
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from envbuild import __version__
from envbuild.run import run

_GPU_FAMILY = re.compile(
    r"\b(GH200|GB200|B200|B100|H200|H100|H20|A100|A10G?|L40S|L40|L4|V100|T4|RTX \w+)\b"
)


class GitStateJSON(TypedDict):
    """A git work tree as it was when the run began."""

    path: str  # the top of the work tree
    revision: str | None  # `HEAD`'s commit
    dirty: bool | None  # true: tracked files differ from `HEAD` (null: unknown)
    status: list[str]  # `git status --porcelain`, first lines


class ProvenanceJSON(TypedDict):
    """Who ran what, from which source, on which machine (``Provenance.to_dict``)."""

    envbuild_version: str  # the envbuild that ran
    captured_at: str  # when, UTC, ISO 8601
    hostname: str  # the host's name
    # the kind of machine (`8xH200`, `cpu-16c`; `ENVBUILD_MACHINE_CLASS` overrides)
    machine_class: str
    platform: str  # the operating system, its release and the architecture
    python: str  # the interpreter envbuild runs in
    argv: list[str]  # the command line
    repo: GitStateJSON | None  # the repository of the working directory (the launch repo)
    envbuild_repo: GitStateJSON | None  # envbuild's own checkout, when it runs from one
    names: dict[str, str]  # the three names: host lineage, profile, launch regime


@dataclass(frozen=True)
class GitState:
    path: str
    revision: str | None
    dirty: bool | None
    status: tuple[str, ...] = ()  # `git status --porcelain`, first lines


@dataclass(frozen=True)
class Provenance:
    envbuild_version: str
    captured_at: str  # UTC, ISO 8601
    hostname: str
    machine_class: str
    platform: str
    python: str  # the interpreter envbuild runs in
    argv: tuple[str, ...]
    repo: GitState | None  # the repository of the working directory (the launch repo)
    envbuild_repo: GitState | None  # envbuild's own checkout, when it runs from one
    names: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> ProvenanceJSON:
        return {
            "envbuild_version": self.envbuild_version,
            "captured_at": self.captured_at,
            "hostname": self.hostname,
            "machine_class": self.machine_class,
            "platform": self.platform,
            "python": self.python,
            "argv": list(self.argv),
            "repo": _git_json(self.repo),
            "envbuild_repo": _git_json(self.envbuild_repo),
            "names": dict(self.names),
        }


def _git_json(state: GitState | None) -> GitStateJSON | None:
    if state is None:
        return None
    return {
        "path": state.path,
        "revision": state.revision,
        "dirty": state.dirty,
        "status": list(state.status),
    }


def git_state(path: Path) -> GitState | None:
    """Revision and dirty state of the git work tree containing ``path`` (None outside one)."""
    try:
        top = run(
            ["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture=True, timeout=10
        )
    except FileNotFoundError:
        return None
    if not top.ok or not top.output:
        return None
    root = top.output.strip()
    rev = run(["git", "-C", root, "rev-parse", "HEAD"], capture=True, timeout=10)
    status = run(
        ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
        capture=True,
        timeout=30,
    )
    lines = tuple((status.output or "").splitlines()) if status.ok else ()
    return GitState(
        path=root,
        revision=(rev.output or "").strip() if rev.ok else None,
        dirty=bool(lines) if status.ok else None,
        status=lines[:20],
    )


def machine_class(gpu_names: list[str], environ: Mapping[str, str] | None = None) -> str:
    """``8xH200``, ``1xH100``, or ``cpu-16c``; ``ENVBUILD_MACHINE_CLASS`` overrides."""
    env = os.environ if environ is None else environ
    if env.get("ENVBUILD_MACHINE_CLASS"):
        return env["ENVBUILD_MACHINE_CLASS"]
    if not gpu_names:
        return f"cpu-{os.cpu_count() or 1}c"
    families = []
    for name in gpu_names:
        m = _GPU_FAMILY.search(name)
        families.append(m.group(1) if m else name.replace("NVIDIA ", "").strip())
    kinds = sorted(set(families))
    return "+".join(f"{families.count(k)}x{k}" for k in kinds)


def capture(
    *,
    gpu_names: list[str] | None = None,
    profile: str | None = None,
    launch_regime: str | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Provenance:
    import sys

    env = os.environ if environ is None else environ
    if gpu_names is None:
        from envbuild.host.preflight import HostFacts, parse_gpus

        facts = HostFacts.gather(env)
        gpu_names = [g.name for g in parse_gpus(facts.gpu_query)] if facts.gpu_query else []
    host = socket.gethostname()
    here = Path(__file__).resolve().parents[1]
    repo = git_state(cwd or Path.cwd())
    own = git_state(here)
    if own is not None and repo is not None and own.path == repo.path:
        own = None
    names = {
        "host_lineage": env.get("ENVBUILD_HOST_LINEAGE") or host,
        "profile": env.get("ENVBUILD_PROFILE") or profile or "unknown",
        "launch_regime": env.get("ENVBUILD_LAUNCH_REGIME") or launch_regime or "single-process",
    }
    return Provenance(
        envbuild_version=__version__,
        captured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        hostname=host,
        machine_class=machine_class(gpu_names, env),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        python=sys.version.split()[0],
        argv=tuple(sys.argv),
        repo=repo,
        envbuild_repo=own,
        names=names,
    )
