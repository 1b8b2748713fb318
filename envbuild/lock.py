"""The lock: per-step hash-pinned requirement files plus a manifest, next to the spec.

Layout (``lockfiles/<profile>/`` beside ``stack.toml``; written by ``envbuild lock``)::

    01-bootstrap.txt      one file per step, in step order: ``name==version --hash=sha256:...``
    02-torch.txt          lines (pip-compile's format, no index options), installable by hand
    ...                   with ``pip install --require-hashes [--no-deps] -r FILE``
    lock.json             the manifest (below)
    pylock.toml           PEP 751 export of the whole environment (``pylock_export``)

``lock.json`` (``lock_version`` 1)::

    {
      "lock_version": 1,
      "stack": "cpu", "spec": "stack.toml",
      "spec_digest": "sha256:...",        # StackSpec.digest of the spec this lock was made from
      "python": "3.11",                   # the stack's Python; the resolver ran under it
      "created": "2026-01-01T00:00:00Z",
      "tools": {"envbuild": ..., "pip-tools": ..., "pip": ..., "python": "3.11.7"},
      "abi": {"package": "torch", "version": ..., "local": ..., "protected": [names]},
      "steps": [                          # spec order
        {"name": "torch", "role": "baseline", "locked": true,
         "file": "02-torch.txt", "file_sha256": "<hex of the file>",
         "flags": {"no_deps": false, "pre": false, "no_build_isolation": false,
                   "upgrade": false, "reinstall": false, "no_index": false},
         "sources": {"index_url": ..., "extra_index_urls": [...], "find_links": [...]},  # used, redacted
         "packages": [
           {"name": "torch", "version": "2.13.0+cpu", "requested": true,
            "hashes": ["<sha256 hex>", ...],              # every hash the file accepts
            "artifacts": [{"filename": ..., "url": ..., "sha256": ...}],  # where each hash was found
            "requires_dist": ["filelock", ...],           # core metadata; null when not read
            "vcs": null}                                  # or {"url": ..., "commit": <40 hex>}
         ]},
        {"name": "prebuilt-cuda", "locked": false, "reason": "..."}  # a partial lock
      ]
    }

Consumers: ``provision`` (through ``locked_requirements``), ``check-lock``, and the wheelhouse
mirror, which reads name, version, sha256 and URL of every artifact from ``lock.json``.

A git requirement is locked to a commit (``name @ git+URL@<sha>``); pip cannot hash a VCS
checkout, so that line carries no ``--hash`` and the step installs without ``--require-hashes``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild._io import sha256_file
from envbuild.errors import LockError
from envbuild.spec import StackSpec

LOCK_VERSION = 1
MANIFEST = "lock.json"
PYLOCK = "pylock.toml"
_HASH = re.compile(r"^--hash[= ](?P<algo>[a-z0-9]+):(?P<value>\S*)$")
_SHA40 = re.compile(r"^[0-9a-f]{40}$")

__all__ = [
    "LOCK_VERSION", "MANIFEST", "LockManifest", "LockedReq", "LockedStep", "lock_dir",
    "locked_requirements", "parse_requirements_text", "read_manifest", "step_filename",
]


def lock_dir(spec: StackSpec) -> Path:
    return spec.path.parent


def step_filename(number: int, name: str) -> str:
    return f"{number:02d}-{name}.txt"


# ----------------------------------------------------------------------------- requirement files


@dataclass(frozen=True)
class LockedReq:
    """One requirement line of a step file."""

    name: str  # canonical
    raw: str  # the requirement as written (without options)
    line: int  # 1-based line where it starts
    version: str | None  # from an exact ``==`` pin, else None
    hashes: tuple[str, ...]  # sha256 hex values
    url: str | None = None  # direct reference (``name @ URL``)
    bad_hashes: tuple[str, ...] = ()  # --hash values that are not valid sha256

    @property
    def vcs_commit(self) -> str | None:
        if self.url and self.url.startswith("git+") and "@" in self.url.rsplit("/", 1)[-1]:
            ref = self.url.rsplit("@", 1)[1].split("#", 1)[0]
            return ref if _SHA40.match(ref) else None
        return None

    @property
    def is_vcs(self) -> bool:
        return bool(self.url and self.url.split("+", 1)[0] in ("git", "hg", "svn", "bzr"))


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    buf, start = "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            yield start, buf.strip()
        buf = ""
    if buf.strip():
        yield start, buf.strip()


def parse_requirements_text(text: str, where: str) -> list[LockedReq]:
    """Parse a step file; raises ``LockError`` naming ``where`` and the line for anything broken."""
    out: list[LockedReq] = []
    for lineno, line in _logical_lines(text):
        tokens = line.split()
        # the requirement is everything before the first option token
        req_tokens: list[str] = []
        opts: list[str] = []
        for t in tokens:
            (opts if t.startswith("--") or opts else req_tokens).append(t)
        if not req_tokens:
            raise LockError(f"{where}:{lineno}: an option line without a requirement ({line!r}); "
                            "a lock file holds only `name==version --hash=sha256:...` lines",
                            hint="Re-run `envbuild lock` to regenerate it.")
        raw = " ".join(req_tokens)
        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            raise LockError(f"{where}:{lineno}: not a valid requirement {raw!r}: {exc}",
                            hint="Re-run `envbuild lock` to regenerate the file.") from None
        hashes, bad = [], []
        for opt in opts:
            m = _HASH.match(opt)
            if m is None:
                raise LockError(f"{where}:{lineno}: unexpected option {opt!r} for {req.name} "
                                "(only --hash=sha256:<64 hex> belongs in a lock file)",
                                hint="Re-run `envbuild lock` to regenerate the file.")
            value = m.group("value")
            if m.group("algo") != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", value):
                bad.append(f"{m.group('algo')}:{value}")
            else:
                hashes.append(value)
        version = None
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            version = specs[0].version
        out.append(LockedReq(canonicalize_name(req.name), raw, lineno, version, tuple(hashes),
                             req.url, tuple(bad)))
    return out


def format_requirement(name: str, version: str | None, hashes: Iterable[str], url: str | None = None) -> str:
    head = f"{name} @ {url}" if url else f"{name}=={version}"
    hs = sorted(set(hashes))
    if not hs:
        return head + "\n"
    return head + " \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hs) + "\n"


# ----------------------------------------------------------------------------- the manifest


@dataclass(frozen=True)
class LockedStep:
    name: str
    locked: bool
    data: dict[str, Any]  # the raw manifest entry

    @property
    def file(self) -> str | None:
        f = self.data.get("file")
        return str(f) if f else None

    @property
    def flags(self) -> dict[str, Any]:
        return dict(self.data.get("flags", {}))

    @property
    def packages(self) -> list[dict[str, Any]]:
        return list(self.data.get("packages", []))

    @property
    def role(self) -> str:
        return str(self.data.get("role", ""))


@dataclass(frozen=True)
class LockManifest:
    path: Path
    data: dict[str, Any]
    steps: tuple[LockedStep, ...] = field(default=())

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def spec_digest(self) -> str:
        return str(self.data.get("spec_digest", ""))

    def step(self, name: str) -> LockedStep | None:
        return next((s for s in self.steps if s.name == name), None)


def read_manifest(folder: Path) -> LockManifest | None:
    """The lock in ``folder``, or None when there is none. A broken manifest raises ``LockError``."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    return manifest_from_text(path, path.read_text(encoding="utf-8"))


