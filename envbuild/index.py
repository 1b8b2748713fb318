"""Artifacts and their core metadata, read from an index, a find-links folder or page, and cached.

``lock`` uses this to record, for every locked package, the files (name, URL, sha256) behind its
hashes and its ``Requires-Dist``; ``check-lock`` uses it to read the metadata of a locked
artifact that the lock manifest does not carry (a hand-edited file). Nothing is installed and
nothing is built: a wheel's METADATA comes from its PEP 658 ``.metadata`` file when the index
offers one, else from the wheel itself; an sdist's from its ``PKG-INFO`` (``requires.txt`` of
its egg-info when PKG-INFO lists no requirements).

Sources are what pip reads: an index (PEP 691 JSON or PEP 503 HTML, ``http(s)://`` or
``file://``), and find-links (a local folder or an HTML page). Metadata is cached by artifact
sha256 under ``$ENVBUILD_CACHE_DIR`` (default ``$XDG_CACHE_HOME/envbuild``), so a re-check is
offline and fast. Every network request has a short timeout: an unreachable source fails fast.
"""

from __future__ import annotations

import contextlib
import email.parser
import hashlib
import html.parser
import io
import json
import os
import tarfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    canonicalize_version,
    parse_sdist_filename,
    parse_wheel_filename,
)

from envbuild._io import atomic_write_json, sha256_file
from envbuild.errors import PreflightError
from envbuild.net import redact

TIMEOUT = 10.0
_JSON = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class Artifact:
    filename: str
    url: str  # http(s):// or file:// (redacted only when shown)
    sha256: str | None  # from the index's hash, or computed for a local file on demand
    metadata_url: str | None = None  # PEP 658

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @property
    def local_path(self) -> Path | None:
        parts = urlsplit(self.url)
        return Path(unquote(parts.path)) if parts.scheme == "file" else None


