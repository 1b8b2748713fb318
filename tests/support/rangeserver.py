"""A static file server that answers HTTP Range requests (or, ``ranges=False``, ignores them and
sends the whole file, as many simple servers do), counting the bytes it sends: what a metadata read
fetched is measured on the server side."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["RangeServer"]


class RangeServer:
    def __init__(self, folder: Path, *, ranges: bool = True, metadata_files: bool = False) -> None:
        self.folder, self.ranges, self.metadata_files = folder, ranges, metadata_files
        self.sent = 0
        self.requests: list[tuple[str, str]] = []  # (path, Range header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                name = self.path.lstrip("/").split("?")[0]
                server.requests.append((name, self.headers.get("Range", "")))
                path = server.folder / name
                if name.endswith(".metadata") and not server.metadata_files:
                    path = server.folder / "missing"
                if not path.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = path.stat().st_size
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
                if server.ranges and m:
                    a, b = m.groups()
                    start, end = (
                        (size - int(b), size - 1) if not a else (int(a), int(b) if b else size - 1)
                    )
                    start, end = max(0, start), min(end, size - 1)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                else:
                    start, end = 0, size - 1
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start + 1))
                self.end_headers()
                with path.open("rb") as f:
                    f.seek(start)
                    left = end - start + 1
                    while left > 0:
                        chunk = f.read(min(left, 1 << 20))
                        if not chunk:
                            break
                        try:
                            self.wfile.write(chunk)
                        except (BrokenPipeError, ConnectionResetError):
                            return
                        server.sent += len(chunk)
                        left -= len(chunk)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> RangeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
