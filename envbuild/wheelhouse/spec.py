"""``wheelhouse_specs/*.toml``: how to build one wheel from source. Load, validate, freeze.

Validation follows ``spec.py``: unknown keys get a suggestion, errors name the file and the
key path, ``${VAR:-default}`` expands from the environment. A spec looks like::

    schema = 1
    name = "causal-conv1d"
    version = "1.6.1"

    [source]                       # exactly one of sdist / git / path / from_env
    sdist = "https://files.pythonhosted.org/.../causal_conv1d-1.6.1.tar.gz"
    sha256 = "e4a697ec..."

    [build]
    requires = ["setuptools", "wheel", "ninja", "torch"]   # import names checked in the venv
    arch_list = ["9.0"]                                    # -> TORCH_CUDA_ARCH_LIST, provenance
    patches = ["patches/causal-conv1d-1.6.1-archs.patch"]  # relative to this file, applied -p1
    env = { CAUSAL_CONV1D_FORCE_BUILD = "TRUE", MAX_JOBS = "${MAX_JOBS:-8}" }

A private source (``from_env = "QOPTIM_CUDA_SOURCE"``) is looked up when it is needed, so the
spec still loads on a host without it; ``--source NAME=LOCATION`` overrides any source.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.errors import ConfigError
from envbuild.index.net import redact
from envbuild.spec import spec_digest
from envbuild.spec._toml import TomlReader, did_you_mean, read_toml

SCHEMA_VERSION = 1
SourceKind = Literal["sdist", "git", "path"]
Backend = Literal["pip", "build", "uv"]
BACKENDS: tuple[Backend, ...] = get_args(Backend)

_TOP_KEYS = ("schema", "name", "version", "description", "source", "build")
_SOURCE_KEYS = ("sdist", "sha256", "git", "commit", "path", "from_env", "subdirectory")
_BUILD_KEYS = ("backend", "requires", "env", "arch_list", "patches", "timeout_minutes")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_ARCH = re.compile(r"^\d+\.\d+a?(\+PTX)?$")


@dataclass(frozen=True, kw_only=True)
class BuildSource:
    kind: SourceKind
    location: str  # URL or absolute path; may hold credentials, show it through ``shown``
    sha256: str | None = None  # sdist
    commit: str | None = None  # git
    subdirectory: str | None = None

    @property
    def shown(self) -> str:
        return redact(self.location)

    @property
    def filename(self) -> str:
        """The sdist's file name (last path segment of the URL or path)."""
        return unquote(urlsplit(self.location).path.rsplit("/", 1)[-1]) or "source"


@dataclass(frozen=True, kw_only=True)
class WheelSpec:
    path: Path
    name: str  # canonical
    version: str
    description: str = ""
    # None: private, resolved from ``from_env`` or --source at build time
    source: BuildSource | None
    from_env: str | None = None
    backend: Backend = "pip"
    requires: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    arch_list: tuple[str, ...] = ()
    patches: tuple[Path, ...] = ()
    timeout_s: float | None = None
    digest: str  # over the unexpanded spec data and the patch contents
    # keep the upstream version and Requires-Dist (no +cu...torch... label): a lock's build, whose
    # version the lock pins (provision --lock's builds stage, ``projectlock.builds``)
    keep_version: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


def load_wheel_spec(path: Path, environ: Mapping[str, str] | None = None) -> WheelSpec:
    env = os.environ if environ is None else environ
    return parse_wheel_spec(read_toml(path, "wheelhouse spec"), path.resolve(), env)


def parse_wheel_spec(data: Mapping[str, Any], path: Path, environ: Mapping[str, str]) -> WheelSpec:
    r = TomlReader(path, environ)
    r.check_keys(data, _TOP_KEYS, "")
    if data.get("schema") != SCHEMA_VERSION:
        raise r.fail("schema", f"must be {SCHEMA_VERSION}, got {data.get('schema')!r}")
    name = canonicalize_name(r.str_(data, "name", ""))
    version = r.str_(data, "version", "")
    try:
        Version(version)
    except InvalidVersion as exc:
        raise r.fail("version", f"not a valid version: {version!r}") from exc
    source, from_env = _parse_source(r, r.table(data, "source"), path)
    b = r.table(data, "build")
    r.check_keys(b, _BUILD_KEYS, "build")
    backend = r.str_(b, "backend", "build", "pip")
    if backend not in BACKENDS:
        raise r.fail(
            "build.backend",
            f"must be one of {', '.join(BACKENDS)}, got {backend!r}"
            + did_you_mean(backend, list(BACKENDS)),
        )
    archs = r.str_list(b, "arch_list", "build")
    for i, a in enumerate(archs):
        if not _ARCH.match(a):
            raise r.fail(f"build.arch_list[{i}]", f'must look like "9.0" or "9.0a", got {a!r}')
    patches = _parse_patches(r, b, path)
    timeout = r.num(b, "timeout_minutes", "build", None)
    digest_input = {
        "spec": spec_digest(data),
        "patches": [hashlib.sha256(p.read_bytes()).hexdigest() for p in patches],
    }
    return WheelSpec(
        path=path,
        name=name,
        version=version,
        description=r.str_(data, "description", "", ""),
        source=source,
        from_env=from_env,
        backend=backend,
        requires=r.str_list(b, "requires", "build"),
        env=r.str_map(b, "env", "build"),
        arch_list=archs,
        patches=tuple(patches),
        timeout_s=timeout * 60 if timeout else None,
        digest=spec_digest(digest_input),
    )


