"""The one package-index client: PEP 503/691 pages, artifacts, file names, metadata, one timeout.

Sources are what pip reads: an index (PEP 691 JSON or PEP 503 HTML, ``http(s)://`` or
``file://``), and find-links (a local folder or an HTML page). Every reader of a package source
goes through here: ``lock`` records, for every locked package, the files (name, URL, sha256)
behind its hashes and its ``Requires-Dist``; ``check-lock`` reads the metadata of a locked
artifact that ``lock.json`` does not carry; the wheelhouse mirror finds the files of the pinned
hashes (``ArtifactFinder``) and downloads them with ``session()``; the wheelhouse pages name
their projects with ``project_of``. Nothing is installed and nothing is built: a wheel's
METADATA comes from its PEP 658 ``.metadata`` file when the index offers one, else from the
wheel itself; an sdist's from its ``PKG-INFO`` (``requires.txt`` of its egg-info when PKG-INFO
lists no requirements). Metadata is cached by artifact sha256 under ``$ENVBUILD_CACHE_DIR``
(default ``$XDG_CACHE_HOME/envbuild``), so a re-check is offline and fast.

One timeout policy (``TIMEOUT``: seconds to connect, seconds of silence while reading) for every
request, pages and downloads alike; pages and files are retried the way ``net.retrying`` retries
(timeouts, resets, 5xx, within ``DEADLINE``, announced as they happen); and one error type
(``SourceError``, exit 3) for a source that still does not answer or answers an error. URLs may
carry credentials (``https://user:token@host/simple``): they are used for the request, kept for
links on the same host, and only ``redact``-ed forms appear in messages.

Why not ``pypi-simple``: it parses the same pages, but brings pydantic 2, beautifulsoup4 and
mailbits into every environment envbuild installs into, and it reads neither ``file://``
indexes nor find-links folders, which the offline wheelhouse path depends on. PEP 503 anchors
(``href``, ``#sha256=``, ``data-core-metadata``) are read with the standard library's
``html.parser`` (what pip itself uses), PEP 691 with ``json``, file names with
``packaging.utils``, requests with ``requests``.
"""

from __future__ import annotations

import email.parser
import hashlib
import html.parser
import io
import json
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    canonicalize_version,
    parse_sdist_filename,
    parse_wheel_filename,
)

from envbuild._io import atomic_write_json, sha256_file
from envbuild.index import metacache
from envbuild.index.metacache import cache_dir, cached_requires
from envbuild.index.net import SourceError, deadline_seconds, redact, retrying

if TYPE_CHECKING:
    import requests

TIMEOUT = (10.0, 30.0)  # seconds to connect, seconds without a byte while reading: every request
# seconds a page or file request goes on retrying ($ENVBUILD_NET_DEADLINE): room for a few
# attempts of TIMEOUT, since a lock reads hundreds of pages and one hiccup must not end it
DEADLINE = 120.0
_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2,"
    " text/html;q=0.1"
)
# the sdist names packaging.utils.parse_sdist_filename reads (index.wheeltags.is_sdist knows more)
_SDIST_SUFFIXES = (".tar.gz", ".zip")

# the metadata cache lives in envbuild.index.metacache (light, read by check-lock)
_cache_get = metacache.get
_cache_put = metacache.put

__all__ = [
    "TIMEOUT",
    "Artifact",
    "ArtifactFinder",
    "SourceError",
    "Sources",
    "cache_dir",
    "cached_requires",
    "find_links_files",
    "index_files",
    "local_sha256",
    "page_files",
    "parse_filename",
    "project_of",
    "read_bytes",
    "read_optional",
    "requires_of",
    "same_version",
    "session",
]


@dataclass(frozen=True)
class Artifact:
    """One distribution file on a source: its name, where it is, and its sha256 where known."""

    filename: str
    url: str  # http(s):// or file:// (redacted only when shown)
    sha256: str | None = None  # from the index's hash, or computed for a local file on demand
    metadata_url: str | None = None  # PEP 658

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @property
    def project(self) -> NormalizedName | None:
        parsed = parse_filename(self.filename)
        return parsed[0] if parsed else None

    @property
    def version(self) -> str | None:
        parsed = parse_filename(self.filename)
        return parsed[1] if parsed else None

    @property
    def local_path(self) -> Path | None:
        parts = urlsplit(self.url)
        return Path(unquote(parts.path)) if parts.scheme == "file" else None


