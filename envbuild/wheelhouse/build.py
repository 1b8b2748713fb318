"""Build one wheelhouse wheel: fetch the source, patch it, build it against the target venv's
torch (no build isolation), repack it (``wheelhouse_repack``), cache it by content.

The cache key covers everything that changes the output: the spec digest (patches included),
the expanded build environment, the source identity (sdist sha256, git commit, or a hash of a
source folder), the target interpreter and platform, torch's version, build hash (git version),
CUDA, C++11 ABI flag and payload digest (the RECORD rows of torch's own files: equal for every
install of the same torch build, whichever venv, installer or shebang), the GPU archs the build
compiles for (``TORCH_CUDA_ARCH_LIST``, else the visible GPUs' for a CUDA torch) and the compiler
versions. Same key, same wheel: no rebuild. A wheel of another key is never reused: the miss
names the key parts that differ from the cached wheel of the same source (``cache_miss``).
Computing the key never imports torch (it reads torch's files), so a cache hit takes a fraction
of a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import tarfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild import __version__, events, nvidia
from envbuild._io import atomic_write_json, sha256_file
from envbuild.abitag import (
    format_label as local_tag,  # the one writer of the labels (the face re-exports it)
)
from envbuild.errors import ConfigError, WheelhouseError
from envbuild.guard.buildrecord import PROVENANCE_SCHEMA
from envbuild.index.net import redact
from envbuild.run import RunResult, run
from envbuild.wheelhouse.repack import repack_wheel
from envbuild.wheelhouse.sharedcache import Origin, SharedCache, key_differences
from envbuild.wheelhouse.spec import BuildSource, WheelSpec, parse_location

if TYPE_CHECKING:
    from envbuild.wheelhouse.requires import BuildRequires

REPACK_FORMAT = 1  # bump when the repacked output changes for the same inputs
_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")
_ERROR_LINE = re.compile(r"\berror\b|Error:", re.IGNORECASE)
_SKIP_TREE = {".git", "build", "dist", "__pycache__", ".eggs"}

_PROBE = r"""
import csv, hashlib, importlib.util, io, json, os, platform, re, sys, sysconfig
import importlib.metadata as md
out = {"executable": sys.executable, "python_version": platform.python_version(),
       "python_tag": "cp%d%d" % sys.version_info[:2], "platform": sysconfig.get_platform(),
       "torch_version": None, "missing": []}
try:
    d = md.distribution("torch")
    out["torch_version"] = d.version
    record = d.read_text("RECORD") or ""
    out["torch_record_sha256"] = hashlib.sha256(record.encode()).hexdigest()
    # envbuild.guard.Dist.payload_sha256: torch's own files, not the dist-info, .pyc or ../bin scripts
    rows = {}
    for row in csv.reader(io.StringIO(record)):
        if row:
            rows[row[0]] = row[1] if len(row) > 1 else ""
    kept = sorted("%s,%s" % (p, h) for p, h in rows.items()
                  if ".dist-info/" not in p and "__pycache__" not in p and not p.startswith("../"))
    out["torch_payload_sha256"] = hashlib.sha256("\n".join(kept).encode()).hexdigest()
except md.PackageNotFoundError:
    pass
spec = importlib.util.find_spec("torch")
if spec is not None and spec.submodule_search_locations:
    ns = {}
    try:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")) as f:
            exec(f.read(), ns)
    except Exception:
        pass
    out.update(torch_git_version=ns.get("git_version"), torch_cuda=ns.get("cuda"), torch_hip=ns.get("hip"))
    try:  # the C++11 ABI torch was built with, as it asks extensions to compile (no import of torch)
        with open(os.path.join(list(spec.submodule_search_locations)[0], "share", "cmake", "Torch",
                               "TorchConfig.cmake")) as f:
            m = re.search(r"_GLIBCXX_USE_CXX11_ABI=([01])", f.read())
        out["torch_cxx11_abi"] = m.group(1) == "1" if m else None
    except OSError:
        out["torch_cxx11_abi"] = None
    if ns.get("__version__"):  # torch.__version__: some builds' dist-info lacks the local tag
        out["torch_dist_version"] = out["torch_version"]
        out["torch_version"] = ns["__version__"]
