"""The ABI guard: after every step, prove torch and the protected set were not touched.

The per-step check reads installed metadata only (dist-info folders and RECORD files; no
``import torch``), in milliseconds. One full ``import torch`` check runs at the end.

Rules:
- the ABI package (torch) has the baseline version, local tag and CUDA version;
- its RECORD is byte-identical and still lists the baseline stamp (a reinstall of the same
  version is a violation: the files were rewritten under a running stack's feet); when RECORD
  is no longer the very file the baseline saw (a layer commit, ``cp -a``, a restore), the files
  it lists are checked against it once (see "Identity" below);
- every protected distribution (torch's triton and nvidia-* runtime wheels, ``abi.protect``)
  keeps its version and RECORD;
- no second distribution provides the ``triton`` module;
- no file is owned by two distributions unless the spec acknowledges the overlap, and then the
  acknowledged winner's copy is the one on disk;
- a wheel built by ``envbuild wheelhouse`` was built against the installed torch.
A ``--no-deps`` step's unmet requirements are reported (warning; error with ``--strict``).

Identity. What says "this is still the torch the baseline saw" must survive what happens to an
environment that nobody reinstalled: an image layer commit (new inodes, whole-second mtimes), a
``cp -a``, a restore from backup, a container export, a ``touch``. So it is content only:
- ``record_sha256``: the sha256 of RECORD's bytes;
- the baseline stamp: when the baseline is frozen, envbuild writes ``ENVBUILD_BASELINE`` into the
  dist-info and lists it in RECORD, as an installer lists INSTALLER. Every installer (pip, uv)
  uninstalls by RECORD and writes a fresh RECORD from the wheel, so a reinstall, even of the
  byte-identical wheel by uv (whose RECORD is otherwise identical), loses the line and the file.
  The stamp's content is deterministic (the pre-stamp RECORD's sha256), so two provisions of the
  same stack still have equal RECORDs and receipts compare equal;
- ``payload_sha256``: the sha256 of the RECORD rows for files in site-packages outside the
  dist-info and ``__pycache__`` (the wheel's own files, not the scripts an installer writes), which tells "the same build reinstalled" from "a different build";
- ``record_key`` (inode, mtime_ns, size of RECORD) is a cache key only: while it is unchanged the
  files are the ones the baseline saw; when it changed, every file RECORD lists is checked
  (size, and sha256 for files up to ``LAZY_HASH_LIMIT``) once per process.
An adopted environment (``abi.adopt``: someone else's, left byte-for-byte alone) and one whose
dist-info cannot be written are unstamped: a pip reinstall is still caught (pip lists the ``.pyc`` it compiles, whose headers carry the new
source mtimes), a uv reinstall of the byte-identical wheel is not.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.spec import ABI, StackSpec
from envbuild.wheel_provenance import provenance_mismatch, read_provenance

_CUDA_RE = re.compile(r"""^cuda\s*(?::\s*[^=]+)?=\s*['"]([^'"]+)['"]""", re.M)
_VERSION_RE = re.compile(r"""^__version__\s*(?::\s*[^=]+)?=\s*['"]([^'"]+)['"]""", re.M)


STAMP = "ENVBUILD_BASELINE"  # the baseline stamp's file name inside a dist-info folder
LAZY_HASH_LIMIT = 1 << 20  # files above this size are checked by size only after a copy


@dataclass(frozen=True)
class Dist:
    name: str  # canonical
    version: str
    dist_info: Path
    record_sha256: str  # sha256 of RECORD's bytes: the identity (content, survives copies)
    record_key: tuple[int, int, int]  # (inode, mtime_ns, size) of RECORD: a cache key, never identity
    stamped: bool = False  # the dist-info holds envbuild's baseline stamp

    def installer(self) -> str:
        """What the INSTALLER file says (pip, uv, ...), or "" when there is none."""
        try:
            return (self.dist_info / "INSTALLER").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""

    def metadata(self) -> Message:
        text = (self.dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
        return HeaderParser().parsestr(text)

    def requires(self) -> list[str]:
        return [str(r) for r in self.metadata().get_all("Requires-Dist") or []]

    def files(self) -> dict[str, str]:
        """RECORD as {relative path: "sha256=..." or ""} (parsed once per RECORD file; see ``_cached``)."""
        path = self.dist_info / "RECORD"
        hit = _cached(path, "files", self.record_key)
        if hit is None:
            hit = _remember(path, "files", self.record_key, _read_record(path))
        return hit  # type: ignore[no-any-return]

    def payload_sha256(self) -> str:
        """sha256 of the RECORD rows for the wheel's own files (not the dist-info, not ``.pyc``, not
        the console scripts each installer writes its own way under ``../bin``): equal for two
        installs of the same build, whatever installer and whenever."""
        hit = _cached(self.dist_info / "RECORD", "payload", self.record_key)
        if hit is None:
            rows = sorted(f"{p},{h}" for p, h in self.files().items()
                          if ".dist-info/" not in p and "__pycache__" not in p and not p.startswith("../"))
            hit = _remember(self.dist_info / "RECORD", "payload", self.record_key,
                            hashlib.sha256("\n".join(rows).encode()).hexdigest())
        return hit  # type: ignore[no-any-return]


def site_packages(venv: Path) -> Path:
    """The environment's purelib: a venv's ``lib/python3.X/site-packages``, or what its
    interpreter reports (a system or container Python, e.g. NGC's ``dist-packages``)."""
    candidates = sorted((venv / "lib").glob("python3*/site-packages"))
    if candidates:
        return candidates[-1]
    python = venv / "bin" / "python3"
    if python.exists():
        from envbuild.run import run

        out = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  capture=True, separate_stderr=True, timeout=30)
        if out.ok and Path((out.output or "").strip()).is_dir():
            return Path((out.output or "").strip())
    raise FileNotFoundError(f"no site-packages under {venv}/lib")


