"""Tiny real wheels (and sdists) for tests, written in milliseconds.

Wheels are written with ``wheel.wheelfile.WheelFile``, so METADATA, WHEEL and a RECORD with
sha256 hashes are all valid and pip installs them like any other wheel. Output is
byte-reproducible: the same arguments give the same file and the same sha256, so hash pins
taken in one test session still hold in the next.

    build_wheel(dest, "torch", "2.12.0.dev20260405+cu132",
                requires=["pytorch-triton==3.7.0+git9c288bc5"],
                files={"torch/__init__.py": "__version__ = '2.12.0.dev20260405+cu132'\\n"})
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from zipfile import ZIP_DEFLATED, ZipInfo

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from wheel.wheelfile import WheelFile

if TYPE_CHECKING:
    from _typeshed import SizedBuffer

__all__ = [
    "WheelSpec",
    "build_sdist",
    "bundled_setuptools_wheel",
    "build_wheel",
    "dist_info_name",
    "sha256_of",
    "wheel_filename",
]

# 1980-01-02: zip's epoch plus a day, so no tool rejects the timestamp in any time zone.
_DATE = (1980, 1, 2, 0, 0, 0)
_MTIME = 315619200


def _escape(name: str) -> str:
    """The distribution name as it appears in file names (PEP 427 / binary distribution format)."""
    return canonicalize_name(name).replace("-", "_")


def wheel_filename(
    name: str,
    version: str,
    python_tag: str = "py3",
    abi_tag: str = "none",
    platform_tag: str = "any",
    build_tag: str | None = None,
) -> str:
    parts = [_escape(name), str(Version(version))]
    if build_tag:
        parts.append(build_tag)
    parts += [python_tag, abi_tag, platform_tag]
    return "-".join(parts) + ".whl"


def dist_info_name(name: str, version: str) -> str:
    return f"{_escape(name)}-{Version(version)}.dist-info"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _ReproducibleWheelFile(WheelFile):
    """WheelFile with fixed timestamps and modes, RECORD included (it is written by close())."""

    def writestr(
        self,
        zinfo_or_arcname: str | ZipInfo,
        data: SizedBuffer | str,
        compress_type: int | None = None,
        compresslevel: int | None = None,
    ) -> None:
        # compresslevel: ZipFile.writestr's; WheelFile's takes none (nothing here passes one)
        if isinstance(zinfo_or_arcname, str):
            info = ZipInfo(zinfo_or_arcname, date_time=_DATE)
            info.compress_type = self.compression
            info.external_attr = (0o644 | stat.S_IFREG) << 16
            zinfo_or_arcname = info
        super().writestr(zinfo_or_arcname, data, compress_type)


def _metadata(
    name: str,
    version: str,
    requires: Iterable[str],
    summary: str,
    requires_python: str | None,
    extra_headers: Mapping[str, str],
) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {summary}"]
    if requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    extras: list[str] = []
    reqs = list(requires)
    for r in reqs:
        marker = Requirement(r).marker  # validates the string as a side effect
        if marker is not None:
            for extra in _extras_in(str(marker)):
                if extra not in extras:
                    extras.append(extra)
    lines += [f"Provides-Extra: {e}" for e in extras]
    lines += [f"Requires-Dist: {r}" for r in reqs]
    lines += [f"{k}: {v}" for k, v in extra_headers.items()]
    return "\n".join(lines) + "\n\n"


def _extras_in(marker: str) -> list[str]:
    return re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)


@dataclass(frozen=True)
class WheelSpec:
    """Everything a test wheel is made of; ``build(dest)`` writes it."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    python_tag: str = "py3"
    abi_tag: str = "none"
    platform_tag: str = "any"
    build_tag: str | None = None
    requires_python: str | None = None
    summary: str = "envbuild test fixture"
    extra_headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return wheel_filename(
            self.name,
            self.version,
            self.python_tag,
            self.abi_tag,
            self.platform_tag,
            self.build_tag,
        )

    def build(self, dest: Path) -> Path:
        return build_wheel(
            dest,
            self.name,
            self.version,
            requires=self.requires,
            files=self.files,
            python_tag=self.python_tag,
            abi_tag=self.abi_tag,
            platform_tag=self.platform_tag,
            build_tag=self.build_tag,
            requires_python=self.requires_python,
            summary=self.summary,
            extra_headers=self.extra_headers,
        )


