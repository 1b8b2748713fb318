"""A real PEP 503 package index over HTTP, served from the test process, with injectable faults.

One server serves any number of named repositories, each a plain folder of wheels/sdists:

    /<repo>/simple/                   project list (PEP 503)
    /<repo>/simple/<project>/         links to the files, with #sha256= fragments
    /<repo>/files/<filename>          the artifacts
    /<repo>/flat/                     one flat page of every file (for --find-links)
    /<repo>/bare/                     the same without #sha256= fragments (a locker records no
    hashes)

so ``--index-url http://127.0.0.1:P/nightly/simple --extra-index-url http://127.0.0.1:P/pypi/simple``
gives pip two separate indexes. Pages are generated per request from the folder, so a test
may add or delete files while the server runs (a nightly vanishing from its index).

Faults (for mirror and network tests): ``server.fail(pattern, fault)`` makes requests whose
path matches the fnmatch ``pattern`` misbehave: ``"corrupt"`` (same length, flipped bytes, so
the #sha256 no longer matches), ``"drop"`` (headers and half the body, then the connection
closes), ``"reset"`` (connection closed before any response), ``"stall"`` (no answer for
``seconds``), or an HTTP status such as ``404``/``500``/``503``. ``times=N`` limits a fault to
its first N matching requests (retry tests). ``UnreachablePort`` gives a URL where nothing
listens (connection refused at once); ``BlackHole`` a port that accepts connections and never
answers (the "never hang" case).

Every request is recorded in ``server.requests`` (method, path, status) so a test can assert
that an offline install touched no index.

``StaticServer(folder)`` serves a folder as ``python -m http.server`` does (a wheelhouse behind
an operator's static server, a bare git repository for git's dumb HTTP protocol). These two are
the tests' only HTTP servers.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import html
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

__all__ = [
    "BlackHole",
    "Fault",
    "IndexServer",
    "Request",
    "StaticServer",
    "UnreachablePort",
    "project_of",
]

FaultKind = Literal["corrupt", "drop", "reset", "stall"]


def project_of(filename: str) -> str | None:
    """Canonical project name of an artifact file name, or None for anything else."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return str(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    status: int  # 0 when the connection was dropped or reset without a status line


@dataclass
class Fault:
    pattern: str
    kind: FaultKind | int
    times: int | None = None  # None: every matching request
    seconds: float = 30.0  # for "stall"
    hits: int = 0

    def take(self, path: str) -> bool:
        if not fnmatch.fnmatchcase(path, self.pattern):
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        self.hits += 1
        return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: IndexServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: simple, and drops are unambiguous

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet by default
        pass

    def do_HEAD(self) -> None:
        self.server.owner._handle(self, head=True)

    def do_GET(self) -> None:
        self.server.owner._handle(self, head=False)