def cache_dir() -> Path:
    if env := os.environ.get("ENVBUILD_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuild"


def project_and_version(filename: str) -> tuple[str, str] | None:
    try:
        if filename.endswith(".whl"):
            name, ver, _, _ = parse_wheel_filename(filename)
            return str(name), str(ver)
        if filename.endswith((".tar.gz", ".zip")):
            name, ver = parse_sdist_filename(filename)
            return str(name), str(ver)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def same_version(a: str, b: str) -> bool:
    return canonicalize_version(a, strip_trailing_zero=False) == canonicalize_version(b, strip_trailing_zero=False)


# ----------------------------------------------------------------------------- listing files


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            d = dict(attrs)
            if d.get("href"):
                self.links.append((d["href"] or "", d))


def _fetch(url: str, accept: str | None = None) -> tuple[bytes, str] | None:
    """Body and final URL; None on 404. Raises PreflightError when the host does not answer."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        p = Path(unquote(parts.path))
        if p.is_dir():
            p = p / "index.html"
        try:
            return p.read_bytes(), p.as_uri()
        except OSError:
            return None
    import requests  # here, not at module level: it costs a tenth of every CLI start

    try:
        resp = requests.get(url, timeout=(TIMEOUT / 2, TIMEOUT), headers={"Accept": accept} if accept else {})
    except requests.exceptions.RequestException as exc:
        raise PreflightError(f"cannot reach {redact(url)}: {redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}",
                             hint="Check the network and the step's index_url/find_links, or lock offline "
                             "against a wheelhouse folder (find_links) with no_index = true.") from None
    if resp.status_code == 404:
        return None
    if resp.status_code >= 400:
        raise PreflightError(f"{redact(url)} answered HTTP {resp.status_code}")
    ctype = resp.headers.get("Content-Type", "")
    return resp.content, resp.url + ("#json" if "json" in ctype else "")


def _artifact_from_link(href: str, base: str, attrs: dict[str, str | None]) -> Artifact | None:
    url = urljoin(base, href)
    parts = urlsplit(url)
    filename = unquote(parts.path.rsplit("/", 1)[-1])
    if project_and_version(filename) is None:
        return None
    sha = None
    if parts.fragment.startswith("sha256="):
        sha = parts.fragment.split("=", 1)[1]
    clean = url.split("#", 1)[0]
    meta = attrs.get("data-core-metadata") or attrs.get("data-dist-info-metadata")
    return Artifact(filename, clean, sha, clean + ".metadata" if meta and meta != "false" else None)


def index_files(index_url: str, project: str) -> list[Artifact]:
    """Files of ``project`` on a PEP 503/691 index."""
    url = index_url.rstrip("/") + f"/{canonicalize_name(project)}/"
    got = _fetch(url, accept=f"{_JSON}, text/html;q=0.5")
    if got is None:
        return []
    body, final = got
    if final.endswith("#json"):
        data = json.loads(body)
        out = []
        for f in data.get("files", []):
            meta = f.get("core-metadata") or f.get("dist-info-metadata")
            furl = urljoin(final[:-5], f["url"]).split("#", 1)[0]
            if project_and_version(f["filename"]) is not None:
                out.append(Artifact(f["filename"], furl, (f.get("hashes") or {}).get("sha256"),
                                    furl + ".metadata" if meta else None))
        return out
    return _parse_links(body, final)


def _parse_links(body: bytes, base: str) -> list[Artifact]:
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    out = []
    for href, attrs in parser.links:
        a = _artifact_from_link(href, base, attrs)
        if a is not None:
            out.append(a)
    return out


def find_links_files(location: str) -> list[Artifact]:
    """Files in a find-links folder (or ``file://`` folder) or on a find-links HTML page."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        folder = Path(unquote(parts.path) if parts.scheme == "file" else location)
        if not folder.is_dir():
            return []
        return [Artifact(p.name, p.resolve().as_uri(), None) for p in sorted(folder.iterdir())
                if p.is_file() and project_and_version(p.name) is not None]
    got = _fetch(location)
    return _parse_links(got[0], got[1]) if got else []


@dataclass(frozen=True)
class Sources:
    index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    # how many leading index_urls / find_links come from the installer's own configuration (pip.conf,
    # PIP_*) rather than the spec: used to resolve here, never recorded in a lock
    configured_indexes: int = 0
    configured_links: int = 0


class ArtifactFinder:
    """Lists a project's files across sources once per run (pages are cached in memory)."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self._flat: list[Artifact] | None = None
        self._projects: dict[str, list[Artifact]] = {}

    def files(self, project: str) -> list[Artifact]:
        key = canonicalize_name(project)
        if key not in self._projects:
            found: list[Artifact] = []
            for index in self.sources.index_urls:
                found += index_files(index, key)
            if self._flat is None:
                self._flat = [a for loc in self.sources.find_links for a in find_links_files(loc)]
            found += [a for a in self._flat if canonicalize_name((project_and_version(a.filename) or ("",))[0]) == key]
            self._projects[key] = found
        return self._projects[key]

    def matching_all(self, project: str, version: str) -> list[Artifact]:
        """Every file of ``project==version``, with its sha256 (local files are hashed)."""
        out: dict[str, Artifact] = {}
        for a in self.files(project):
            pv = project_and_version(a.filename)
            if pv is None or not same_version(pv[1], version):
                continue
            sha = a.sha256
            if sha is None and a.local_path is not None:
                sha = sha256_file(a.local_path)
            elif sha is None:
                sha = hashlib.sha256(_read_bytes(a.url)).hexdigest()
            if sha not in out:
                out[sha] = Artifact(a.filename, a.url, sha, a.metadata_url)
        return sorted(out.values(), key=lambda a: a.filename)

    def matching(self, project: str, version: str, hashes: Iterable[str]) -> list[Artifact]:
        """The files of ``project==version`` whose sha256 is among ``hashes``."""
        wanted = set(hashes)
        return [a for a in self.matching_all(project, version) if a.sha256 in wanted]


# ----------------------------------------------------------------------------- metadata


def parse_requires(metadata_text: str) -> list[str]:
    msg = email.parser.HeaderParser().parsestr(metadata_text)
    return [str(v) for v in (msg.get_all("Requires-Dist") or [])]


def _read_bytes(url: str) -> bytes:
    parts = urlsplit(url)
    if parts.scheme == "file":
        return Path(unquote(parts.path)).read_bytes()
    got = _fetch(url)
    if got is None:
        raise PreflightError(f"{redact(url)}: not found (HTTP 404)")
    return got[0]


def _wheel_metadata(data: bytes | Path) -> str:
    with zipfile.ZipFile(data if isinstance(data, Path) else io.BytesIO(data)) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
                return zf.read(name).decode("utf-8", "replace")
    raise ValueError("no .dist-info/METADATA in the wheel")


def _sdist_requires(data: bytes, filename: str) -> list[str]:
    pkg_info = requires_txt = None
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for name in zf.namelist():
                if name.count("/") == 1 and name.endswith("/PKG-INFO"):
                    pkg_info = zf.read(name).decode("utf-8", "replace")
                elif name.endswith(".egg-info/requires.txt") and requires_txt is None:
                    requires_txt = zf.read(name).decode("utf-8", "replace")
    else:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
            for m in tf.getmembers():
                if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"):
                    f = tf.extractfile(m)
                    pkg_info = f.read().decode("utf-8", "replace") if f else None
                elif m.name.endswith(".egg-info/requires.txt") and requires_txt is None:
                    f = tf.extractfile(m)
                    requires_txt = f.read().decode("utf-8", "replace") if f else None
    reqs = parse_requires(pkg_info) if pkg_info else []
    if not reqs and requires_txt:
        reqs = _requires_txt(requires_txt)
    return reqs


def _requires_txt(text: str) -> list[str]:
    """setuptools' egg-info ``requires.txt`` ([extra:marker] sections) as Requires-Dist strings."""
    out, section = [], ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if not section:
            out.append(line)
            continue
        extra, _, marker = section.partition(":")
        conds = [f'extra == "{extra}"'] if extra else []
        if marker:
            conds.append(f"({marker})")
        out.append(f"{line}; {' and '.join(conds)}" if conds else line)
    return out


def requires_of(artifact: Artifact) -> list[str]:
    """Requires-Dist of one artifact (cached by its sha256; the download is hash-checked)."""
    cached = _cache_get(artifact.sha256)
    if cached is not None:
        return cached
    if artifact.is_wheel and artifact.metadata_url and artifact.local_path is None:
        reqs = parse_requires(_read_bytes(artifact.metadata_url).decode("utf-8", "replace"))
    elif artifact.local_path is not None and artifact.is_wheel:
        reqs = parse_requires(_wheel_metadata(artifact.local_path))
    else:
        data = _read_bytes(artifact.url)
        if artifact.sha256 and hashlib.sha256(data).hexdigest() != artifact.sha256:
            raise PreflightError(f"{redact(artifact.url)}: the download does not match its sha256 "
                                 f"{artifact.sha256} (tampered or re-uploaded file)")
        reqs = parse_requires(_wheel_metadata(data)) if artifact.is_wheel else _sdist_requires(data, artifact.filename)
    _cache_put(artifact.sha256, reqs)
    return reqs


def _cache_get(sha: str | None) -> list[str] | None:
    if not sha:
        return None
    path = cache_dir() / "metadata" / f"{sha}.json"
    try:
        data = json.loads(path.read_text())
        return [str(r) for r in data["requires_dist"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cache_put(sha: str | None, reqs: Sequence[str]) -> None:
    if not sha:
        return
    with contextlib.suppress(OSError):  # a read-only cache only costs speed
        atomic_write_json(cache_dir() / "metadata" / f"{sha}.json", {"requires_dist": list(reqs)})


def cached_requires(hashes: Iterable[str]) -> list[str] | None:
    for h in hashes:
        got = _cache_get(h)
        if got is not None:
            return got
    return None
