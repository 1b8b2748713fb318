"""Repack a freshly built wheel into a wheelhouse wheel.

- ``Requires-Dist`` (and ``Provides-Extra``) removed from METADATA: installing it can never pull
  torch or PyPI ``triton`` back in.
- The version gets the local label of the torch it was built against
  (``1.6.1+cu132torch2.12.0.dev20260405``); dist-info and ``.data`` folders are renamed to match.
  With no label (a lock's build, whose version the lock pins) the version and ``Requires-Dist``
  stay as built: the provenance record alone names the torch.
- ``envbuild_provenance.json`` is added to the dist-info.
- RECORD is rewritten (sha256 + size of every file, RECORD itself without a hash).
- The input's RECORD is verified first, and an archive with absolute paths, ``..`` components,
  symlinks or duplicate names is refused.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envbuild.errors import WheelhouseError
from envbuild.guard.buildrecord import PROVENANCE_FILE

_NEW_ENTRY_DATE = (1980, 1, 2, 0, 0, 0)


@dataclass(frozen=True)
class Repacked:
    path: Path
    name: str
    version: str
    removed_requires: tuple[str, ...]


def check_archive(zf: zipfile.ZipFile, shown: str) -> None:
    """Refuse entries that could write outside the install folder or smuggle links."""
    seen: set[str] = set()
    for info in zf.infolist():
        name = info.filename
        if name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
            raise WheelhouseError(
                f"{shown}: refusing a wheel with an absolute path in its archive: {name!r}"
            )
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if ".." in parts:
            raise WheelhouseError(f"{shown}: refusing a wheel with a '..' path component: {name!r}")
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise WheelhouseError(
                f"{shown}: refusing a wheel that contains a symbolic link: {name!r}"
            )
        if name in seen:
            raise WheelhouseError(
                f"{shown}: refusing a wheel with a duplicate archive entry: {name!r}"
            )
        seen.add(name)


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _verify_record(zf: zipfile.ZipFile, record_name: str, shown: str) -> None:
    text = zf.read(record_name).decode("utf-8")
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0] or len(row) < 2 or not row[1]:
            continue
        path, hash_ = row[0], row[1]
        try:
            data = zf.read(path)
        except KeyError as exc:
            raise WheelhouseError(
                f"{shown}: RECORD lists {path!r}, which is not in the archive"
            ) from exc
        algo, _, _ = hash_.partition("=")
        if algo == "sha256" and _record_hash(data) != hash_:
            raise WheelhouseError(
                f"{shown}: {path!r} does not match its RECORD hash (corrupt wheel)"
            )


def _edit_metadata(text: str, new_version: str) -> tuple[str, list[str]]:
    """Drop Requires-Dist/Provides-Extra headers, set Version; the description body is kept."""
    head, sep, body = text.partition("\n\n")
    out: list[str] = []
    removed: list[str] = []
    skipping = False
    for line in head.split("\n"):
        if line[:1] in (" ", "\t"):
            if skipping:
                continue  # continuation of a removed header
            out.append(line)
            continue
        key, _, value = line.partition(":")
        skipping = key.lower() in ("requires-dist", "provides-extra")
        if skipping:
            if key.lower() == "requires-dist":
                removed.append(value.strip())
            continue
        if key.lower() == "version":
            line = f"Version: {new_version}"
        out.append(line)
    return "\n".join(out) + sep + body, removed


def repack_wheel(
    src: Path, dest_dir: Path, local: str | None, provenance: dict[str, Any]
) -> Repacked:
    """Write the wheelhouse version of ``src`` into ``dest_dir`` and return it (``local`` None: the
    version and requirements kept, see the module docstring)."""
    shown = src.name
    try:
        name, version, build_tag, _tags = parse_wheel_filename(src.name)
    except InvalidWheelFilename as exc:
        raise WheelhouseError(f"{shown}: not a wheel file name: {exc}") from exc
    new_version = Version(f"{version.public}+{local}") if local is not None else version
    try:
        zf = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError) as exc:
        raise WheelhouseError(f"{shown}: not a readable wheel: {exc}") from exc
    stem = f"{name.replace('-', '_')}-{new_version}"
    new_di = f"{stem}.dist-info"
    with zf:
        entries, removed = _renamed_entries(zf, shown, str(name), stem, local, new_version)
    prov = dict(
        provenance,
        name=str(name),
        version=str(new_version),
        upstream_version=str(version),
        removed_requires=removed,
    )
    prov_text = json.dumps(prov, indent=2, sort_keys=True) + "\n"
    entries.append(_new_entry(f"{new_di}/{PROVENANCE_FILE}", prov_text.encode()))
    # dist-info last, RECORD at the very end (the order tools expect)
    entries.sort(key=lambda e: e[0].filename.startswith(new_di))
    entries.append(_new_entry(f"{new_di}/RECORD", _record_text(entries, new_di).encode()))

    tag_str = wheel_tag_string(src.name)
    build = f"-{build_tag[0]}{build_tag[1]}" if build_tag else ""
    out = dest_dir / f"{stem}{build}-{tag_str}.whl"
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info, data in entries:
            zout.writestr(info, data)
    tmp.replace(out)
    return Repacked(
        path=out, name=str(name), version=str(new_version), removed_requires=tuple(removed)
    )


def _renamed_entries(
    zf: zipfile.ZipFile, shown: str, name: str, stem: str, local: str | None, new_version: Version
) -> tuple[list[tuple[zipfile.ZipInfo, bytes]], list[str]]:
    """Every file of the checked wheel ``zf`` under its new name (its dist-info and ``.data``
    folders renamed to ``stem``), without its RECORD and an old provenance file; with ``local``,
    METADATA edited (the requirements removed from it are returned too)."""
    check_archive(zf, shown)
    infos = zf.infolist()
    dist_infos = {
        i.filename.split("/", 1)[0]
        for i in infos
        if i.filename.split("/", 1)[0].endswith(".dist-info")
    }
    old_di = next(
        (
            d
            for d in dist_infos
            if canonicalize_name(d[: -len(".dist-info")].rsplit("-", 1)[0]) == name
        ),
        None,
    )
    if old_di is None or len(dist_infos) != 1:
        raise WheelhouseError(
            f"{shown}: expected exactly one {name}-*.dist-info folder, found"
            f" {sorted(dist_infos) or 'none'}"
        )
    _verify_record(zf, f"{old_di}/RECORD", shown)
    old_data = old_di[: -len(".dist-info")] + ".data"
    renamed = {old_di: f"{stem}.dist-info", old_data: f"{stem}.data"}

    def rename(path: str) -> str:
        top, sep, rest = path.partition("/")
        return renamed[top] + sep + rest if top in renamed else path

    entries: list[tuple[zipfile.ZipInfo, bytes]] = []
    removed: list[str] = []
    for info in infos:
        if info.is_dir() or info.filename in (f"{old_di}/RECORD", f"{old_di}/{PROVENANCE_FILE}"):
            continue
        data = zf.read(info)
        if info.filename == f"{old_di}/METADATA" and local is not None:
            text, removed = _edit_metadata(data.decode("utf-8"), str(new_version))
            data = text.encode("utf-8")
        new_info = zipfile.ZipInfo(rename(info.filename), date_time=info.date_time)
        new_info.external_attr = info.external_attr
        new_info.compress_type = zipfile.ZIP_DEFLATED
        entries.append((new_info, data))
    return entries, removed


def _new_entry(path: str, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    """A file envbuild adds to the wheel (a regular file, mode 644, a fixed date)."""
    info = zipfile.ZipInfo(path, date_time=_NEW_ENTRY_DATE)
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info, data


def _record_text(entries: list[tuple[zipfile.ZipInfo, bytes]], new_di: str) -> str:
    """RECORD for ``entries``: each file's sha256 and size, RECORD itself last without them."""
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for info, data in entries:
        writer.writerow([info.filename, _record_hash(data), str(len(data))])
    writer.writerow([f"{new_di}/RECORD", "", ""])
    return record.getvalue()


def wheel_tag_string(filename: str) -> str:
    """``cp311-cp311-linux_x86_64`` of a wheel file name (for messages and tests)."""
    return "-".join(filename[: -len(".whl")].split("-")[-3:])
