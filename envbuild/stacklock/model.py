"""The lock: per-step hash-pinned requirement files plus ``lock.json``, next to the spec.

Layout (``lockfiles/<profile>/`` beside ``stack.toml``; written by ``envbuild lock``)::

    01-bootstrap.txt      one file per step, in step order: ``name==version --hash=sha256:...``
    02-torch.txt          lines (pip-compile's format, no index options), installable by hand
    ...                   with ``pip install --require-hashes [--no-deps] -r FILE`` (``stepfile``)
    lock.json             the lock's index of steps (below): ``Lock``
    pylock.toml           PEP 751 export of the whole environment (``stacklock.pylock``)

``lock.json`` (``lock_version`` 1), read and written only through the frozen dataclasses below,
in the manner of ``packaging.pylock``: ``Lock.from_dict`` checks every type and names the bad
key by its dotted path (``lock.json: steps[2].file: missing``) in a ``LockError`` (exit 8);
``Lock.to_dict`` writes the same keys in the same order::

    {
      "lock_version": 1,
      "stack": "cpu", "spec": "stack.toml",
      "spec_digest": "sha256:...",        # StackSpec.digest of the spec this lock was made from
      "python": "3.11",                   # the stack's Python; the resolver ran under it
      "created": "2026-01-01T00:00:00Z",
      "tools": {"envbuild": ..., "pip-tools": ..., "pip": ..., "python": "3.11.7"},
      "abi": {"package": "torch", "version": ..., "local": ..., "protected": [names]},
      "steps": [                          # spec order
        {"name": "torch", "role": "baseline",
         "step_digest": "sha256:...",     # python + [abi] + the [[step]] tables up to this one
                                          # (unexpanded, as in spec_digest): all that decides
                                          # this step's resolution; see ``step_digests``
         "flags": {"no_deps": false, "pre": false, "no_build_isolation": false, "upgrade": false,
                   "upgrade_strategy": "only-if-needed", "reinstall": false, "no_index": false},
         "requirements": ["torch==2.13.0+cpu"],  # the step's packages as the spec names them
         (redacted):
                                          # what `lock` compares to say "spec changed"; absent in
                                          older locks
         "replaces": ["numpy"],           # only when the spec says so: earlier steps' packages this
                                          # step may pin at another version (``stacklock.make``)
         "locked": true,
         "file": "02-torch.txt", "file_sha256": "<hex of the file>",
         "sources": {"index_url": ..., "extra_index_urls": [...], "find_links": [...],
                     "installer_configured": false},               # used, redacted
         "packages": [
           {"name": "torch", "version": "2.13.0+cpu", "requested": true,
            "hashes": ["<sha256 hex>", ...],              # every hash the file accepts
            "artifacts": [{"filename": ..., "url": ..., "sha256": ...}],  # where each hash was
            found "requires_dist": ["filelock", ...],           # core metadata; null when not read
            "vcs": null}                                  # or {"url": ..., "commit": <40 hex>,
                                                          #  "ref": "main" (what the spec asked
                                                          for),
                                                          #  "wheel": {"filename", "version",
                                                          "sha256"}
                                                          #  (built by `wheelhouse mirror`: offline
                                                          installs it)}
         ]},
        {"name": "prebuilt-cuda", ..., "locked": false, "reason": "..."}   # a partial lock
      ]
    }

A locked step must name its file (a plain name in the lock's folder) and that file's sha256:
a step entry without them is a broken lock, never a step that quietly resolves from the spec.
Which specs a lock serves, and the prefix manifests of Docker layers, are in ``stacklock.serve``.

A git requirement is locked to a commit (``name @ git+URL@<sha>``); pip cannot hash a VCS
checkout, so that line carries no ``--hash``. pip's hash-checking mode refuses a file that mixes
the two, so the pip backend installs such a file in runs of one kind, in the step's package order
(``installer.pip_runs``): the hashed runs under ``--require-hashes``, the commit-pinned ones
without, ``--no-deps``. uv's ``--verify-hashes`` checks the hashes present and takes the file whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from envbuild._io import atomic_write_json
from envbuild.errors import LockError
from envbuild.index.client import Artifact
from envbuild.spec import StackSpec
from envbuild.spec.stepfile import (  # re-exported: the step-file API lives beside the lock model
    LockedReq,
    format_requirement,
    parse_requirements_text,
    read_step_file,
    read_text,
)

LOCK_VERSION = 1
MANIFEST = "lock.json"
PYLOCK = "pylock.toml"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.txt$")
_REGENERATE = (
    "Re-run `envbuild lock` to regenerate it (a lock is written by envbuild, not by hand), "
    "or provision with --no-lock to resolve from the spec."
)
T = TypeVar("T")

__all__ = [
    "LOCK_VERSION",
    "MANIFEST",
    "PYLOCK",
    "BuiltWheel",
    "Lock",
    "LockAbi",
    "LockedPackage",
    "LockedReq",
    "LockedStep",
    "StepFlags",
    "StepSources",
    "VcsPin",
    "format_requirement",
    "lock_dir",
    "lock_from_text",
    "parse_requirements_text",
    "read_stack_lock",
    "read_step_file",
    "step_filename",
    "write_lock",
]


def lock_dir(spec: StackSpec) -> Path:
    return spec.path.parent


def step_filename(number: int, name: str) -> str:
    return f"{number:02d}-{name}.txt"


# ----------------------------------------------------------------------------- typed reading


_TYPE_NAMES = {
    str: "a string",
    bool: "true or false",
    int: "an integer",
    list: "a list",
    dict: "a table (object)",
}


class _Fields:
    """Typed getters over one JSON object, each error naming the dotted path of the bad key."""

    def __init__(self, data: object, where: str, path: str) -> None:
        self.where, self.path = where, path
        if not isinstance(data, dict):
            raise self.fail(None, f"must be {_TYPE_NAMES[dict]}, not {_kind(data)}")
        self.data: dict[str, Any] = data

    def fail(self, key: str | None, what: str) -> LockError:
        at = ".".join(p for p in (self.path, key) if p) or "the top level"
        return LockError(f"{self.where}: {at}: {what}", hint=_REGENERATE)

    def get(
        self, key: str, kind: type[T], default: T | None = None, *, required: bool = False
    ) -> T | None:
        if key not in self.data or (self.data[key] is None and not required):
            if required:
                raise self.fail(key, "missing")
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(
                key, f"must be {_TYPE_NAMES.get(kind, kind.__name__)}, not {_kind(value)}"
            )
        return value

    def req(self, key: str, kind: type[T]) -> T:
        value = self.get(key, kind, required=True)
        assert value is not None
        return value

    def strings(self, key: str, *, required: bool = False) -> tuple[str, ...]:
        items = self.get(key, list, required=required) or []
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.fail(f"{key}[{i}]", f"must be a string, not {_kind(item)}")
        return tuple(items)

    def sha256(self, key: str, value: str) -> str:
        if not _SHA256.match(value):
            raise self.fail(key, f"not a sha256 hex digest ({value[:80]!r})")
        return value

    def table(self, key: str, *, required: bool = False) -> _Fields | None:
        value = self.get(key, dict, required=required)
        return (
            None
            if value is None
            else _Fields(value, self.where, f"{self.path}.{key}" if self.path else key)
        )

    def tables(self, key: str, *, required: bool = False) -> list[_Fields]:
        items = self.get(key, list, required=required) or []
        prefix = f"{self.path}.{key}" if self.path else key
        return [_Fields(item, self.where, f"{prefix}[{i}]") for i, item in enumerate(items)]


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table (object)",
    }.get(type(value), type(value).__name__)


# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True, kw_only=True)
class BuiltWheel:
    """The wheel ``wheelhouse mirror`` built from a git (or direct-URL sdist) requirement at its
    locked commit: what an offline install takes instead, hash-checked (``vcs.wheel``)."""

    filename: str
    version: str
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"filename": self.filename, "version": self.version, "sha256": self.sha256}


@dataclass(frozen=True, kw_only=True)
class VcsPin:
    url: str
    commit: str | None  # 40 hex; None when the lock could not pin it (check-lock flags it)
    # the ref the spec asked for (HEAD, a branch, a tag): a relock keeps the commit
    ref: str | None = None
    wheel: BuiltWheel | None = None  # recorded by `wheelhouse mirror`

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "commit": self.commit}
        if self.ref is not None:
            out["ref"] = self.ref
        if self.wheel is not None:
            out["wheel"] = self.wheel.to_dict()
        return out

    @classmethod
    def from_dict(cls, f: _Fields) -> VcsPin:
        wheel = f.table("wheel")
        built = None
        if wheel is not None:
            built = BuiltWheel(
                filename=wheel.req("filename", str),
                version=wheel.req("version", str),
                sha256=wheel.sha256("sha256", wheel.req("sha256", str)),
            )
        return cls(
            url=f.req("url", str), commit=f.get("commit", str), ref=f.get("ref", str), wheel=built
        )


@dataclass(frozen=True, kw_only=True)
class LockedPackage:
    """One pinned distribution of a step: ``steps[i].packages[j]``."""

    name: str
    version: str | None  # None for a VCS pin
    requested: bool = False  # named by the step (not a dependency)
    hashes: tuple[str, ...] = ()
    artifacts: tuple[Artifact, ...] = ()  # where each hash was found (filename, url, sha256)
    requires_dist: tuple[str, ...] | None = None  # None when the metadata was not read
    vcs: VcsPin | None = None

    @classmethod
    def from_dict(cls, f: _Fields) -> LockedPackage:
        arts = []
        for a in f.tables("artifacts"):
            arts.append(
                Artifact(
                    a.req("filename", str),
                    a.req("url", str),
                    a.sha256("sha256", a.req("sha256", str)),
                )
            )
        vcs = f.table("vcs")
        hashes = f.strings("hashes")
        for i, h in enumerate(hashes):
            f.sha256(f"hashes[{i}]", h)
        requires = f.get("requires_dist", list)
        return cls(
            name=f.req("name", str),
            version=f.get("version", str),
            requested=bool(f.get("requested", bool)),
            hashes=hashes,
            artifacts=tuple(arts),
            requires_dist=None if requires is None else f.strings("requires_dist"),
            vcs=None if vcs is None else VcsPin.from_dict(vcs),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "requested": self.requested,
            "hashes": list(self.hashes),
            "artifacts": [
                {"filename": a.filename, "url": a.url, "sha256": a.sha256} for a in self.artifacts
            ],
            "requires_dist": None if self.requires_dist is None else list(self.requires_dist),
            "vcs": None if self.vcs is None else self.vcs.to_dict(),
        }


@dataclass(frozen=True, kw_only=True)
class StepFlags:
    no_deps: bool = False
    pre: bool = False
    no_build_isolation: bool = False
    upgrade: bool = False
    upgrade_strategy: str = "only-if-needed"
    reinstall: bool = False
    no_index: bool = False

    @classmethod
    def from_dict(cls, f: _Fields | None) -> StepFlags:
        if f is None:
            return cls()
        d = cls()
        values: dict[str, Any] = {
            k: f.get(k, type(getattr(d, k)), getattr(d, k)) for k in _FLAG_KEYS
        }
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _FLAG_KEYS}


_FLAG_KEYS = (
    "no_deps",
    "pre",
    "no_build_isolation",
    "upgrade",
    "upgrade_strategy",
    "reinstall",
    "no_index",
)


@dataclass(frozen=True, kw_only=True)
class StepSources:
    """What a step resolved from, redacted; the installer's own configuration is only named as
    such."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    installer_configured: bool = False

    @classmethod
    def from_dict(cls, f: _Fields | None) -> StepSources:
        if f is None:
            return cls()
        return cls(
            index_url=f.get("index_url", str),
            extra_index_urls=f.strings("extra_index_urls"),
            find_links=f.strings("find_links"),
            installer_configured=bool(f.get("installer_configured", bool)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "index_url": self.index_url,
            "extra_index_urls": list(self.extra_index_urls),
            "find_links": list(self.find_links),
            "installer_configured": self.installer_configured,
        }


@dataclass(frozen=True, kw_only=True)
class LockedStep:
    """``steps[i]``: a locked step (its file, that file's sha256, its packages) or a left-out
    one."""

    name: str
    locked: bool
    role: str = ""
    step_digest: str | None = None  # None in locks written before step digests
    flags: StepFlags = field(default_factory=StepFlags)
    file: str | None = None  # a plain file name in the lock's folder; set exactly when locked
    file_sha256: str | None = None
    sources: StepSources = field(default_factory=StepSources)
    packages: tuple[LockedPackage, ...] = ()
    reason: str | None = None  # why a step is not locked (``--skip-step``)
    # the step's packages as the spec named them (redacted)
    requirements: tuple[str, ...] | None = None
    replaces: tuple[str, ...] = ()  # earlier steps' packages this step may pin at another version

    @property
    def digest(self) -> str | None:
        return self.step_digest

    def package(self, name: str) -> LockedPackage | None:
        return next((p for p in self.packages if p.name == name), None)

    @classmethod
    def from_dict(cls, f: _Fields) -> LockedStep:
        locked = f.get("locked", bool, True)
        assert locked is not None
        name = f.req("name", str)
        file = f.get("file", str)
        file_sha256 = f.get("file_sha256", str)
        if locked:
            if not file:
                raise f.fail(
                    "file", f"missing: step {name!r} is marked locked but names no step file"
                )
            if not _FILE.match(file):
                raise f.fail(
                    "file",
                    f"{file[:80]!r} is not a step file name of the lock's folder (NN-name.txt)",
                )
            if not file_sha256:
                raise f.fail(
                    "file_sha256",
                    f"missing: the sha256 of step {name!r}'s file is what proves it unedited",
                )
            f.sha256("file_sha256", file_sha256)
        elif not f.get("reason", str):
            raise f.fail(
                "reason",
                f"missing: step {name!r} is marked not locked without the reason "
                "`envbuild lock --skip-step` records",
            )
        packages = tuple(LockedPackage.from_dict(p) for p in f.tables("packages", required=locked))
        requirements = (
            f.strings("requirements") if f.get("requirements", list) is not None else None
        )
        return cls(
            name=name,
            locked=locked,
            role=f.get("role", str, "") or "",
            step_digest=f.get("step_digest", str),
            flags=StepFlags.from_dict(f.table("flags")),
            file=file if locked else None,
            file_sha256=file_sha256 if locked else None,
            sources=StepSources.from_dict(f.table("sources")),
            packages=packages if locked else (),
            reason=f.get("reason", str),
            requirements=requirements,
            replaces=f.strings("replaces"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "role": self.role}
        if self.step_digest is not None:
            out["step_digest"] = self.step_digest
        out["flags"] = self.flags.to_dict()
        if self.requirements is not None:
            out["requirements"] = list(self.requirements)
        if self.replaces:
            out["replaces"] = list(self.replaces)
        out["locked"] = self.locked
        if not self.locked:
            out["reason"] = self.reason
            return out
        out.update(
            file=self.file,
            file_sha256=self.file_sha256,
            sources=self.sources.to_dict(),
            packages=[p.to_dict() for p in self.packages],
        )
        return out


@dataclass(frozen=True, kw_only=True)
class LockAbi:
    package: str = "torch"
    version: str | None = None
    local: str | None = None
    protected: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "version": self.version,
            "local": self.local,
            "protected": list(self.protected),
        }


@dataclass(frozen=True, kw_only=True)
class Lock:
    """``lock.json``: the lock's steps in spec order, with what they were resolved from and
    under."""

    path: Path  # where it was read from (or will be written)
    stack: str = ""
    spec: str = ""
    spec_digest: str | None = None  # absent in a prefix manifest
    python: str | None = None
    created: str | None = None  # absent in a prefix manifest
    tools: Mapping[str, str] = field(default_factory=dict)
    # python, platform, resolver (spec.Target)
    target: Mapping[str, str] = field(default_factory=dict)
    abi: LockAbi | None = None
    steps: tuple[LockedStep, ...] = ()
    prefix: bool = False  # a lock cut to its first steps (``serve.prefix_manifest``)
    lock_version: int = LOCK_VERSION

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def is_prefix(self) -> bool:
        return self.prefix

    @property
    def has_step_digests(self) -> bool:
        return bool(self.steps) and all(s.step_digest for s in self.steps)

    def step(self, name: str) -> LockedStep | None:
        return next((s for s in self.steps if s.name == name), None)

    @classmethod
    def from_dict(cls, data: object, path: Path) -> Lock:
        f = _Fields(data, str(path), "")
        version = f.get("lock_version", int, required=True)
        if version != LOCK_VERSION:
            raise LockError(
                f"{path}: lock_version {version} is not one this envbuild reads (it reads"
                f" {LOCK_VERSION})",
                hint="Use the envbuild that wrote the lock, or "
                + _REGENERATE[0].lower()
                + _REGENERATE[1:],
            )
        tools = f.table("tools")
        target = f.table("target")
        abi = f.table("abi")
        steps = tuple(LockedStep.from_dict(s) for s in f.tables("steps", required=True))
        seen: set[str] = set()
        for i, s in enumerate(steps):
            if s.name in seen:
                raise f.fail(f"steps[{i}].name", f"step {s.name!r} appears twice")
            seen.add(s.name)
        return cls(
            path=path,
            stack=f.get("stack", str, "") or "",
            spec=f.get("spec", str, "") or "",
            spec_digest=f.get("spec_digest", str),
            python=f.get("python", str),
            created=f.get("created", str),
            tools={k: str(v) for k, v in (tools.data.items() if tools else ())},
            target={k: str(v) for k, v in (target.data.items() if target else ())},
            abi=(
                None
                if abi is None
                else LockAbi(
                    package=abi.get("package", str, "torch") or "torch",
                    version=abi.get("version", str),
                    local=abi.get("local", str),
                    protected=abi.strings("protected"),
                )
            ),
            steps=steps,
            prefix=f.get("prefix", bool, False) is True,
            lock_version=LOCK_VERSION,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lock_version": self.lock_version}
        if self.prefix:
            out["prefix"] = True
        out.update(stack=self.stack, spec=self.spec)
        if self.spec_digest is not None:
            out["spec_digest"] = self.spec_digest
        if self.python is not None:
            out["python"] = self.python
        if self.target:
            out["target"] = dict(self.target)
        if self.created is not None:
            out["created"] = self.created
        out["tools"] = dict(self.tools)
        if self.abi is not None:
            out["abi"] = self.abi.to_dict()
        out["steps"] = [s.to_dict() for s in self.steps]
        return out


def lock_from_text(path: Path, text: str) -> Lock:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise LockError(f"{path}: not valid JSON ({str(exc)[:200]})", hint=_REGENERATE) from exc
    return Lock.from_dict(data, path)


def read_stack_lock(folder: Path) -> Lock | None:
    """The lock in ``folder``, or None when there is none. A broken ``lock.json`` raises
    ``LockError``."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    return lock_from_text(path, read_text(path, MANIFEST))


def write_lock(lock: Lock) -> Path:
    """Write ``lock.json`` atomically; what is written reads back as the same ``Lock``."""
    data = lock.to_dict()
    Lock.from_dict(data, lock.path)  # the writer keeps the reader's rules
    atomic_write_json(lock.path, data)
    return lock.path