def parse_filename(filename: str) -> tuple[NormalizedName, str] | None:
    """(canonical project name, version) of a wheel or sdist file name; None for anything else."""
    try:
        if filename.endswith(".whl"):
            name, ver, _, _ = parse_wheel_filename(filename)
            return name, str(ver)
        if filename.endswith(_SDIST_SUFFIXES):
            name, ver = parse_sdist_filename(filename)
            return name, str(ver)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def project_of(filename: str) -> NormalizedName | None:
    parsed = parse_filename(filename)
    return parsed[0] if parsed else None


def same_version(a: str, b: str) -> bool:
    return canonicalize_version(a, strip_trailing_zero=False) == canonicalize_version(
        b, strip_trailing_zero=False
    )


# ----------------------------------------------------------------------------- requests


def session() -> requests.Session:
    """A ``requests.Session`` for one run: connections kept alive across pages and downloads,
    trusted and routed as pip is (``index.http``)."""
    from envbuild.index.http import session as configured

    return configured()


_SESSION: list[requests.Session] = []


def _default_session() -> requests.Session:
    if not _SESSION:
        _SESSION.append(session())
    return _SESSION[0]


def _fetch(
    url: str, *, accept: str | None = None, http: requests.Session | None = None
) -> tuple[bytes, str, bool] | None:
    """Body, final URL and whether it is PEP 691 JSON; None on 404 (or a missing local file)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        p = Path(unquote(parts.path))
        if p.is_dir():
            p = p / "index.html"
        try:
            return p.read_bytes(), p.as_uri(), False
        except OSError:
            return None
    import requests

    client = http or _default_session()
    headers = {"Accept": accept} if accept else {}
    # the same timeout every attempt (grow=1): it is one of silence, the body may be a large wheel
    try:
        resp = retrying(
            url,
            lambda t: client.get(url, timeout=t, headers=headers),
            timeout=TIMEOUT,
            deadline=deadline_seconds(DEADLINE),
            grow=1.0,
        )
    except requests.exceptions.RequestException as exc:
        from envbuild.index.net import failure

        why = failure(exc)[1]
        raise SourceError(
            f"cannot reach {redact(url)}: {redact(why)[:300]}",
            hint=(
                "Check the network and the step's index_url/find_links, or work offline "
                "against a wheelhouse folder (find_links) with no_index = true."
            ),
        ) from exc
    if resp.status_code == 404:
        return None
    if resp.status_code >= 400:
        raise SourceError(
            f"{redact(url)} answered HTTP {resp.status_code}",
            hint="Check the URL and its credentials.",
        )
    final = resp.url or url
    src, dst = urlsplit(url), urlsplit(final)
    if dst.hostname == src.hostname and "@" in src.netloc and "@" not in dst.netloc:
        final = urljoin(url, dst.path)  # keep the credentials for links on the same host
    return resp.content, final, "json" in resp.headers.get("Content-Type", "")


def read_optional(url: str, *, http: requests.Session | None = None) -> bytes | None:
    """The body at ``url``; None when it answers 404 (or a local file is missing). SourceError
    when it cannot be read (the one retry rule first)."""
    got = _fetch(url, http=http)
    return None if got is None else got[0]


def read_bytes(url: str, *, http: requests.Session | None = None) -> bytes:
    parts = urlsplit(url)
    if parts.scheme == "file":
        try:
            return Path(unquote(parts.path)).read_bytes()
        except OSError as exc:
            raise SourceError(f"{redact(url)}: cannot read it: {exc.strerror}") from exc
    got = _fetch(url, http=http)
    if got is None:
        raise SourceError(f"{redact(url)}: not found (HTTP 404)")
    return got[0]


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


def _artifact(filename: str, url: str, sha: str | None, metadata: object) -> Artifact | None:
    if parse_filename(filename) is None:
        return None
    clean = url.split("#", 1)[0]
    return Artifact(
        filename, clean, sha, clean + ".metadata" if metadata and metadata != "false" else None
    )


def page_files(body: bytes, base: str, is_json: bool = False) -> list[Artifact]:
    """The distribution files listed on one PEP 503 (HTML) or PEP 691 (JSON) page at ``base``."""
    out: list[Artifact] = []
    if is_json:
        try:
            files = json.loads(body).get("files", [])
        except (ValueError, AttributeError) as exc:
            raise SourceError(f"{redact(base)}: not a PEP 691 project page (invalid JSON)") from exc
        for f in files if isinstance(files, list) else []:
            if (
                not isinstance(f, dict)
                or not isinstance(f.get("filename"), str)
                or not isinstance(f.get("url"), str)
            ):
                continue
            hashes = f["hashes"] if isinstance(f.get("hashes"), dict) else {}
            meta = f.get("core-metadata") or f.get("dist-info-metadata")
            sha = hashes.get("sha256")
            a = _artifact(
                f["filename"], urljoin(base, f["url"]), sha if isinstance(sha, str) else None, meta
            )
            if a is not None:
                out.append(a)
        return out
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for href, attrs in parser.links:
        url = urljoin(base, href)
        parts = urlsplit(url)
        sha = parts.fragment.split("=", 1)[1] if parts.fragment.startswith("sha256=") else None
        meta = attrs.get("data-core-metadata") or attrs.get("data-dist-info-metadata")
        a = _artifact(unquote(parts.path.rsplit("/", 1)[-1]), url, sha, meta)
        if a is not None:
            out.append(a)
    return out


def index_files(
    index_url: str, project: str, *, http: requests.Session | None = None
) -> list[Artifact]:
    """Files of ``project`` on a PEP 503/691 index."""
    got = _fetch(
        index_url.rstrip("/") + f"/{canonicalize_name(project)}/", accept=_ACCEPT, http=http
    )
    return page_files(*got) if got else []


def find_links_files(location: str, *, http: requests.Session | None = None) -> list[Artifact]:
    """Files in a find-links folder (or ``file://`` folder) or on a find-links HTML page."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        folder = Path(unquote(parts.path) if parts.scheme == "file" else location)
        if not folder.is_dir():
            return []
        return [
            Artifact(p.name, p.resolve().as_uri())
            for p in sorted(folder.iterdir())
            if p.is_file() and parse_filename(p.name) is not None
        ]
    got = _fetch(location, http=http)
    return page_files(*got) if got else []


@dataclass(frozen=True)
class Sources:
    index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    # how many leading index_urls / find_links come from the installer's own configuration
    # (pip.conf, PIP_*) rather than the spec: used to resolve here, never recorded in a lock
    configured_indexes: int = 0
    configured_links: int = 0


class ArtifactFinder:
    """Lists a project's files across sources once per run (pages are cached in memory)."""

    def __init__(self, sources: Sources, *, http: requests.Session | None = None) -> None:
        self.sources = sources
        self.http = http
        self._flat: list[Artifact] | None = None
        self._projects: dict[str, list[Artifact]] = {}

    def files(self, project: str) -> list[Artifact]:
        key = canonicalize_name(project)
        if key not in self._projects:
            found: list[Artifact] = []
            for index in self.sources.index_urls:
                found += index_files(index, key, http=self.http)
            if self._flat is None:
                self._flat = [
                    a
                    for loc in self.sources.find_links
                    for a in find_links_files(loc, http=self.http)
                ]
            found += [a for a in self._flat if a.project == key]
            self._projects[key] = found
        return self._projects[key]

    def with_sha256(self, a: Artifact) -> Artifact:
        """``a`` with its sha256: from the index, else by hashing the local file or the download."""
        if a.sha256 is not None:
            return a
        if a.local_path is not None:
            return Artifact(a.filename, a.url, local_sha256(a.local_path), a.metadata_url)
        return Artifact(
            a.filename,
            a.url,
            hashlib.sha256(read_bytes(a.url, http=self.http)).hexdigest(),
            a.metadata_url,
        )

    def matching_all(self, project: str, version: str) -> list[Artifact]:
        """Every file of ``project==version``, with its sha256 (local files are hashed)."""
        out: dict[str, Artifact] = {}
        for a in self.files(project):
            if a.version is None or not same_version(a.version, version):
                continue
            a = self.with_sha256(a)
            assert a.sha256 is not None
            out.setdefault(a.sha256, a)
        return sorted(out.values(), key=lambda a: a.filename)

    def matching(self, project: str, version: str | None, hashes: Iterable[str]) -> list[Artifact]:
        """The files of ``project`` (at ``version``, where given) whose sha256 is among ``hashes``.

        Without a version only the files whose sha256 the source states are considered (nothing
        is downloaded to find out).
        """
        wanted = set(hashes)
        if version is not None:
            return [a for a in self.matching_all(project, version) if a.sha256 in wanted]
        out: dict[str, Artifact] = {}
        for a in self.files(project):
            if a.local_path is not None:
                a = self.with_sha256(a)
            if a.sha256 in wanted:
                out.setdefault(a.sha256, a)
        return sorted(out.values(), key=lambda a: a.filename)


def local_sha256(path: Path) -> str:
    """sha256 of a local file, remembered in ``$ENVBUILD_CACHE_DIR/file-hashes/`` under what changes
    whenever its bytes do: device, inode, size, mtime and ctime (the kernel sets ctime on every
    write, and no call sets it back). A find-links folder's 2 GB torch wheel is hashed once, not
    on every lock and provision that looks at it; the installer still checks the bytes it installs.
    """
    st = path.stat()
    real = str(path.resolve())
    key = [real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    entry = cache_dir() / "file-hashes" / (hashlib.sha256(real.encode()).hexdigest()[:32] + ".json")
    try:
        doc = json.loads(entry.read_text())
        if doc.get("key") == key and isinstance(doc.get("sha256"), str):
            return str(doc["sha256"])
    except (OSError, ValueError, AttributeError):
        pass
    sha = sha256_file(path)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(entry, {"key": key, "sha256": sha})
    except OSError:
        pass  # a read-only cache only costs speed
    return sha


# ----------------------------------------------------------------------------- metadata


def parse_requires(metadata_text: str) -> list[str]:
    msg = email.parser.HeaderParser().parsestr(metadata_text)
    return [str(v) for v in msg.get_all("Requires-Dist") or []]


def _wheel_metadata(data: bytes | Path) -> str:
    with zipfile.ZipFile(data if isinstance(data, Path) else io.BytesIO(data)) as zf:
        for name in zf.namelist():
            parts = name.split("/")
            if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
                return zf.read(name).decode("utf-8", "replace")
    raise ValueError("no .dist-info/METADATA in the wheel")


def _sdist_requires(data: bytes | Path, filename: str) -> list[str]:
    pkg_info = requires_txt = None
    if filename.endswith(".zip"):
        with zipfile.ZipFile(data if isinstance(data, Path) else io.BytesIO(data)) as zf:
            for name in zf.namelist():
                if name.count("/") == 1 and name.endswith("/PKG-INFO"):
                    pkg_info = zf.read(name).decode("utf-8", "replace")
                elif name.endswith(".egg-info/requires.txt") and requires_txt is None:
                    requires_txt = zf.read(name).decode("utf-8", "replace")
    else:
        with (
            tarfile.open(name=data, mode="r:gz")
            if isinstance(data, Path)
            else tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
        ) as tf:
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
    if artifact.local_path is not None:
        if artifact.is_wheel:
            reqs = parse_requires(_wheel_metadata(artifact.local_path))
        else:
            data = read_bytes(artifact.url)
            if artifact.sha256 and hashlib.sha256(data).hexdigest() != artifact.sha256:
                raise SourceError(
                    f"{redact(artifact.url)}: the file does not match its sha256 {artifact.sha256}"
                )
            reqs = _sdist_requires(data, artifact.filename)
    # never the whole file in memory: the metadata file, ranges, else streamed to disk
    # (``remotezip``)
    else:
        from envbuild.index.remotezip import remote_metadata

        text, path = remote_metadata(
            artifact.url,
            artifact.sha256,
            http=_default_session(),
            timeout=TIMEOUT,
            wheel=artifact.is_wheel,
            metadata_url=artifact.metadata_url,
        )
        if text is not None:
            reqs = parse_requires(text)
        else:
            assert path is not None
            try:
                reqs = _sdist_requires(path, artifact.filename)
            finally:
                path.unlink(missing_ok=True)
    _cache_put(artifact.sha256, reqs)
    return reqs