class IndexServer:
    """PEP 503 simple indexes over folders, on 127.0.0.1 and an OS-chosen port (or ``port``).

    Use as a context manager, or ``start()``/``stop()``::

        with IndexServer({"nightly": nightly_dir, "pypi": pypi_dir}) as srv:
            srv.simple_url("nightly")   # http://127.0.0.1:PORT/nightly/simple
    """

    def __init__(
        self,
        repos: Mapping[str, Path] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        immutable_files: bool = False,
    ) -> None:
        self.repos: dict[str, Path] = {}
        # files answered as files.pythonhosted.org answers them (cacheable for a year, immutable:
        # an installer's cache may use them offline) instead of ``no-store``; only for indexes
        # whose files never change under the same URL during a session
        self.immutable_files = immutable_files
        for name, folder in (repos or {}).items():
            self.add_repo(name, folder)
        self.host = host
        # 0: any free port; a fixed one for URLs that are written into files (lockfiles/examples)
        self._port = port
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> IndexServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server((self.host, self._port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"index-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # releases stalled handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> IndexServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ URLs

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the index server is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def add_repo(self, name: str, folder: Path) -> None:
        if not name or "/" in name:
            raise ValueError(f"repo names are single path segments: {name!r}")
        self.repos[name] = Path(folder)

    def simple_url(self, repo: str) -> str:
        """The ``--index-url`` of ``repo`` (no trailing slash, like download.pytorch.org)."""
        self._repo(repo)
        return f"{self.url}/{repo}/simple"

    def flat_url(self, repo: str) -> str:
        """A ``--find-links`` page listing every file of ``repo``."""
        self._repo(repo)
        return f"{self.url}/{repo}/flat/"

    def bare_url(self, repo: str) -> str:
        """A ``--find-links`` page of every file of ``repo`` with no ``#sha256=`` fragments."""
        self._repo(repo)
        return f"{self.url}/{repo}/bare/"

    def file_url(self, repo: str, filename: str, *, with_hash: bool = False) -> str:
        url = f"{self.url}/{repo}/files/{filename}"
        if with_hash:
            url += f"#sha256={self.sha256(self._repo(repo) / filename)}"
        return url

    # ------------------------------------------------------------------ faults and logs

    def fail(
        self,
        pattern: str,
        kind: FaultKind | int,
        *,
        times: int | None = None,
        seconds: float = 30.0,
    ) -> Fault:
        """Make requests whose path matches ``pattern`` (fnmatch, e.g. ``"*/torch-*.whl"``) fail."""
        if isinstance(kind, str) and kind not in ("corrupt", "drop", "reset", "stall"):
            raise ValueError(f"unknown fault {kind!r}")
        fault = Fault(pattern=pattern, kind=kind, times=times, seconds=seconds)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def requested(self, pattern: str = "*") -> list[Request]:
        with self._lock:
            return [r for r in self.requests if fnmatch.fnmatchcase(r.path, pattern)]

    # ------------------------------------------------------------------ content

    def sha256(self, path: Path) -> str:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            cached = self._hashes.get(key)
        if cached is None:
            cached = hashlib.sha256(path.read_bytes()).hexdigest()
            with self._lock:
                self._hashes[key] = cached
        return cached

    def _repo(self, name: str) -> Path:
        try:
            return self.repos[name]
        except KeyError:
            raise KeyError(f"no repo {name!r}; repos: {', '.join(self.repos)}") from None

    def _artifacts(self, repo: str) -> Iterator[tuple[str, Path]]:
        folder = self.repos[repo]
        if not folder.is_dir():
            return
        for p in sorted(folder.iterdir()):
            if p.is_file() and (project := project_of(p.name)) is not None:
                yield project, p

    def _links(self, repo: str, files: list[Path]) -> str:
        rows = []
        for p in files:
            href = f"/{repo}/files/{p.name}#sha256={self.sha256(p)}"
            rows.append(f'    <a href="{html.escape(href)}">{html.escape(p.name)}</a><br/>')
        return "\n".join(rows)

    @staticmethod
    def _page(title: str, body: str) -> bytes:
        return (
            "<!DOCTYPE html>\n<html>\n  <head>\n"
            '    <meta name="pypi:repository-version" content="1.0">\n'
            f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
            f"{body}\n  </body>\n</html>\n"
        ).encode()

    # ------------------------------------------------------------------ request handling

    def _match_fault(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.take(path):
                    return fault
        return None

    def _log(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append(Request(method, path, status))

    def _handle(self, h: _Handler, head: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        fault = self._match_fault(path)
        if fault is not None and fault.kind == "reset":
            self._log(h.command, path, 0)  # logged before answering: the log keeps request order
            _abort(h)
            return
        if fault is not None and fault.kind == "stall":
            self._log(h.command, path, 0)
            self._stopping.wait(fault.seconds)
            _abort(h)
            return
        if fault is not None and isinstance(fault.kind, int):
            self._send(h, path, fault.kind, b"injected failure\n", "text/plain", head)
            return
        status, body, ctype, location = self._route(path)
        if location is not None:
            self._log(h.command, path, status)
            with contextlib.suppress(OSError):
                h.send_response(status)
                h.send_header("Location", location)
                h.send_header("Content-Length", "0")
                h.end_headers()
            return
        if fault is not None and fault.kind == "corrupt" and status == 200:
            body = _corrupt(body)
        if fault is not None and fault.kind == "drop" and status == 200:
            self._log(h.command, path, 0)
            h.send_response(200)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if not head:
                try:
                    h.wfile.write(body[: max(1, len(body) // 2)])
                    h.wfile.flush()
                except OSError:
                    pass
            _abort(h)
            return
        self._send(h, path, status, body, ctype, head)

    def _send(
        self, h: _Handler, path: str, status: int, body: bytes, ctype: str, head: bool
    ) -> None:
        self._log(h.command, path, status)
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body)))
            immutable = self.immutable_files and status == 200 and "/files/" in path
            h.send_header(
                "Cache-Control", "max-age=365000000, immutable, public" if immutable else "no-store"
            )
            h.end_headers()
            if not head:
                h.wfile.write(body)
        except OSError:  # the client went away
            pass

    def _route(self, path: str) -> tuple[int, bytes, str, str | None]:
        """(status, body, content type, redirect location or None)."""
        parts = path.strip("/").split("/")
        not_found = (404, b"not found\n", "text/plain", None)
        if not parts or parts[0] not in self.repos:
            return not_found
        repo, rest = parts[0], parts[1:]
        html_type = "text/html; charset=utf-8"
        if rest == ["simple"]:
            if not path.endswith("/"):
                return 301, b"", html_type, path + "/"
            projects = sorted({proj for proj, _ in self._artifacts(repo)})
            body = "\n".join(
                f'    <a href="{html.escape(p)}/">{html.escape(p)}</a><br/>' for p in projects
            )
            return 200, self._page(f"Simple index: {repo}", body), html_type, None
        if len(rest) == 2 and rest[0] == "simple":
            wanted = rest[1]
            canonical = canonicalize_name(wanted)
            if wanted != canonical or not path.endswith("/"):
                return 301, b"", html_type, f"/{repo}/simple/{canonical}/"
            files = [p for proj, p in self._artifacts(repo) if proj == canonical]
            if not files:
                return not_found
            return (
                200,
                self._page(f"Links for {canonical}", self._links(repo, files)),
                html_type,
                None,
            )
        if rest in (["flat"], ["flat", "index.html"]):
            files = [p for _, p in self._artifacts(repo)]
            return 200, self._page(f"Files in {repo}", self._links(repo, files)), html_type, None
        # a find-links page that gives no hashes (lockers record none)
        if rest in (["bare"], ["bare", "index.html"]):
            files = [p for _, p in self._artifacts(repo)]
            body = "".join(f'<a href="/{repo}/files/{p.name}">{p.name}</a><br/>\n' for p in files)
            return 200, self._page(f"Files in {repo}", body), html_type, None
        if len(rest) == 2 and rest[0] == "files":
            for _, p in self._artifacts(repo):
                if p.name == rest[1]:
                    return 200, p.read_bytes(), "application/octet-stream", None
            return not_found
        return not_found


def _corrupt(body: bytes) -> bytes:
    """Same length, different bytes in the middle: passes a size check, fails a hash check."""
    if not body:
        return b"\0"
    mid = len(body) // 2
    return body[:mid] + bytes([body[mid] ^ 0xFF]) + body[mid + 1 :]


def _abort(h: _Handler) -> None:
    """Close the client connection abruptly (RST where the platform allows)."""
    h.close_connection = True
    with contextlib.suppress(OSError):
        h.connection.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
    with contextlib.suppress(OSError):
        h.connection.shutdown(socket.SHUT_RDWR)


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet by default
        pass


class StaticServer:
    """A folder served as ``python -m http.server`` serves it: plain files and folder listings,
    no index pages of its own. What an operator puts in front of a wheelhouse, and what git's
    dumb HTTP protocol needs (a bare repository after ``git update-server-info``).

    On 127.0.0.1 and an OS-chosen port; a context manager, or ``start()``/``stop()``::

        with StaticServer(folder) as srv:
            srv.url   # http://127.0.0.1:PORT
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._httpd: ThreadingHTTPServer | None = None

    def start(self) -> StaticServer:
        if self._httpd is None:
            handler = functools.partial(_QuietFiles, directory=str(self.folder))
            self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"static-server-{self.port}",
                daemon=True,
            ).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the static server is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StaticServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class UnreachablePort:
    """A 127.0.0.1 port that is reserved (bound) but not listening: connections are refused at once.

    Holding the bound socket keeps any other process from taking the port for the lifetime of
    this object. ``url`` looks like an index URL.
    """

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/simple"

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> UnreachablePort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlackHole:
    """A 127.0.0.1 port that completes TCP handshakes and then never says a word.

    Clients without a read timeout hang forever here; use it to prove that a probe gives up.
    """

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)  # the kernel accepts into the backlog; we never call accept()
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/simple"

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
