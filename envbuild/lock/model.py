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
         "step_digest": "sha256:...",     # python + [abi] + the [[step]] tables up to this one
                                          # (unexpanded, as in spec_digest): all that decides
                                          # this step's resolution; see ``step_digests``
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
        {"name": "prebuilt-cuda", "locked": false, "reason": "...",  # a partial lock
         "step_digest": "sha256:..."}
      ]
    }

Which specs a lock serves (``locked_requirements``):

- the spec it was made from (``spec_digest`` equal, same steps): every step file. This is the
  rule ``check-lock`` applies, and the only one for locks written before ``step_digest``;
- a *prefix* of that spec, such as a Docker layer's slice (the spec cut after a step): its
  steps must be the lock's first steps, in order, each with an equal ``step_digest``; it gets
  the files of those steps. A step whose digest differs is named in a ``LockError``.

A *prefix manifest* (``prefix_manifest``; ``envbuild docker`` puts one beside each layer's
slice) is ``lock.json`` cut to the first N steps, marked ``"prefix": true``, without
``spec_digest`` and ``created``, so its bytes change only when a step up to N is locked anew;
it is checked by the prefix rule alone.

Consumers: ``provision`` (through ``locked_requirements``), ``check-lock``, ``envbuild docker``
(prefix manifests and step files per layer), and the wheelhouse
mirror, which reads name, version, sha256 and URL of every artifact from ``lock.json``.

A git requirement is locked to a commit (``name @ git+URL@<sha>``); pip cannot hash a VCS
checkout, so that line carries no ``--hash``. pip's hash-checking mode refuses a file that mixes
the two, so the pip backend installs such a file in runs of one kind, in the step's package order
(``install.pip_runs``): the hashed runs under ``--require-hashes``, the commit-pinned ones without,
``--no-deps``. uv's ``--verify-hashes`` checks the hashes present and takes the file whole.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild._io import sha256_file
from envbuild.errors import LockError
from envbuild.spec import StackSpec, spec_digest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

LOCK_VERSION = 1
MANIFEST = "lock.json"
PYLOCK = "pylock.toml"
_HASH = re.compile(r"^--hash[= ](?P<algo>[a-z0-9]+):(?P<value>\S*)$")
_SHA40 = re.compile(r"^[0-9a-f]{40}$")