def scan(site: Path) -> dict[str, Dist]:
    """All distributions installed in ``site`` (metadata only)."""
    return {d.name: d for d in _scan(site, site.glob("*.dist-info"))}


def _scan(site: Path, infos: Iterable[Path]) -> Iterator[Dist]:
    for info in infos:
        meta = info / "METADATA"
        record = info / "RECORD"
        if not meta.is_file():
            continue
        name = version = None
        with meta.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Name:"):
                    name = line[5:].strip()
                elif line.startswith("Version:"):
                    version = line[8:].strip()
                if (name and version) or not line.strip():
                    break
        if not name or not version:
            continue
        if record.is_file():
            st = record.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            sha = _cached(record, "sha256", key)
            if sha is None:
                sha = _remember(record, "sha256", key, hashlib.sha256(record.read_bytes()).hexdigest())
        else:
            sha, key = "", (0, 0, 0)
        yield Dist(canonicalize_name(name), version, info, sha, key, (info / STAMP).is_file())


# The guard runs after every step and reads every RECORD in the environment; with hundreds of
# packages (and torch's RECORD of ~12k lines) parsing them again each step is most of its time.
# Parsed RECORDs and their sha256 are kept per process, keyed by (path, inode, mtime_ns, size):
# an installer that touches a distribution writes a new RECORD (a new file, a new mtime), so a
# changed RECORD never hits the cache. Results are identical to reading the file again.
_RECORD_CACHE: dict[tuple[str, str], tuple[tuple[int, int, int], object]] = {}


def _cached(path: Path, kind: str, key: tuple[int, int, int]) -> Any:
    hit = _RECORD_CACHE.get((str(path), kind))
    return hit[1] if hit is not None and hit[0] == tuple(key) else None


def _remember(path: Path, kind: str, key: tuple[int, int, int], value: Any) -> Any:
    if tuple(key) == (0, 0, 0):
        return value
    try:
        st = path.stat()
    except OSError:
        return value
    if (st.st_ino, st.st_mtime_ns, st.st_size) == tuple(key):
        _RECORD_CACHE[(str(path), kind)] = (tuple(key), value)  # type: ignore[assignment]
    return value


def clear_cache() -> None:
    """Forget every parsed RECORD (benchmarks time the uncached guard with it)."""
    _RECORD_CACHE.clear()