def _parse_source(
    r: TomlReader, src: Mapping[str, Any], path: Path
) -> tuple[BuildSource | None, str | None]:
    """``[source]``: exactly one of an sdist, a git commit, a path (a ``BuildSource``), or the
    environment variable that names one at build time (``from_env``)."""
    r.check_keys(src, _SOURCE_KEYS, "source")
    kinds = [k for k in ("sdist", "git", "path", "from_env") if k in src]
    if len(kinds) != 1:
        raise r.fail(
            "source",
            "needs exactly one of sdist (with sha256), git (with commit), path, "
            f"from_env; got {', '.join(kinds) or 'none'}",
        )
    subdir = r.opt_str(src, "subdirectory", "source")
    if kinds[0] == "from_env":
        from_env = r.str_(src, "from_env", "source")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", from_env):
            raise r.fail(
                "source.from_env", f"must be an environment variable name, got {from_env!r}"
            )
        return None, from_env
    kind = kinds[0]
    location = r.str_(src, kind, "source")
    sha = r.opt_str(src, "sha256", "source")
    commit = r.opt_str(src, "commit", "source")
    try:
        source = make_source(
            kind, location, sha256=sha, commit=commit, subdirectory=subdir, base=path.parent
        )
    except ValueError as exc:
        raise r.fail(f"source.{kind}", str(exc)) from exc
    return source, None


def _parse_patches(r: TomlReader, b: Mapping[str, Any], path: Path) -> list[Path]:
    """``build.patches``: each a file beside the spec (resolved)."""
    patches = []
    for i, p in enumerate(r.str_list(b, "patches", "build")):
        full = (path.parent / p).resolve()
        if not full.is_file():
            raise r.fail(f"build.patches[{i}]", f"patch file not found: {full}")
        patches.append(full)
    return patches


def make_source(
    kind: str,
    location: str,
    *,
    sha256: str | None = None,
    commit: str | None = None,
    subdirectory: str | None = None,
    base: Path | None = None,
) -> BuildSource:
    """A validated ``Source``; raises ``ValueError`` with the reason."""
    if kind == "sdist":
        if not sha256:
            raise ValueError(
                "an sdist needs its sha256 (source.sha256, or #sha256=... on the location)"
            )
        sha256 = sha256.lower().removeprefix("sha256:")
        if not _SHA256.match(sha256):
            raise ValueError(f"sha256 must be 64 hex digits, got {sha256!r}")
        if urlsplit(location).scheme not in ("http", "https", "file"):
            location = str(_local(location, base))
        return BuildSource(
            kind="sdist", location=location, sha256=sha256, subdirectory=subdirectory
        )
    if kind == "git":
        if not commit or not _COMMIT.match(commit):
            raise ValueError(
                f"a git source needs a full 40-hex commit (a branch or tag moves), got {commit!r}"
            )
        return BuildSource(kind="git", location=location, commit=commit, subdirectory=subdirectory)
    if kind == "path":
        folder = _local(location, base)
        return BuildSource(kind="path", location=str(folder), subdirectory=subdirectory)
    raise ValueError(f"unknown source kind {kind!r}")


def parse_location(value: str, base: Path | None = None) -> BuildSource:
    """A source from one string (``from_env`` / ``--source``).

    ``git+URL@COMMIT``, a folder, or an sdist path/URL with ``#sha256=HEX``.
    """
    value = value.strip()
    if value.startswith("git+"):
        url, sep, commit = value[4:].rpartition("@")
        if not sep or "/" in commit:
            raise ValueError(f"{redact(value)}: write git+URL@COMMIT (a full 40-hex commit)")
        return make_source("git", url, commit=commit)
    loc, _, frag = value.partition("#")
    sha = frag.removeprefix("sha256=") if frag.startswith("sha256=") else None
    if urlsplit(loc).scheme in ("http", "https"):
        return make_source("sdist", loc, sha256=sha)
    local = _local(loc, base)
    if local.is_dir():
        return make_source("path", str(local))
    if not local.exists():
        raise ValueError(f"{local}: no such file or folder")
    return make_source("sdist", str(local), sha256=sha)


def _local(location: str, base: Path | None) -> Path:
    parts = urlsplit(location)
    p = Path(unquote(parts.path) if parts.scheme == "file" else location).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return p.resolve()


def find_spec_file(name_or_path: str, specs_dir: Path | None = None) -> Path:
    """``SPEC`` on the command line: a file, or a name under ``wheelhouse_specs/``."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return p
    dirs = (
        [specs_dir]
        if specs_dir
        else [
            Path.cwd() / "wheelhouse_specs",
            Path(__file__).resolve().parents[2] / "wheelhouse_specs",
        ]
    )
    for d in dirs:
        candidate = d / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    known = sorted({f.stem for d in dirs if d.is_dir() for f in d.glob("*.toml")})
    raise ConfigError(
        f"no wheelhouse spec {name_or_path!r}{did_you_mean(name_or_path, known)}; "
        f"known: {', '.join(known) or 'none'} (looked in {', '.join(str(d) for d in dirs)})"
    )