def build_wheel(
    dest: Path,
    name: str,
    version: str,
    *,
    requires: Iterable[str] = (),
    files: Mapping[str, str | bytes] | None = None,
    python_tag: str = "py3",
    abi_tag: str = "none",
    platform_tag: str = "any",
    build_tag: str | None = None,
    requires_python: str | None = None,
    summary: str = "envbuild test fixture",
    extra_headers: Mapping[str, str] | None = None,
) -> Path:
    """Write a valid wheel into ``dest`` and return its path.

    ``files`` maps paths inside site-packages to contents; with no files, a module named after
    the distribution (``name_with_underscores/__init__.py``) holding ``__version__`` is added so
    that every wheel installs something importable. ``requires`` are Requires-Dist strings
    (markers and extras allowed). Local versions (``+cu132``) and pre/dev releases work.
    """
    dest.mkdir(parents=True, exist_ok=True)
    canonical_version = str(Version(version))
    if not files:
        files = {f"{_escape(name)}/__init__.py": f"__version__ = {canonical_version!r}\n"}
    path = dest / wheel_filename(name, version, python_tag, abi_tag, platform_tag, build_tag)
    info = dist_info_name(name, version)
    wheel_meta = (
        "Wheel-Version: 1.0\nGenerator: envbuild-tests\n"
        f"Root-Is-Purelib: {'true' if platform_tag == 'any' else 'false'}\n"
        + "".join(
            f"Tag: {py}-{abi}-{plat}\n"
            for py in python_tag.split(".")
            for abi in abi_tag.split(".")
            for plat in platform_tag.split(".")
        )
        + (f"Build: {build_tag}\n" if build_tag else "")
    )
    tmpdir = Path(tempfile.mkdtemp(prefix=".wheel-", dir=dest))
    tmp = tmpdir / path.name  # WheelFile checks the name, so the temp file keeps it
    with _ReproducibleWheelFile(tmp, "w", compression=ZIP_DEFLATED) as wf:
        for rel in sorted(files):
            if rel.startswith("/") or ".." in rel.split("/"):
                raise ValueError(f"wheel file paths are relative to site-packages: {rel!r}")
            wf.writestr(rel, files[rel])
        wf.writestr(
            f"{info}/METADATA",
            _metadata(
                name, canonical_version, requires, summary, requires_python, extra_headers or {}
            ),
        )
        wf.writestr(f"{info}/WHEEL", wheel_meta)
    tmp.replace(path)
    tmpdir.rmdir()
    return path


# An in-tree PEP 517 backend (stdlib only), shipped inside each test sdist under _backend/.
# It builds a wheel of the project's files; for every module named in "probe" it imports the
# module at build time and records its __version__ (or null) in <first package>/_build_env.json,
# so a test can see which torch an (isolated) build compiled against. With $TINY_BACKEND_BUILDS
# set, each build_wheel appends "name version" to that file: a test counts the compiles.
_INLINE_BACKEND = r"""
import base64, csv, hashlib, io, json, os, zipfile

_CFG = json.load(open(os.path.join(os.path.dirname(__file__), "project.json")))


def _b64(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    raise NotImplementedError("test sdists are built by the test factory")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, escaped = _CFG["name"], _CFG["version"], _CFG["escaped"]
    if os.environ.get("TINY_BACKEND_BUILDS"):  # a test counts the builds that ran
        with open(os.environ["TINY_BACKEND_BUILDS"], "a") as f:
            f.write(name + " " + version + "\n")
    files = {}
    for rel in _CFG["files"]:
        with open(rel, "rb") as f:
            files[rel] = f.read()
    if _CFG["probe"]:
        seen = {}
        for mod in _CFG["probe"]:
            try:
                m = __import__(mod)
                seen[mod] = getattr(m, "__version__", "unknown")
            except ImportError:
                seen[mod] = None
        files[_CFG["probe_file"]] = (json.dumps(seen, sort_keys=True) + "\n").encode()
    info = escaped + "-" + version + ".dist-info"
    meta = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version]
    meta += ["Requires-Dist: " + r for r in _CFG["requires"]]
    files[info + "/METADATA"] = ("\n".join(meta) + "\n\n").encode()
    files[info + "/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: envbuild-tests-inline\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for rel, data in files.items():
        writer.writerow((rel, "sha256=" + _b64(data), len(data)))
    writer.writerow((info + "/RECORD", "", ""))
    files[info + "/RECORD"] = record.getvalue().encode()
    filename = escaped + "-" + version + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in files.items():
            zi = zipfile.ZipInfo(rel, date_time=(1980, 1, 2, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zf.writestr(zi, data, zipfile.ZIP_DEFLATED)
    return filename
"""  # noqa: E501 (embedded backend source: the text is the value)