def _read_record(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for row in csv.reader(io.StringIO(path.read_text(encoding="utf-8", errors="replace"))):
        if row:
            out[row[0]] = row[1] if len(row) > 1 else ""
    return out


def read_runtime_version(site: Path, package: str = "torch") -> str | None:
    """``torch.__version__`` from ``torch/version.py`` without importing torch. It can differ from
    the dist-info version: some builds (NGC, this workplace's image) record ``2.11.0`` in their
    metadata and ``2.11.0+cu130`` at run time."""
    vfile = site / package / "version.py"
    if not vfile.is_file():
        return None
    m = _VERSION_RE.search(vfile.read_text(encoding="utf-8", errors="replace"))
    return m.group(1) if m else None


def read_cuda(site: Path, package: str = "torch") -> str | None:
    """``torch.version.cuda`` read from ``torch/version.py`` without importing torch."""
    vfile = site / package / "version.py"
    if not vfile.is_file():
        return None
    m = _CUDA_RE.search(vfile.read_text(encoding="utf-8", errors="replace"))
    return m.group(1) if m else None


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
    stamped: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Baseline:
        return cls(
            package=data["package"], version=data["version"], cuda=data.get("cuda"),
            record_sha256=data["record_sha256"], record_key=_key(data),
            protected={k: dict(v) for k, v in data.get("protected", {}).items()},
            dist_version=data.get("dist_version") or data["version"],
            payload_sha256=data.get("payload_sha256", ""), stamped=bool(data.get("stamped", False)),
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
    return {"version": d.version, "record_sha256": d.record_sha256, "payload_sha256": d.payload_sha256(),
            "stamped": d.stamped, "record_key": list(d.record_key)}


def active_requirements(dist: Dist, env: Mapping[str, str]) -> Iterator[Requirement]:
    """The distribution's Requires-Dist whose markers hold (extras off) for the target interpreter."""
    return active(dist.requires(), env)


def active(requires: Iterable[str], env: Mapping[str, str]) -> Iterator[Requirement]:
    """The Requires-Dist lines whose markers hold (extras off) in ``env``; unparsable lines are skipped."""
    for raw in requires:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.marker is None or _marker_true(req.marker, env):
            yield req


def protected_set(abi: ABI, installed: Collection[str], torch_requires: Iterable[Requirement]) -> set[str]:
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
    return protected_set(abi, dists.keys(), active_requirements(torch, env) if torch is not None else ())


def _marker_true(marker: Marker, env: Mapping[str, str]) -> bool:
    try:
        return marker.evaluate({**env, "extra": ""})
    except Exception:  # an unknown variable: be conservative, count it
        return True


def take_baseline(abi: ABI, site: Path, env: Mapping[str, str], *, stamp: bool = False) -> Baseline:
    """The environment's identity now. ``stamp``: first write the baseline stamp into the ABI
    package's and the protected set's dist-info (provision does, when it freezes the baseline;
    a check of an environment without a manifest reads only)."""
    dists = scan(site)
    torch = dists.get(abi.package)
    if torch is None:
        raise LookupError(abi.package)
    names = sorted(protected_names(abi, dists, env))
    if stamp:
        for n in [abi.package, *names]:
            dists[n] = stamp_dist(dists[n])
    torch = dists[abi.package]
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


def stamp_dist(dist: Dist) -> Dist:
    """Write ``STAMP`` into ``dist``'s dist-info and list it in RECORD (both replaced atomically),
    and return the distribution as it is now. Its content is the RECORD's sha256 before the stamp,
    so it is the same for two installs of the same wheel by the same installer. A dist-info that
    cannot be written (a read-only base image) is left alone, unstamped."""
    info = dist.dist_info
    record = info / "RECORD"
    rel = f"{info.name}/{STAMP}"
    try:
        text = record.read_text(encoding="utf-8")
        newline = "\r\n" if "\r\n" in text else "\n"
        rows = [line for line in text.splitlines() if line and not line.startswith(rel + ",")]
        body = json.dumps({"envbuild_baseline": 1, "package": dist.name, "version": dist.version,
                           "record_sha256": hashlib.sha256((newline.join(rows) + newline).encode()).hexdigest()},
                          sort_keys=True).encode() + b"\n"
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        at = next((i for i, line in enumerate(rows) if line.startswith(f"{info.name}/RECORD,")), len(rows))
        rows.insert(at, f"{rel},sha256={digest},{len(body)}")
        _replace(info / STAMP, body, 0o644)
        _replace(record, (newline.join(rows) + newline).encode(), record.stat().st_mode & 0o7777)
    except OSError:
        return dist
    return scan_one(info) or dist


def _replace(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.envbuild-tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def scan_one(info: Path) -> Dist | None:
    """One dist-info folder, as ``scan`` reads it."""
    return next((d for d in _scan(info.parent, [info])), None)


@dataclass(frozen=True)
class Violation:
    """One way the environment departs from its baseline (a warning unless ``--strict``, or one
    that breaks the baseline): the guard rule, the package it names, and what happened."""

    rule: str  # "version", "local", "cuda", "reinstalled", "protected", "triton", "overlap", "provenance", "unmet"
    package: str
    message: str


@dataclass
class GuardReport:
    violations: list[Violation] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def check(
    spec: StackSpec,
    baseline: Baseline,
    site: Path,
    *,
    before: Mapping[str, Dist] | None = None,
    no_deps_names: Iterable[str] = (),
    marker_env: Mapping[str, str] | None = None,
) -> GuardReport:
    """Compare the environment in ``site`` with ``baseline``. ``before``: the scan before the step."""
    import time

    t0 = time.perf_counter()
    abi = spec.abi
    report = GuardReport()
    dists = scan(site)
    v, w = report.violations, report.warnings
    torch = dists.get(abi.package)
    if torch is None:
        v.append(Violation("version", abi.package, f"{abi.package} {baseline.version} was uninstalled"))
    else:
        module = abi.package.replace("-", "_")
        runtime = read_runtime_version(site, module) or torch.version
        if torch.version != (baseline.dist_version or baseline.version) or runtime != baseline.version:
            v.append(Violation("version", abi.package, f"{abi.package} changed: {baseline.version} -> {runtime}"))
        else:
            pin = {"record_sha256": baseline.record_sha256, "payload_sha256": baseline.payload_sha256,
                   "stamped": baseline.stamped, "record_key": list(baseline.record_key)}
            problem = _identity_problem(torch, pin, site)
            if problem:
                v.append(Violation(problem[0], abi.package, f"{abi.package} {torch.version} {problem[1]}"))
        if abi.local and abi.local not in runtime:
            v.append(Violation("local", abi.package, f"{abi.package} {runtime} lacks the local tag {abi.local!r}"))
        cuda = read_cuda(site, module)
        if abi.cuda and cuda != abi.cuda:
            v.append(Violation("cuda", abi.package, f"{abi.package}.version.cuda is {cuda!r}, expected {abi.cuda!r}"))
    for name, pin in baseline.protected.items():
        d = dists.get(name)
        if d is None:
            v.append(Violation("protected", name, f"protected {name} {pin['version']} was uninstalled"))
        elif d.version != pin["version"]:
            v.append(Violation("protected", name, f"protected {name} changed: {pin['version']} -> {d.version}"))
        else:
            problem = _identity_problem(d, pin, site)
            if problem:
                v.append(Violation("protected", name, f"protected {name} {d.version} {problem[1]}"))
    _check_files(spec, dists, site, v)
    runtime_version = (read_runtime_version(site, abi.package.replace("-", "_")) or torch.version) if torch else None
    _check_provenance(dists, runtime_version, v)
    if no_deps_names:
        for f in unmet_requirements(dists, no_deps_names, marker_env or {}):
            w.append(f)
    report.seconds = time.perf_counter() - t0
    return report


def _identity_problem(d: Dist, pin: Mapping[str, Any], site: Path) -> tuple[str, str] | None:
    """How ``d`` (at the pinned version) differs from its frozen identity ``pin``, as (rule, text)."""
    if d.record_sha256 != pin.get("record_sha256") or (pin.get("stamped") and not d.stamped):
        by = f" by {d.installer()}" if d.installer() else ""
        why = "the baseline stamp envbuild listed in its RECORD is gone" if pin.get("stamped") else "its RECORD changed"
        if pin.get("payload_sha256") and d.payload_sha256() == pin["payload_sha256"]:
            return "reinstalled", f"was reinstalled{by} (same version, same files, rewritten: {why})"
        if pin.get("payload_sha256") or not pin.get("stamped"):
            return "reinstalled", f"was replaced{by} by a different build of the same version (RECORD changed)"
        return "reinstalled", f"was reinstalled{by} (same version; {why})"
    if tuple(pin.get("record_key") or ()) == tuple(d.record_key):
        return None  # the very RECORD file the baseline read: nothing was copied, nothing to check
    bad = files_differ(d, site)
    if bad:
        return "modified", (f"has {len(bad)} file(s) that differ from its RECORD ({', '.join(bad[:3])}"
                            f"{', ...' if len(bad) > 3 else ''}): changed after it was installed")
    return None


def files_differ(d: Dist, site: Path) -> list[str]:
    """The files ``d``'s RECORD lists that are missing or differ from it: size for every file,
    sha256 too up to ``LAZY_HASH_LIMIT``. Run when RECORD is a copy (a layer commit, ``cp -a``,
    a restore), once per process per RECORD file: the answer is kept under its ``record_key``."""
    record = d.dist_info / "RECORD"
    hit = _cached(record, "differ", d.record_key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    bad: list[str] = []
    for row in csv.reader(io.StringIO(record.read_text(encoding="utf-8", errors="replace"))):
        if len(row) < 3 or not row[1].startswith("sha256=") or "__pycache__" in row[0] or row[0].startswith("../"):
            continue  # RECORD itself, .pyc (rewritten by any interpreter that finds them stale), scripts in bin/
        path = site / row[0]
        try:
            size = path.stat().st_size
        except OSError:
            bad.append(row[0])
            continue
        wrong_size = row[2].isdigit() and int(row[2]) != size
        if wrong_size or (size <= LAZY_HASH_LIMIT and row[1] != _record_hash(path)):
            bad.append(row[0])
    return _remember(record, "differ", d.record_key, bad)  # type: ignore[no-any-return]


def _record_hash(path: Path) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def _check_files(spec: StackSpec, dists: Mapping[str, Dist], site: Path, v: list[Violation]) -> None:
    abi = spec.abi
    owners: dict[str, list[str]] = {}
    hashes: dict[tuple[str, str], str] = {}
    triton_owners: set[str] = set()
    for name, d in dists.items():
        for path, digest in d.files().items():
            if path.startswith("triton/"):
                triton_owners.add(name)
            if ".dist-info/" in path or "__pycache__" in path or path.startswith(".."):
                continue
            owners.setdefault(path, []).append(name)
            hashes[(path, name)] = digest
    if abi.triton_provider:
        extra = sorted(triton_owners - {abi.triton_provider})
        if extra:
            v.append(Violation("triton", extra[0],
                             f"{', '.join(extra)} installed a second `triton` module next to {abi.triton_provider} "
                             f"(same import name: its files overwrite {abi.triton_provider}'s)"))
    elif len(triton_owners) > 1:
        names = sorted(triton_owners)
        v.append(Violation("triton", names[-1], f"{', '.join(names)} all provide the `triton` module"))
    acknowledged = {frozenset(o.packages): o.winner for o in abi.overlaps}
    reported: set[frozenset[str]] = set()
    for path, names in owners.items():
        if len(names) < 2:
            continue
        group = frozenset(names)
        if group & triton_owners and path.startswith("triton/"):
            continue  # reported by the triton rule
        winner = next((w for g, w in acknowledged.items() if group <= g), None)
        if winner is None:
            if group not in reported:
                reported.add(group)
                v.append(Violation("overlap", sorted(names)[-1],
                                 f"{' and '.join(sorted(names))} both own {path} (and maybe more files); "
                                 "acknowledge it with [[abi.overlap]] packages/winner, or drop one"))
            continue
        expected = hashes.get((path, winner), "")
        if expected.startswith("sha256=") and (site / path).is_file():
            actual = _record_hash(site / path)
            if actual != expected and group not in reported:
                reported.add(group)
                loser = next(n for n in names if n != winner)
                v.append(Violation("overlap", loser,
                                 f"{path} on disk is not {winner}'s copy (acknowledged overlap of {', '.join(sorted(names))}): "
                                 f"{loser} was installed after {winner}; install {winner} last"))


def _check_provenance(dists: Mapping[str, Dist], torch_version: str | None, v: list[Violation]) -> None:
    for name, d in dists.items():
        prov = read_provenance(d.dist_info)
        if prov is None:
            _check_abi_tag(name, d, torch_version, v)
            continue
        problem = provenance_mismatch(prov, torch_version)
        if problem:
            v.append(Violation("provenance", name, f"{name} {d.version}: {problem}"))


def _check_abi_tag(name: str, d: Dist, torch_version: str | None, v: list[Violation]) -> None:
    """A prebuilt extension without envbuild's provenance record (a release wheel: flash-attn
    ``+cu12torch2.10cxx11abiTRUE``) checked by the ABI claim in its local version, with the same
    parser and rules as ``check-lock``'s ``extension-abi`` (``envbuild.abitag``)."""
    if torch_version is None or "+" not in d.version:
        return
    from envbuild.abitag import mismatches, parse_claim, torch_build

    claim = parse_claim(d.version)
    if claim is None:
        return
    for m in mismatches(claim, torch_build(torch_version), "linux"):
        v.append(Violation("provenance", name, f"{name} {d.version} is {m.message}: it will fail to import "
                         "(undefined symbol); install the wheel built for the installed torch"))


def unmet_requirements(dists: Mapping[str, Dist], names: Iterable[str], env: Mapping[str, str]) -> list[Violation]:
    out: list[Violation] = []
    for name in names:
        d = dists.get(canonicalize_name(name))
        if d is None:
            continue
        for req in active_requirements(d, env):
            dep = dists.get(canonicalize_name(req.name))
            if dep is None:
                out.append(Violation("unmet", d.name, f"{d.name} {d.version} requires {req}, which is not installed"))
                continue
            try:
                ok = req.specifier.contains(Version(dep.version), prereleases=True)
            except InvalidVersion:
                ok = True
            if not ok:
                out.append(Violation("unmet", d.name,
                                   f"{d.name} {d.version} requires {req}, but {dep.name} {dep.version} is installed"))
    return out


def requirers(dists: Mapping[str, Dist], target: str, among: Iterable[str]) -> list[str]:
    """Which of ``among`` (e.g. what a step installed or changed) declare a requirement on ``target``."""
    target = canonicalize_name(target)
    out = []
    for name in among:
        d = dists.get(canonicalize_name(name))
        if d is None or d.name == target:
            continue
        for raw in d.requires():
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) == target:
                out.append(f"{d.name} {d.version} (requires {req})")
                break
    return out


def changed(before: Mapping[str, Dist], after: Mapping[str, Dist]) -> list[str]:
    """Distributions new, removed or rewritten between two scans (by content: a copy is no change)."""
    out = [n for n, d in after.items()
           if n not in before or before[n].record_sha256 != d.record_sha256 or before[n].version != d.version]
    return out + [n for n in before if n not in after]


def culprits(finding: Violation, before: Mapping[str, Dist], after: Mapping[str, Dist],
             step_names: Iterable[str]) -> list[str]:
    """Report lines saying who, in the step between ``before`` and ``after``, caused ``finding``.

    A package that changed the ABI package or a protected one during the step is named with the
    requirement that pulled it in. If the package did not change during the step at all, nothing
    in the step is blamed: it already differed from the baseline when the step began."""
    if finding.rule == "overlap":
        return []
    touched = changed(before, after)
    target = canonicalize_name(finding.package)
    if finding.rule in ("version", "reinstalled", "protected") and target not in touched:
        return [f"  not this step: {target} was already like this when the step began "
                "(changed outside envbuild, by hand or between steps)"]
    found = requirers(after, target, [*step_names, *touched])
    if found:
        return [f"  pulled in by: {'; '.join(dict.fromkeys(found))}"]
    if finding.rule == "unmet":
        return []
    return [f"  installed or changed by this step: {', '.join(touched or list(step_names))}"]


FULL_CHECK = (
    "import json, torch\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
    "'file': torch.__file__}))\n"
)
# The same, plus the source files the import loaded (what the import warm-up compiles next time).
FULL_CHECK_MODULES = (
    "import json, sys, torch\n"
    "mods = sorted({f for m in list(sys.modules.values()) for f in [getattr(m, '__file__', None)] "
    "if isinstance(f, str) and f.endswith('.py')})\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
    "'file': torch.__file__, 'modules': mods}))\n"
)


def full_check_result(spec: StackSpec, data: Mapping[str, Any]) -> list[Violation]:
    """Interpret the output of FULL_CHECK run by the venv's python."""
    abi = spec.abi
    out: list[Violation] = []
    if data.get("version") != abi.version:
        out.append(Violation("version", abi.package, f"import {abi.package} gives {data.get('version')}, expected {abi.version}"))
    if abi.local and abi.local not in str(data.get("version")):
        out.append(Violation("local", abi.package, f"import {abi.package} gives {data.get('version')}, without {abi.local!r}"))
    if abi.cuda and data.get("cuda") != abi.cuda:
        out.append(Violation("cuda", abi.package, f"torch.version.cuda is {data.get('cuda')!r}, expected {abi.cuda!r}"))
    return out