for mod in sys.argv[1:]:
    try:
        if importlib.util.find_spec(mod) is None:
            out["missing"].append(mod)
    except Exception:
        out["missing"].append(mod)
print(json.dumps(out))
"""  # noqa: E501 - code written out or run as it is


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    python: Path  # the target interpreter (its torch is the ABI the wheel is built against)
    out: Path
    cache: Path
    sources: tuple[Path, ...] = ()  # folders searched for sdists by file name (offline hosts)
    overrides: Mapping[str, str] = field(default_factory=dict)  # spec name -> --source LOCATION
    use_cache: bool = True
    keep_work: bool = False
    environ: Mapping[str, str] | None = None
    shared: SharedCache | None = None  # the fleet's shared build cache (``sharedcache``)


@dataclass(frozen=True)
class BuildTarget:
    python: Path
    info: dict[str, Any]
    nvcc: str | None
    cc: str | None

    @property
    def torch_version(self) -> str:
        return str(self.info["torch_version"])


@dataclass(frozen=True)
class BuildResult:
    name: str
    version: str
    wheel: Path
    cached: bool
    seconds: float
    key: str
    log_file: Path | None
    removed_requires: tuple[str, ...] = ()
    not_reused: str | None = None  # cache_miss: why a cached wheel of the same source did not fit
    origin: Origin = field(default_factory=lambda: Origin("built here"))


def default_cache() -> Path:
    if d := os.environ.get("ENVBUILD_CACHE_DIR"):
        return Path(d) / "wheelhouse"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuild" / "wheelhouse"


# ----------------------------------------------------------------------------- target


def probe_target(python: Path, requires: Sequence[str] = ()) -> BuildTarget:
    try:
        proc = run(
            [str(python), "-c", _PROBE, *requires], capture=True, separate_stderr=True, timeout=60
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise ConfigError(
            f"{python}: no such interpreter (give --venv DIR or --python PATH)"
        ) from exc
    if not proc.ok:
        why = (
            proc.hung_message(f"{python} (inspecting the target)")
            if proc.timed_out
            else (proc.stderr or "").strip()[-2000:]
        )
        raise WheelhouseError(f"{python}: cannot inspect the target interpreter:\n{why}")
    info = json.loads(proc.output or "")
    if not info.get("torch_version"):
        raise WheelhouseError(
            f"torch is not installed for {python}: wheelhouse wheels are built against the torch "
            "installed in the target environment",
            hint=(
                "Install the stack's torch there first (envbuild provision), or pass"
                " --venv/--python of an environment that has it."
            ),
        )
    return BuildTarget(python=python, info=info, nvcc=_nvcc_version(), cc=_cc_version())


def _cuda_home() -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if v := os.environ.get(var):
            return Path(v)
    if nvcc := shutil.which("nvcc"):
        return Path(nvcc).resolve().parent.parent
    default = Path("/usr/local/cuda")
    return default if default.exists() else None


def _nvcc_version() -> str | None:
    home = _cuda_home()
    nvcc = home / "bin" / "nvcc" if home else None
    if nvcc is None or not nvcc.exists():
        return None
    try:
        out = (
            run([str(nvcc), "--version"], capture=True, separate_stderr=True, timeout=30).output
            or ""
        )
    except OSError:
        return None
    m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _cc_version() -> str | None:
    cc = os.environ.get("CC", "gcc")
    try:
        out = run(
            [cc, "-dumpfullversion", "-dumpversion"], capture=True, separate_stderr=True, timeout=30
        )
    except OSError:
        return None
    return f"{Path(cc).name} {(out.output or '').strip()}" if out.ok else None


# ----------------------------------------------------------------------------- source


def resolve_source(spec: WheelSpec, opts: BuildOptions) -> BuildSource:
    environ = os.environ if opts.environ is None else opts.environ
    raw = opts.overrides.get(spec.name)
    where = f"--source {spec.name}=..."
    if raw is None and spec.from_env:
        raw = environ.get(spec.from_env) or None
        where = f"${spec.from_env}"
    if raw is not None:
        try:
            return parse_location(raw)
        except ValueError as exc:
            raise ConfigError(f"{spec.path}: source of {spec.label} from {where}: {exc}") from exc
    if spec.source is None:
        raise ConfigError(
            f"{spec.path}: {spec.label} is private and its source location is not configured: "
            f"set {spec.from_env}",
            hint=(
                f"Set {spec.from_env} (or pass --source {spec.name}=LOCATION) to a source folder, "
                "an sdist path or URL ending in #sha256=HEX, or git+URL@COMMIT (a full commit)."
            ),
        )
    return spec.source


def source_identity(source: BuildSource) -> str:
    if source.kind == "sdist":
        return f"sdist:{source.sha256}"
    if source.kind == "git":
        return f"git:{source.commit}"
    return f"tree:{tree_sha256(Path(source.location))}"


def tree_sha256(folder: Path) -> str:
    if not folder.is_dir():
        raise WheelhouseError(f"source folder not found: {folder}")
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if (
            any(part in _SKIP_TREE or part.endswith(".egg-info") for part in rel.parts)
            or not p.is_file()
        ):
            continue
        h.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def fetch_sdist(source: BuildSource, opts: BuildOptions) -> Path:
    """The sdist file, from the cache, a --sources folder, a local path, or a download."""
    assert source.sha256 is not None
    cached = opts.cache / "sdists" / source.sha256 / source.filename
    if cached.is_file() and sha256_file(cached) == source.sha256:
        return cached
    candidates = [d / source.filename for d in opts.sources]
    if not source.location.startswith(("http://", "https://", "file://")):
        candidates.insert(0, Path(source.location))
    for cand in candidates:
        if cand.is_file():
            actual = sha256_file(cand)
            if actual != source.sha256:
                raise WheelhouseError(
                    f"{cand}: sha256 mismatch for the sdist: expected {source.sha256}, got"
                    f" {actual}",
                    hint="The file is not the one the spec pins; remove it or fix source.sha256.",
                )
            cached.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cand, cached)
            return cached
    if source.location.startswith(("http://", "https://")):
        from envbuild.index.download import download
        from envbuild.index.net import SourceError

        try:
            return download(source.location, cached, source.sha256)
        except SourceError as exc:
            raise WheelhouseError(exc.message, hint=exc.hint) from exc
    looked = ", ".join(str(c) for c in candidates) or source.shown
    raise WheelhouseError(
        f"sdist not found: {source.shown} (looked at {looked})",
        hint="Download it into a folder and pass --sources DIR, or fix source.sdist.",
    )


def checkout_git(source: BuildSource, opts: BuildOptions, log: Path) -> Path:
    assert source.commit is not None
    dest = opts.cache / "git" / source.commit
    if (dest / ".envbuild-complete").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    env = _git_env(dest.parent)
    for argv in (
        ["git", "init", "-q", str(dest)],
        ["git", "-C", str(dest), "fetch", "-q", "--depth", "1", source.location, source.commit],
        ["git", "-C", str(dest), "checkout", "-q", source.commit],
    ):
        res = run(argv, log_file=log, env=env)
        if not res.ok:
            raise _failure(
                f"git checkout of {source.shown}@{source.commit} failed (exit {res.returncode})",
                res,
            )
    (dest / ".envbuild-complete").touch()
    return dest


def _git_env(ceiling: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GIT_CEILING_DIRECTORIES=str(ceiling), GIT_TERMINAL_PROMPT="0")
    return env


def unpack(archive: Path, dest: Path) -> Path:
    """Extract an sdist safely; returns its single top-level folder (or ``dest``)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if name.startswith("/") or ".." in Path(name).parts:
                        raise WheelhouseError(f"{archive.name}: unsafe path in the sdist: {name!r}")
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(dest, filter="data")
                else:  # pragma: no cover - Python < 3.10.12
                    for m in tf.getmembers():
                        if (
                            m.name.startswith("/")
                            or ".." in Path(m.name).parts
                            or m.issym()
                            or m.islnk()
                        ):
                            raise WheelhouseError(
                                f"{archive.name}: unsafe member in the sdist: {m.name!r}"
                            )
                    tf.extractall(dest)
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise WheelhouseError(f"{archive}: cannot unpack the sdist: {exc}") from exc
    entries = list(dest.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else dest


def apply_patches(spec: WheelSpec, src: Path, log: Path) -> None:
    for patch in spec.patches:
        events.emit("info", f"applying {patch.name}")
        try:
            res = run(
                ["git", "apply", "-p1", "--verbose", "--whitespace=nowarn", str(patch)],
                cwd=src,
                log_file=log,
                env=_git_env(src.parent),
            )
        except FileNotFoundError:
            res = run(
                ["patch", "-p1", "--forward", "--batch", "-i", str(patch)], cwd=src, log_file=log
            )
        if not res.ok:
            raise _failure(
                f"patch {patch.name} does not apply to {spec.label} (exit {res.returncode})", res
            )


# ----------------------------------------------------------------------------- build


def build_env(spec: WheelSpec) -> dict[str, str]:
    env = dict(spec.env)
    if spec.arch_list and "TORCH_CUDA_ARCH_LIST" not in env:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(spec.arch_list)
    return env


def key_parts(spec: WheelSpec, source: BuildSource, target: BuildTarget) -> dict[str, Any]:
    """What the cache key is made of, by name (``result.json`` and the provenance record keep it, so
    a miss can say which part differs)."""
    info = target.info
    return {
        "format": REPACK_FORMAT,
        "spec": spec.digest,
        "env": build_env(spec),
        "backend": spec.backend,
        "source": source_identity(source),
        "subdirectory": source.subdirectory,
        "python": info["python_tag"],
        "platform": info["platform"],
        "torch": {
            "version": info["torch_version"],
            "git_version": info.get("torch_git_version"),
            "cuda": info.get("torch_cuda"),
            "cxx11_abi": info.get("torch_cxx11_abi"),
            "payload_sha256": info.get("torch_payload_sha256"),
        },
        "archs": _archs(spec, info),
        "nvcc": target.nvcc,
        "cc": target.cc,
    }


def cache_key(spec: WheelSpec, source: BuildSource, target: BuildTarget) -> str:
    return hashlib.sha256(
        json.dumps(key_parts(spec, source, target), sort_keys=True).encode()
    ).hexdigest()


def _archs(spec: WheelSpec, info: Mapping[str, Any]) -> str | None:
    """The GPU archs the build compiles for: ``TORCH_CUDA_ARCH_LIST`` as the build sees it, else (a
    CUDA torch) the visible GPUs' compute capabilities, which torch's extension builder then
    targets.
    """
    env = {**os.environ, **build_env(spec)}
    if env.get("TORCH_CUDA_ARCH_LIST"):
        return env["TORCH_CUDA_ARCH_LIST"]
    if not info.get("torch_cuda"):
        return None
    answer = nvidia.query(("compute_cap",))
    rows = nvidia.parse_query(answer.output, ("compute_cap",)) if answer.output else []
    caps = sorted({r["compute_cap"] for r in rows if r["compute_cap"]})
    return "visible GPUs: " + ";".join(caps) if caps else None


def cache_miss(cache: Path, parts: Mapping[str, Any], key: str) -> str | None:
    """Why the cached wheels of the same package and source do not fit ``parts``: the key parts each
    differs in (``torch.version 2.10.0+cu128, now 2.9.1+cu128``), or None when there are none."""
    out = []
    for meta_file in sorted((cache / "wheels").glob("*/result.json")):
        if meta_file.parent.name == key[:32]:
            continue
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue
        theirs = meta.get("parts")
        if (
            not isinstance(theirs, dict)
            or theirs.get("source") != parts["source"]
            or theirs.get("spec") != parts["spec"]
        ):
            continue
        differ = key_differences(theirs, parts)
        out.append(
            f"{meta.get('wheel')} was built for another key ({'; '.join(differ) or 'format'})"
        )
    return "; ".join(out) or None


def build(spec: WheelSpec, opts: BuildOptions, target: BuildTarget | None = None) -> BuildResult:
    """Build (or take from the cache) the wheelhouse wheel of ``spec`` into ``opts.out``."""
    start = time.monotonic()
    source = resolve_source(spec, opts)
    requires = (
        tuple(dict.fromkeys(("setuptools", *spec.requires)))
        if spec.backend == "pip"
        else spec.requires
    )
    target = target or probe_target(opts.python, requires)
    parts = key_parts(spec, source, target)
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    slot = opts.cache / "wheels" / key[:32]
    if opts.use_cache and (hit := _cached(spec, slot, opts.out, start, key)) is not None:
        if opts.shared is not None:
            opts.shared.offer(key, slot, spec.label)
        return hit
    if opts.shared is None or not opts.use_cache:
        return _compile(spec, opts, source, target, parts, key, start)
    with opts.shared.turn(key, parts, spec.label, slot) as turn:
        if turn.taken is not None and (hit := _cached(spec, slot, opts.out, start, key)):
            return hit
        result = _compile(spec, opts, source, target, parts, key, start)
        turn.publish(slot)
        return result


def _cached(spec: WheelSpec, slot: Path, out: Path, start: float, key: str) -> BuildResult | None:
    """The wheel in this host's cache ``slot``, when its bytes are its record's."""
    meta_file = slot / "result.json"
    try:
        meta = json.loads(meta_file.read_text())
        cached_wheel = slot / meta["wheel"]
        fits = cached_wheel.is_file() and sha256_file(cached_wheel) == meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not fits:
        return None
    wheel = _publish(cached_wheel, out)
    origin = meta.get("origin") or {}
    how = Origin(
        "build cache" if origin.get("how") == "build cache" else "local cache",
        meta.get("built_on"),
        meta.get("built_at"),
        origin.get("cache"),
    )
    events.emit("ok", f"{spec.label}: cached {wheel.name}", spec=spec.name, cached=True)
    return BuildResult(
        spec.name,
        meta["version"],
        wheel,
        True,
        time.monotonic() - start,
        key,
        None,
        origin=how,
    )


def _compile(
    spec: WheelSpec,
    opts: BuildOptions,
    source: BuildSource,
    target: BuildTarget,
    parts: Mapping[str, Any],
    key: str,
    start: float,
) -> BuildResult:
    """Build the wheel here, into this host's cache slot and ``opts.out``."""
    slot = opts.cache / "wheels" / key[:32]
    meta_file = slot / "result.json"
    why = cache_miss(opts.cache, parts, key) if opts.use_cache else None
    if why:
        events.emit("info", f"{spec.label}: not reusing the cache: {why}", spec=spec.name)
    if spec.arch_list and not target.info.get("torch_cuda"):
        raise WheelhouseError(
            f"{spec.label} builds CUDA code (arch_list {', '.join(spec.arch_list)}), but torch "
            f"{target.torch_version} in {target.python} is not a CUDA build",
            hint="Build in the environment that holds the stack's CUDA torch (--venv).",
        )
    if spec.arch_list and target.nvcc is None:
        raise WheelhouseError(
            f"{spec.label} builds CUDA code, but nvcc was not found",
            hint="Install the CUDA toolkit matching torch's CUDA, or set CUDA_HOME.",
        )
    provided = None
    if target.info.get("missing"):  # installed for the build, beside the target environment
        from envbuild.wheelhouse.requires import provide

        provided = provide(
            spec.label, target.python, target.info["missing"], opts.cache, opts.environ
        )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    log = opts.out / "logs" / f"{spec.name}-{spec.version}-{stamp}.log"
    work = opts.cache / "work" / f"{spec.name}-{key[:12]}"
    shutil.rmtree(work, ignore_errors=True)
    events.emit(
        "step",
        f"{spec.label}: building against torch {target.torch_version}",
        spec=spec.name,
        log=str(log),
    )
    src = _prepare_source(spec, source, opts, work, log)
    dist = work / "dist"
    result = _run_build(spec, target, src, dist, log, provided)
    built = sorted(dist.glob("*.whl"))
    if len(built) != 1:
        raise WheelhouseError(
            f"{spec.label}: the build made {len(built)} wheels in {dist}, expected 1",
            hint=f"full log: {log}",
        )
    from packaging.utils import parse_wheel_filename

    built_name, built_version = parse_wheel_filename(built[0].name)[:2]
    if built_name != spec.name or built_version.public != spec.version:
        raise WheelhouseError(
            f"{spec.label}: the source built {built[0].name}, not {spec.name} {spec.version}",
            hint=f"Check the spec's source ({source.shown}) and version. full log: {log}",
        )
    provenance = _provenance(spec, source, target, key, parts, why)
    local = (
        None
        if spec.keep_version
        else local_tag(target.torch_version, target.info.get("torch_cuda"))
    )
    repacked = repack_wheel(built[0], slot, local, provenance)
    atomic_write_json(
        meta_file,
        {
            "wheel": repacked.path.name,
            "version": repacked.version,
            "sha256": sha256_file(repacked.path),
            "seconds": round(result.seconds, 1),
            "parts": parts,
            "built_on": socket.gethostname(),
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    )
    wheel = _publish(repacked.path, opts.out)
    if not opts.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    events.emit(
        "ok",
        f"{spec.label}: built {wheel.name} in {result.seconds:.1f} s",
        spec=spec.name,
        cached=False,
    )
    return BuildResult(
        spec.name,
        repacked.version,
        wheel,
        False,
        time.monotonic() - start,
        key,
        log,
        repacked.removed_requires,
        why,
        origin=Origin(
            "built here",
            socket.gethostname(),
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
        ),
    )


def _prepare_source(
    spec: WheelSpec, source: BuildSource, opts: BuildOptions, work: Path, log: Path
) -> Path:
    if source.kind == "sdist":
        src = unpack(fetch_sdist(source, opts), work / "src")
    elif source.kind == "git":
        src = work / "src"
        shutil.copytree(
            checkout_git(source, opts, log),
            src,
            ignore=shutil.ignore_patterns(".git", ".envbuild-complete"),
        )
    else:
        folder = Path(source.location)
        if not folder.is_dir():
            raise WheelhouseError(f"{spec.label}: source folder not found: {folder}")
        src = work / "src"
        shutil.copytree(
            folder,
            src,
            ignore=lambda d, names: [
                n for n in names if n in _SKIP_TREE or n.endswith(".egg-info")
            ],
        )
    if source.subdirectory:
        src = src / source.subdirectory
        if not src.is_dir():
            raise WheelhouseError(
                f"{spec.label}: source.subdirectory {source.subdirectory!r} not found in the source"
            )
    apply_patches(spec, src, log)
    return src


def _run_build(
    spec: WheelSpec,
    target: BuildTarget,
    src: Path,
    dist: Path,
    log: Path,
    requires: BuildRequires | None = None,
) -> RunResult:
    py = str(target.python)
    if spec.backend == "pip":
        argv = [
            py,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "--no-cache-dir",
            "-v",
            "-w",
            str(dist),
            str(src),
        ]
    elif spec.backend == "uv":  # the target venv needs no pip or build (uv makes bare venvs)
        from envbuild.installer.python import find_uv

        uv = find_uv()
        if uv is None:
            raise WheelhouseError(
                f"{spec.label}: the uv build backend needs uv, which is not installed"
            )
        argv = [
            uv,
            "build",
            "--wheel",
            "--no-build-isolation",
            "--python",
            py,
            "--out-dir",
            str(dist),
            str(src),
        ]
    else:
        argv = [py, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(build_env(spec), PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    if requires is not None:
        env = requires.env(env)
    events.emit("debug", f"build env: {redact(json.dumps(build_env(spec)))}")

    def on_line(line: str) -> None:
        events.emit("debug", line, spec=spec.name, build_line=True)
        if m := _NINJA.match(line.strip()):
            events.emit("debug", line, spec=spec.name, progress=(int(m.group(1)), int(m.group(2))))

    res = run(argv, log_file=log, env=env, cwd=src, on_line=on_line, timeout=spec.timeout_s)
    if not res.ok:
        raise _failure(f"building {spec.label} failed (exit {res.returncode})", res)
    return res


def _failure(message: str, res: RunResult) -> WheelhouseError:
    """The error for a failed subprocess: the first error lines, the log's tail, the log's path."""
    tail = res.tail.splitlines()
    first_errors: list[str] = []
    if res.log_file is not None and res.log_file.is_file():
        for line in res.log_file.read_text(errors="replace").splitlines():
            if _ERROR_LINE.search(line) and line not in tail and line not in first_errors:
                first_errors.append(line)
            if len(first_errors) >= 5:
                break
    parts = []
    if first_errors:
        parts.append("first error lines:\n" + "\n".join(f"  {ln}" for ln in first_errors))
    parts.append("last lines of the log:\n" + "\n".join(f"  {ln}" for ln in tail[-25:]))
    parts.append(f"full log: {res.log_file}")
    return WheelhouseError(message, hint=redact("\n".join(parts)))


def _provenance(
    spec: WheelSpec,
    source: BuildSource,
    target: BuildTarget,
    key: str,
    parts: Mapping[str, Any],
    why: str | None,
) -> dict[str, Any]:
    info = target.info
    src: dict[str, Any] = {"kind": source.kind, "location": source.shown}
    if source.kind == "sdist":
        src["sha256"] = source.sha256
    elif source.kind == "git":
        src["commit"] = source.commit
    else:
        src["tree_sha256"] = source_identity(source).split(":", 1)[1]
        src["location"] = Path(source.location).name
    src["patches"] = [{"file": p.name, "sha256": sha256_file(p)} for p in spec.patches]
    return {
        "schema": PROVENANCE_SCHEMA,
        "tool": f"envbuild {__version__}",
        "torch": {
            "version": info["torch_version"],
            "git_version": info.get("torch_git_version"),
            "cuda": info.get("torch_cuda"),
            "record_sha256": info.get("torch_record_sha256"),
            "payload_sha256": info.get("torch_payload_sha256"),
            "cxx11_abi": info.get("torch_cxx11_abi"),
        },
        "cuda": {"torch": info.get("torch_cuda"), "nvcc": target.nvcc},
        "compiler": {"cc": target.cc, "nvcc": target.nvcc},
        "arch_list": list(spec.arch_list),
        "python": {"tag": info["python_tag"], "version": info["python_version"]},
        "platform": info["platform"],
        "source": src,
        "spec": {"file": spec.path.name, "digest": spec.digest},
        "build": {
            "backend": spec.backend,
            "env": {k: redact(v) for k, v in build_env(spec).items()},
            "cache_key": key,
            "key_parts": dict(parts),
            "not_reused": why,
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }


def _publish(wheel: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    dest = out / wheel.name
    if not (
        dest.is_file()
        and dest.stat().st_size == wheel.stat().st_size
        and sha256_file(dest) == sha256_file(wheel)
    ):
        tmp = dest.with_name(f".{dest.name}.tmp")
        shutil.copyfile(wheel, tmp)
        tmp.replace(dest)
    return dest