def _quoted_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def build_sdist(
    dest: Path,
    name: str,
    version: str,
    *,
    requires: Iterable[str] = (),
    files: Mapping[str, str] | None = None,
    build_requires: Iterable[str] = (),
    backend: str = "inline",
    probe: Iterable[str] = (),
    setup_py: str | None = None,
) -> Path:
    """Write a tiny sdist (``name-version.tar.gz``) and return its path.

    ``backend="inline"`` (default): an in-tree, stdlib-only PEP 517 backend, so pip builds it
    with build isolation and nothing from the index except ``build_requires``. ``probe``
    lists modules (e.g. ``["torch"]``) the build imports, recording their ``__version__`` in
    ``<package>/_build_env.json`` of the built wheel: with ``build_requires=["torch"]`` and
    isolation on, that shows the build saw the index's newest stable torch, not the installed one.

    ``backend="setuptools"``: a ``setuptools.build_meta`` project (``build_requires`` defaults
    to ``setuptools>=61``; an isolated build then needs setuptools and wheel on the index).
    ``setup_py``, when given, is added as ``setup.py``.
    """
    dest.mkdir(parents=True, exist_ok=True)
    canonical_version = str(Version(version))
    escaped = _escape(name)
    if not files:
        files = {f"{escaped}/__init__.py": f"__version__ = {canonical_version!r}\n"}
    reqs = list(requires)
    for r in reqs:
        Requirement(r)
    packages = sorted({p.split("/")[0] for p in files if "/" in p})
    contents: dict[str, str] = dict(files)
    if backend == "inline":
        probe_file = f"{packages[0] if packages else escaped}/_build_env.json"
        contents["_backend/tiny_backend.py"] = _INLINE_BACKEND
        contents["_backend/project.json"] = (
            json.dumps(
                {
                    "name": name,
                    "version": canonical_version,
                    "escaped": escaped,
                    "requires": reqs,
                    "files": sorted(files),
                    "probe": list(probe),
                    "probe_file": probe_file,
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )
        contents["pyproject.toml"] = (
            f"[build-system]\nrequires = {_quoted_list(build_requires)}\n"
            'build-backend = "tiny_backend"\nbackend-path = ["_backend"]\n\n'
            f'[project]\nname = "{name}"\nversion = "{canonical_version}"\n'
            f"dependencies = {_quoted_list(reqs)}\n"
        )
    elif backend == "setuptools":
        modules = sorted(p[:-3] for p in files if "/" not in p and p.endswith(".py"))
        contents["pyproject.toml"] = (
            "[build-system]\nrequires ="
            f" {_quoted_list(list(build_requires) or ['setuptools>=61'])}\n"
            'build-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "{canonical_version}"\n'
            f"dependencies = {_quoted_list(reqs)}\n\n"
            f"[tool.setuptools]\npackages = {_quoted_list(packages)}\n"
            + (f"py-modules = {_quoted_list(modules)}\n" if modules else "")
        )
    else:
        raise ValueError(f"backend must be 'inline' or 'setuptools', got {backend!r}")
    if setup_py is not None:
        contents["setup.py"] = setup_py
    contents["PKG-INFO"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {canonical_version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in reqs)
    )
    base = f"{escaped}-{canonical_version}"
    path = dest / f"{base}.tar.gz"
    buf = io.BytesIO()
    # mtime fixed in the tar and in the gzip header: reproducible bytes.
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(contents):
            data = contents[rel].encode()
            ti = tarfile.TarInfo(f"{base}/{rel}")
            ti.size, ti.mtime, ti.mode = len(data), _MTIME, 0o644
            tar.addfile(ti, io.BytesIO(data))
    with (
        path.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=_MTIME) as gz,
    ):
        gz.write(buf.getvalue())
    return path


def bundled_setuptools_wheel() -> Path | None:
    """The setuptools wheel that ships with this interpreter's ensurepip, if any."""
    import ensurepip

    bundled = Path(ensurepip.__file__).parent / "_bundled"
    found = sorted(bundled.glob("setuptools-*.whl"))
    return found[-1] if found else None