def manifest_from_text(path: Path, text: str) -> LockManifest:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LockError(f"{path}: not valid JSON ({exc})", hint="Re-run `envbuild lock` to regenerate it.") from None
    if not isinstance(data, dict) or data.get("lock_version") != LOCK_VERSION or not isinstance(data.get("steps"), list):
        raise LockError(f"{path}: not an envbuild lock manifest of lock_version {LOCK_VERSION}",
                        hint="Re-run `envbuild lock` to regenerate it.")
    steps = []
    for i, s in enumerate(data["steps"]):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise LockError(f"{path}: steps[{i}] is not a step entry", hint="Re-run `envbuild lock`.")
        steps.append(LockedStep(s["name"], bool(s.get("locked", True)), s))
    return LockManifest(path, data, tuple(steps))


def stale_reason(spec: StackSpec, manifest: LockManifest) -> str | None:
    """Why the lock no longer matches the spec, or None."""
    if manifest.spec_digest != spec.digest:
        return (f"the lock was made from a different spec (lock {manifest.spec_digest[:19]}..., "
                f"spec now {spec.digest[:19]}...)")
    names = [s.name for s in spec.steps]
    locked = [s.name for s in manifest.steps]
    if names != locked:
        return f"the lock's steps {locked} are not the spec's steps {names}"
    return None


def locked_requirements(spec: StackSpec) -> dict[str, Path]:
    """{step name: hash-pinned requirement file} from the lock beside the spec; {} without a lock.

    Raises ``LockError`` when the lock was made from another spec (run ``envbuild lock``), or a
    step file is missing, broken, or differs from what the manifest recorded.
    """
    manifest = read_manifest(lock_dir(spec))
    if manifest is None:
        return {}
    where = manifest.path
    if reason := stale_reason(spec, manifest):
        raise LockError(f"{where}: the lock is stale: {reason}",
                        hint=f"Run `envbuild lock --stack {spec.path}` and commit the result "
                        "(or provision with --no-lock to resolve from the spec).")
    out: dict[str, Path] = {}
    for step in manifest.steps:
        if not step.locked or not step.file:
            continue
        path = manifest.folder / step.file
        if not path.is_file():
            raise LockError(f"{path}: the lock file of step {step.name!r} is missing",
                            hint=f"Run `envbuild lock --stack {spec.path}` to regenerate the lock.")
        for r in parse_requirements_text(path.read_text(encoding="utf-8"), str(path)):
            if r.bad_hashes:
                raise LockError(f"{path}:{r.line}: {r.name}: malformed hash {r.bad_hashes[0]!r} "
                                "(want --hash=sha256:<64 hex digits>)",
                                hint=f"Run `envbuild lock --stack {spec.path}` to regenerate the lock.")
            if not r.hashes and not r.is_vcs:
                raise LockError(f"{path}:{r.line}: {r.name} has no --hash; every locked artifact needs one",
                                hint=f"Run `envbuild lock --stack {spec.path}` to regenerate the lock.")
        if step.data.get("file_sha256") and sha256_file(path) != step.data["file_sha256"]:
            raise LockError(f"{path}: the file was changed after `envbuild lock` wrote it (its sha256 is not "
                            f"the one in {MANIFEST})",
                            hint=f"Run `envbuild lock --stack {spec.path}` instead of editing lock files by hand.")
        out[step.name] = path
    return out
