"""Reading an environment's site-packages without importing it: its distributions (dist-info,
METADATA, RECORD, parsed once per RECORD file per process), torch's runtime and CUDA versions
from ``torch/version.py``, the files that differ from RECORD, the Requires-Dist that hold.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import functools
import hashlib
import io
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, TypeVar

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

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
    # (inode, mtime_ns, size) of RECORD: a cache key, never identity
    record_key: tuple[int, int, int]
    stamped: bool = False  # the dist-info holds envbuild's baseline stamp

    def installer(self) -> str:
        """What the INSTALLER file says (pip, uv, ...), or "" when there is none."""
        try:
            return (
                (self.dist_info / "INSTALLER").read_text(encoding="utf-8", errors="replace").strip()
            )
        except OSError:
            return ""

    def metadata(self) -> Message:
        text = (self.dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
        return HeaderParser().parsestr(text)

    def requires(self) -> list[str]:
        """The Requires-Dist lines (kept per process by the METADATA file's inode, mtime and size,
        as the RECORDs are: the guard after a step and the unmet check after the last both ask)."""
        meta = self.dist_info / "METADATA"
        try:
            st = meta.stat()
        except OSError:
            return []
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        hit: list[str] | None = _cached(meta, "requires", key)
        if hit is None:
            lines = [str(r) for r in self.metadata().get_all("Requires-Dist") or []]
            hit = _remember(meta, "requires", key, lines)
        return list(hit)

    def files(self) -> dict[str, str]:
        """RECORD as {relative path: "sha256=..." or ""} (parsed once per RECORD file; see
        ``_cached``)."""
        path = self.dist_info / "RECORD"
        hit: dict[str, str] | None = _cached(path, "files", self.record_key)
        if hit is None:
            hit = _remember(path, "files", self.record_key, _read_record(path))
        return hit

    def payload_sha256(self) -> str:
        """sha256 of the RECORD rows for the wheel's own files (not the dist-info, not ``.pyc``, not
        the console scripts each installer writes its own way under ``../bin``): equal for two
        installs of the same build, whatever installer and whenever."""
        hit: str | None = _cached(self.dist_info / "RECORD", "payload", self.record_key)
        if hit is None:
            rows = sorted(
                f"{p},{h}"
                for p, h in self.files().items()
                if ".dist-info/" not in p and "__pycache__" not in p and not p.startswith("../")
            )
            hit = _remember(
                self.dist_info / "RECORD",
                "payload",
                self.record_key,
                hashlib.sha256("\n".join(rows).encode()).hexdigest(),
            )
        return hit


def site_packages(venv: Path) -> Path:
    """The environment's purelib: a venv's ``lib/python3.X/site-packages``, or what its
    interpreter reports (a system or container Python, e.g. NGC's ``dist-packages``)."""
    candidates = sorted((venv / "lib").glob("python3*/site-packages"))
    if candidates:
        return candidates[-1]
    python = venv / "bin" / "python3"
    if python.exists():
        from envbuild.run import run

        out = run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture=True,
            separate_stderr=True,
            timeout=30,
        )
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
        try:
            st = meta.stat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        named = _name_version(meta, (st.st_ino, st.st_mtime_ns, st.st_size))
        if named is None:
            continue
        name, version = named
        if record.is_file():
            st = record.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            sha = _cached(record, "sha256", key)
            if sha is None:
                sha = _remember(
                    record, "sha256", key, hashlib.sha256(record.read_bytes()).hexdigest()
                )
        else:
            sha, key = "", (0, 0, 0)
        yield Dist(canonicalize_name(name), version, info, sha, key, (info / STAMP).is_file())


@dataclass(frozen=True)
class SharedFiles:
    """What the distributions' RECORDs say about the files more than one of them installs:
    ``owners`` {path: ((name, RECORD hash), ...)} for each path of site-packages two or more
    distributions list (``index.records.installed_files``: no dist-info, bytecode or scripts), in
    scan order;
    ``triton``: the distributions that install a file under ``triton/``."""

    owners: dict[str, tuple[tuple[str, str], ...]]
    triton: frozenset[str]


def shared_files(dists: Mapping[str, Dist], keep: Path | None = None) -> SharedFiles:
    """The ``SharedFiles`` of ``dists``, from their RECORDs. With ``keep`` (a JSON file of the
    caller's), the answer is kept there under the RECORDs' identities (name, version, sha256,
    inode, mtime and size) and read back while they are all the same: a no-op re-run reads no
    RECORD for it. A torn or foreign file is ignored and written again."""
    import json

    from envbuild._io import atomic_write_json

    key = hashlib.sha256(
        json.dumps(
            [(n, d.version, d.record_sha256, list(d.record_key)) for n, d in dists.items()]
        ).encode()
    ).hexdigest()
    if keep is not None:
        try:
            doc = json.loads(keep.read_text(encoding="utf-8"))
            if doc["key"] == key:
                return SharedFiles(
                    {p: tuple((n, h) for n, h in o) for p, o in doc["owners"]},
                    frozenset(doc["triton"]),
                )
        except (OSError, ValueError, TypeError, KeyError):
            pass
    from envbuild.index.records import installed_files  # the one rule of which rows can overlap

    owners: dict[str, list[tuple[str, str]]] = {}
    triton: set[str] = set()
    for name, d in dists.items():
        rows = d.files()
        if any(path.startswith("triton/") for path in rows):
            triton.add(name)
        for path, digest in installed_files(rows).items():
            owners.setdefault(path, []).append((name, digest))
    found = SharedFiles({p: tuple(o) for p, o in owners.items() if len(o) > 1}, frozenset(triton))
    if keep is not None:
        with contextlib.suppress(OSError):
            atomic_write_json(
                keep,
                {
                    "key": key,
                    "owners": [[p, [list(x) for x in o]] for p, o in found.owners.items()],
                    "triton": sorted(found.triton),
                },
            )
    return found