__all__ = [
    "LOCK_VERSION", "MANIFEST", "LockManifest", "LockedReq", "LockedStep", "lock_dir",
    "locked_requirements", "parse_requirements_text", "prefix_manifest", "read_manifest",
    "stale_reason", "step_digests", "step_filename",
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

    @property
    def digest(self) -> str | None:
        """The step digest recorded when the lock was made; None in locks written before it existed."""
        d = self.data.get("step_digest")
        return str(d) if d else None


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

    @property
    def is_prefix(self) -> bool:
        """A manifest cut to the first steps of a lock (``prefix_manifest``), as in a Docker layer."""
        return self.data.get("prefix") is True

    @property
    def has_step_digests(self) -> bool:
        return bool(self.steps) and all(s.digest for s in self.steps)

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


def step_digests(spec: StackSpec) -> list[str] | None:
    """One digest per step of ``spec``: what decides that step's resolution.

    Step *i*'s digest covers ``python``, the ``[abi]`` table and the ``[[step]]`` tables 1..i,
    unexpanded (``${VAR}`` as written, like ``StackSpec.digest``): a step is resolved against
    the baseline and the earlier steps' pins, so it changes when any of those change, and
    never when a later step, ``[layout]``, ``[host]`` or a comment does. Read from the spec's
    file; None when that file no longer holds the spec ``spec`` was loaded from.
    """
    try:
        data = tomllib.loads(spec.path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    steps = data.get("step")
    if spec_digest(data) != spec.digest or not isinstance(steps, list) or len(steps) != len(spec.steps):
        return None
    base = {"python": data.get("python"), "abi": data.get("abi", {})}
    return [spec_digest({**base, "step": steps[:i + 1]}) for i in range(len(steps))]


def _changed_step(spec: StackSpec, manifest: LockManifest) -> str | None:
    """Why ``spec``'s steps are not the lock's first steps with equal step digests, or None."""
    names = [s.name for s in spec.steps]
    locked = [s.name for s in manifest.steps]
    if locked[:len(names)] != names:
        return f"the spec's steps {names} are not the first steps of the lock ({locked})"
    digests = step_digests(spec)
    if digests is None:
        return f"{spec.path} changed while envbuild was reading it"
    for step, got in zip(manifest.steps[:len(digests)], digests, strict=True):
        if step.digest != got:
            return (f"step {step.name!r} changed since the lock was made (step digest "
                    f"{(step.digest or 'none')[:19]}... in the lock, {got[:19]}... now)")
    return None


def _serves_prefix(spec: StackSpec, manifest: LockManifest) -> bool:
    """Whether ``spec`` is checked by the prefix rule: a prefix manifest, or fewer steps than the lock."""
    return manifest.is_prefix or (manifest.has_step_digests and len(spec.steps) < len(manifest.steps)
                                  and manifest.spec_digest != spec.digest)


def stale_reason(spec: StackSpec, manifest: LockManifest) -> str | None:
    """Why the lock no longer matches the spec, or None.

    A lock made from ``spec`` matches by its whole-spec digest and step names. A prefix
    manifest (``prefix_manifest``) matches by step digests; see the module docstring.
    """
    if manifest.is_prefix:
        if not manifest.has_step_digests:
            return "the prefix manifest records no step digests"
        return _changed_step(spec, manifest)
    if manifest.spec_digest != spec.digest:
        reason = (f"the lock was made from a different spec (lock {manifest.spec_digest[:19]}..., "
                  f"spec now {spec.digest[:19]}...)")
        if manifest.has_step_digests and (changed := _changed_step(spec, manifest)):
            reason += f"; {changed}"
        return reason
    names = [s.name for s in spec.steps]
    locked = [s.name for s in manifest.steps]
    if names != locked:
        return f"the lock's steps {locked} are not the spec's steps {names}"
    return None


def prefix_manifest(manifest: LockManifest, count: int) -> dict[str, Any]:
    """``manifest`` cut to its first ``count`` steps, for a spec cut after step ``count``.

    Without ``spec_digest`` (it changes with every later step) and ``created``: the result
    changes only when one of those steps is locked anew, which keeps a Docker layer that
    copies it cached. Raises ``LockError`` for a lock written before step digests.
    """
    if not manifest.has_step_digests:
        raise LockError(f"{manifest.path}: the lock records no per-step digests (it was written by an older "
                        "envbuild), so a spec cut after a step cannot be checked against it",
                        hint="Run `envbuild lock` again for this stack and commit the result.")
    if not 0 < count <= len(manifest.steps):
        raise ValueError(f"count {count} out of range 1..{len(manifest.steps)}")
    data: dict[str, Any] = {"lock_version": manifest.data["lock_version"], "prefix": True}
    data.update((k, v) for k, v in manifest.data.items()
                if k not in ("lock_version", "prefix", "spec_digest", "created", "steps"))
    data["steps"] = [s.data for s in manifest.steps[:count]]
    return data


def locked_requirements(spec: StackSpec) -> dict[str, Path]:
    """{step name: hash-pinned requirement file} from the lock beside the spec; {} without a lock.

    ``spec`` is the spec the lock was made from, or a prefix of it (a Docker layer's slice: the
    same first steps, each with the step digest the lock recorded); a prefix gets the files of
    its own steps. Raises ``LockError`` when the lock was made from another spec or a step
    changed since (run ``envbuild lock``), or a step file is missing, broken, or differs from
    what the manifest recorded.
    """
    manifest = read_manifest(lock_dir(spec))
    if manifest is None:
        return {}
    where = manifest.path
    hint = (f"Run `envbuild lock --stack {spec.path}` and commit the result "
            "(or provision with --no-lock to resolve from the spec).")
    if _serves_prefix(spec, manifest):
        if not manifest.has_step_digests:
            raise LockError(f"{where}: the prefix manifest records no step digests", hint=hint)
        if changed := _changed_step(spec, manifest):
            raise LockError(f"{where}: the lock is stale for {spec.path}: {changed}",
                            hint="Run `envbuild lock` for the full stack and commit the result; for an image, "
                            "render it again with `envbuild docker` (or use --no-lock to resolve from the spec).")
        steps = manifest.steps[:len(spec.steps)]
    else:
        if reason := stale_reason(spec, manifest):
            raise LockError(f"{where}: the lock is stale: {reason}", hint=hint)
        steps = manifest.steps
    out: dict[str, Path] = {}
    for step in steps:
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
