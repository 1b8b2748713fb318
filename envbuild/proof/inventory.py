"""What is installed in this interpreter, for a receipt (standalone: no envbuild, no torch import).

Prints one JSON document: the Python version, every distribution with its version, installer,
the sha256 of its dist-info RECORD (catches a reinstall of the same version), the identity of its
files wherever the environment lives (``content_sha256``, what ``receipt diff`` compares, and
``modified``: files whose bytes on disk are not the ones RECORD lists), and torch's version / CUDA /
git revision read from ``torch/version.py`` as text, plus the versions of the cuDNN and NCCL
runtime wheels where torch uses them. Importing torch would cost seconds and initialise CUDA; the
receipt must be cheap.

A distribution's identity is what was installed, not where. ``content_sha256`` digests one row per
file RECORD lists (its path, and its sha256 as it is on disk), sorted (pip and uv order RECORD
differently), with the path-dependent parts normalised or left out:

- a script under the environment's ``bin/`` whose first line is a shebang naming the environment
  (``#!/mnt/data/venv/bin/python``; or ``#!/bin/sh`` and an ``exec`` line naming it, for long
  paths) is hashed with that path replaced by ``<prefix>``, and listed by its path inside the
  environment (``<prefix>/bin/torchrun``, not ``../../../bin/torchrun``);
- envbuild's baseline stamp (``ENVBUILD_BASELINE``: its content is the pre-stamp RECORD's sha256,
  which names the scripts' paths), the installer's records of where a wheel came from
  (``direct_url.json``: a local wheel's absolute path; ``uv_cache.json``: uv's cache timestamps)
  and RECORD itself are left out;
- bytecode (``.pyc``) is left out: Python rewrites it whenever a source's mtime changes (a copy,
  an image layer), and it is derived from the sources, which are in.

Every file's bytes are read once and remembered by (size, mtime, ctime, inode) in a cache file
per environment (``--cache-dir``), so a later receipt of an unchanged environment only stats its
files: a changed byte changes the file's mtime and ctime, is hashed again and shows as drift. A
file missing on disk is listed as modified.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as md
import io
import json
import os
import platform
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

STAMP = "ENVBUILD_BASELINE"  # envbuild.guard.STAMP (this script imports nothing of envbuild)
# dist-info files that record the install, not the distribution: RECORD itself, the baseline stamp,
# where a wheel came from (direct_url.json: a local path; uv_cache.json: uv's cache timestamps)
INSTALL_RECORDS = ("RECORD", STAMP, "direct_url.json", "uv_cache.json")
PREFIX_MARK = b"<prefix>"
MODIFIED_SHOWN = 20  # the first N modified files are named; ``modified_count`` has them all
CACHE_SCHEMA = 1
if TYPE_CHECKING:  # an alias at run time would need Python 3.9+: this runs in the target's Python
    _StatKey = tuple[int, int, int, int]


def _record(dist: md.Distribution) -> str | None:
    try:
        return dist.read_text("RECORD")
    except OSError:
        return None


def record_sha256(dist: md.Distribution) -> str | None:
    text = _record(dist)
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def _b64(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class FileHashes:
    """sha256 of files on disk (RECORD's notation), remembered by stat key across runs."""

    def __init__(self, cache_file: Path | None) -> None:
        self.cache_file = cache_file
        self.known: dict[str, list[Any]] = {}
        self.used: dict[str, list[Any]] = {}
        if cache_file is not None:
            try:
                doc = json.loads(cache_file.read_text(encoding="utf-8"))
                if (
                    isinstance(doc, dict)
                    and doc.get("schema") == CACHE_SCHEMA
                    and isinstance(doc.get("files"), dict)
                ):
                    self.known = doc["files"]
            except (OSError, ValueError):
                pass

    @staticmethod
    def stat_key(path: str) -> _StatKey | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def cached(self, path: str, key: _StatKey) -> str | None:
        hit = self.known.get(path)
        if isinstance(hit, list) and len(hit) == 5 and tuple(hit[:4]) == key:
            self.used[path] = hit
            return str(hit[4])
        return None

    def remember(self, path: str, key: _StatKey, digest: str) -> None:
        self.used[path] = [*key, digest]

    def save(self) -> None:
        """Only the files this run looked at are kept (a removed distribution's files go)."""
        if self.cache_file is None or self.used == self.known:
            return
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_file.with_name(f".{self.cache_file.name}.{os.getpid()}.tmp")
            tmp.write_text(
                json.dumps({"schema": CACHE_SCHEMA, "files": self.used}), encoding="utf-8"
            )
            os.replace(tmp, self.cache_file)
        except OSError:
            pass  # a cache, nothing more: the next run hashes again


def _hash_file(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return _b64(h.digest())


def _prefixes() -> list[bytes]:
    """The environment's path as a shebang may spell it (as started, and with links resolved)."""
    seen = []
    for p in (sys.prefix, os.path.realpath(sys.prefix)):
        b = os.fsencode(p.rstrip(os.sep))
        if b and b not in seen:
            seen.append(b)
    return sorted(seen, key=len, reverse=True)


def normalised_script(path: str, prefixes: list[bytes]) -> tuple[str, str] | None:
    """(raw digest, digest with the environment's path replaced by ``<prefix>``) of a script whose
    head names the environment; None for any other file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if not data.startswith(b"#!"):
        return None
    lines = data.split(b"\n", 2)
    head = lines[0] if lines[0] != b"#!/bin/sh" else b"\n".join(lines[:2])  # pip's exec trampoline
    if not any(p in head for p in prefixes):
        return None
    new_head = head
    for p in prefixes:
        new_head = new_head.replace(p, PREFIX_MARK)
    normal = new_head + data[len(head) :]
    return _b64(hashlib.sha256(data).digest()), _b64(hashlib.sha256(normal).digest())


def _rows(dist: md.Distribution) -> list[tuple[str, str]]:
    """(path, recorded hash) of the RECORD rows that are part of the identity."""
    text = _record(dist)
    if text is None:
        return []
    out = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0]:
            continue
        path, recorded = row[0], (row[1] if len(row) > 1 else "")
        leaf = path.rsplit("/", 1)[-1]
        in_info = ".dist-info/" in path
        if path.endswith(".pyc") or (in_info and leaf in INSTALL_RECORDS):
            continue
        out.append((path, recorded))
    return out


def content_identity(
    dists: list[md.Distribution], cache_file: Path | None, trust_record: bool = False
) -> dict[int, dict[str, Any]]:
    """``content_sha256``, ``modified`` and ``modified_count`` of each distribution (by index).
    ``trust_record``: a file that is there counts with the sha256 its RECORD lists, unread (the
    receipt of a provision that just installed it from hash-checked wheels; a later receipt reads).
    """
    hashes = FileHashes(cache_file)
    prefixes = _prefixes()
    prefix = os.path.realpath(sys.prefix)
    bin_dir = os.path.join(prefix, "bin") + os.sep
    # (dist index, shown path, full path, recorded hash, a script in the environment's bin/)
    plan: list[tuple[int, str, str, str, bool]] = []
    for i, dist in enumerate(dists):
        base = os.path.join(str(dist.locate_file("")), "")
        for path, recorded in _rows(dist):
            if path.startswith("../") or os.path.isabs(path):
                full = os.path.normpath(os.path.join(base, path))
                real = os.path.realpath(full)
                inside = real.startswith(prefix + os.sep)
                plan.append(
                    (
                        i,
                        "<prefix>/" + os.path.relpath(real, prefix) if inside else full,
                        full,
                        recorded,
                        real.startswith(bin_dir),
                    )
                )
            else:  # the common case, inside the install folder: no path arithmetic
                plan.append((i, path, base + path, recorded, False))

    # (what the identity row says, the file's own digest or None where it is missing), per row:
    # the stat and the cache first, on this thread; only files not seen before are read, on a pool
    digests: list[tuple[str, str | None]] = []
    unread: list[tuple[int, str, _StatKey]] = []
    for n, (_, _, full, _, script) in enumerate(plan):
        normal = normalised_script(full, prefixes) if script else None
        key = FileHashes.stat_key(full) if normal is None else None
        own = normal[0] if normal else hashes.cached(full, key) if key else None
        if own is None and key is not None and trust_record and plan[n][3].startswith("sha256="):
            own = plan[n][3]
        digests.append((normal[1] if normal else own or "missing", own))
        if key is not None and own is None:
            unread.append((n, full, key))
    if unread:
        workers = max(1, min(8, os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:  # hashlib releases the GIL while it hashes
            for (n, full, key), own in zip(unread, pool.map(_hash_file, [u[1] for u in unread])):  # noqa: B905 - Python 3.8+
                digests[n] = (own or "unreadable", own)
                if own is not None:
                    hashes.remember(full, key, own)
    hashes.save()
    rows: dict[int, list[str]] = {i: [] for i in range(len(dists))}
    modified: dict[int, list[str]] = {i: [] for i in range(len(dists))}
    for (i, shown, _, recorded, _), (ident, own) in zip(plan, digests):  # noqa: B905 - the target's Python may predate strict=
        rows[i].append(f"{shown},{ident}")
        if recorded and own != recorded:
            modified[i].append(shown)
    return {
        i: {
            "content_sha256": hashlib.sha256("\n".join(sorted(rows[i])).encode()).hexdigest(),
            "modified": sorted(modified[i])[:MODIFIED_SHOWN],
            "modified_count": len(modified[i]),
        }
        for i in range(len(dists))
    }


def torch_versions(dists: dict[str, md.Distribution]) -> dict[str, Any] | None:
    dist = dists.get("torch")
    if dist is None:
        return None
    info: dict[str, Any] = {"version": dist.version}
    version_py = Path(str(dist.locate_file("torch/version.py")))
    if version_py.is_file():
        text = version_py.read_text(encoding="utf-8", errors="replace")
        for key in ("cuda", "git_version", "hip", "xpu"):
            m = re.search(rf"^{key}\s*(?::[^=]*)?=\s*['\"]?([^'\"\n]*)['\"]?", text, re.M)
            if m and m.group(1) not in ("None", ""):
                info[key] = m.group(1)
    for prefix, key in (
        ("nvidia-cudnn-cu", "cudnn"),
        ("nvidia-nccl-cu", "nccl"),
        ("nvidia-cuda-runtime-cu", "cuda_runtime"),
        ("pytorch-triton", "triton"),
        ("triton", "triton"),
    ):
        for name, d in dists.items():
            if name == prefix or (prefix.endswith("-cu") and name.startswith(prefix)):
                info.setdefault(key, d.version)
    return info


def cache_file_for(cache_dir: str | None) -> Path | None:
    """One cache file per environment, named by its path."""
    if not cache_dir:
        return None
    name = hashlib.sha256(os.fsencode(os.path.realpath(sys.prefix))).hexdigest()[:24]
    return Path(cache_dir) / f"{name}.json"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cache_dir = args[args.index("--cache-dir") + 1] if "--cache-dir" in args[:-1] else None
    trust_record = "--trust-record" in args
    dists: dict[str, md.Distribution] = {}
    rows = []
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        canon = re.sub(r"[-_.]+", "-", name).lower()
        if canon in dists:  # shadowed: the first on sys.path is what imports
            continue
        dists[canon] = dist
        installer = (dist.read_text("INSTALLER") or "").strip() or None
        rows.append(
            {
                "name": canon,
                "version": dist.version,
                "record_sha256": record_sha256(dist),
                "installer": installer,
            }
        )
    identity = content_identity(list(dists.values()), cache_file_for(cache_dir), trust_record)
    for i, row in enumerate(rows):
        row.update(identity[i])
    rows.sort(key=lambda r: str(r["name"]))
    doc = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "distributions": rows,
        "torch": torch_versions(dists),
        "content_from": "record" if trust_record else "disk",
    }
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