def _name_version(meta: Path, key: tuple[int, int, int]) -> tuple[str, str] | None:
    """``Name`` and ``Version`` of a METADATA file (its headers only), kept per process by the
    file's (inode, mtime_ns, size) as the RECORDs are: a run scans the venv several times."""
    hit = _META_CACHE.get(str(meta))
    if hit is not None and hit[0] == key:
        return hit[1]
    name = version = None
    with meta.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("Name:"):
                name = line[5:].strip()
            elif line.startswith("Version:"):
                version = line[8:].strip()
            if (name and version) or not line.strip():
                break
    named = (name, version) if name and version else None
    _META_CACHE[str(meta)] = (key, named)
    return named


_META_CACHE: dict[str, tuple[tuple[int, int, int], tuple[str, str] | None]] = {}


# The guard runs after every step and reads every RECORD in the environment; with hundreds of
# packages (and torch's RECORD of ~12k lines) parsing them again each step is most of its time.
# Parsed RECORDs and their sha256 are kept per process, keyed by (path, inode, mtime_ns, size):
# an installer that touches a distribution writes a new RECORD (a new file, a new mtime), so a
# changed RECORD never hits the cache. Results are identical to reading the file again.
_RECORD_CACHE: dict[tuple[str, str], tuple[tuple[int, int, int], object]] = {}
_T = TypeVar("_T")


def _cached(path: Path, kind: str, key: tuple[int, int, int]) -> Any:
    """What ``_remember`` kept for ``kind`` (the caller's variable says its type), or None."""
    hit = _RECORD_CACHE.get((str(path), kind))
    return hit[1] if hit is not None and hit[0] == tuple(key) else None


def _remember(path: Path, kind: str, key: tuple[int, int, int], value: _T) -> _T:
    if tuple(key) == (0, 0, 0):
        return value
    try:
        st = path.stat()
    except OSError:
        return value
    if (st.st_ino, st.st_mtime_ns, st.st_size) == tuple(key):
        _RECORD_CACHE[(str(path), kind)] = (key, value)
    return value


def clear_cache() -> None:
    """Forget every parsed RECORD and METADATA header (benchmarks time the uncached guard with
    it)."""
    _RECORD_CACHE.clear()
    _META_CACHE.clear()


def _read_record(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    from envbuild.index.records import parse_record

    return parse_record(path.read_text(encoding="utf-8", errors="replace"))


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


def active_requirements(dist: Dist, env: Mapping[str, str]) -> Iterator[Requirement]:
    """The distribution's Requires-Dist whose markers hold (extras off) for the target
    interpreter."""
    return active(dist.requires(), env)


def active(requires: Iterable[str], env: Mapping[str, str]) -> Iterator[Requirement]:
    """The Requires-Dist lines whose markers hold (extras off) in ``env``; unparsable lines are
    skipped."""
    for raw in requires:
        req = _requirement(raw)
        if req is not None and (req.marker is None or _marker_true(req.marker, env)):
            yield req


@functools.lru_cache(maxsize=8192)
def _requirement(raw: str) -> Requirement | None:
    """``raw`` parsed (None where it does not parse): the same lines are read after every step."""
    try:
        return Requirement(raw)
    except InvalidRequirement:
        return None


def _marker_true(marker: Marker, env: Mapping[str, str]) -> bool:
    try:
        return marker.evaluate({**env, "extra": ""})
    except Exception:  # noqa: BLE001 - an unknown variable: be conservative, count it
        return True


def scan_one(info: Path) -> Dist | None:
    """One dist-info folder, as ``scan`` reads it."""
    return next((d for d in _scan(info.parent, [info])), None)


def files_differ(d: Dist, site: Path, *, hash_limit: int | None = None) -> list[str]:
    """The files ``d``'s RECORD lists that are missing or differ from it: size for every file,
    sha256 too up to ``LAZY_HASH_LIMIT`` (``hash_limit``: another bound; 0 sizes only, the quick
    look at packages a base image already holds). Run when RECORD is a copy (a layer commit,
    ``cp -a``, a restore), once per process per RECORD file and bound: the answer is kept under its
    ``record_key``."""
    limit = LAZY_HASH_LIMIT if hash_limit is None else hash_limit
    record = d.dist_info / "RECORD"
    kind = "differ" if limit == LAZY_HASH_LIMIT else f"differ-{limit}"
    hit: list[str] | None = _cached(record, kind, d.record_key)
    if hit is not None:
        return hit
    bad: list[str] = []
    for row in csv.reader(io.StringIO(record.read_text(encoding="utf-8", errors="replace"))):
        if (
            len(row) < 3
            or not row[1].startswith("sha256=")
            or "__pycache__" in row[0]
            or row[0].startswith("../")
        ):
            # RECORD itself, .pyc (rewritten by any interpreter that finds them stale), scripts in
            # bin/
            continue
        path = site / row[0]
        try:
            size = path.stat().st_size
        except OSError:
            bad.append(row[0])
            continue
        wrong_size = row[2].isdigit() and int(row[2]) != size
        if wrong_size or (size <= limit and row[1] != record_hash(path)):
            bad.append(row[0])
    return _remember(record, kind, d.record_key, bad)


def record_hash(path: Path) -> str:
    return (
        "sha256="
        + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    )


def changed(before: Mapping[str, Dist], after: Mapping[str, Dist]) -> list[str]:
    """Distributions new, removed or rewritten between two scans (by content: a copy is no
    change)."""
    out = [
        n
        for n, d in after.items()
        if n not in before
        or before[n].record_sha256 != d.record_sha256
        or before[n].version != d.version
    ]
    return out + [n for n in before if n not in after]
