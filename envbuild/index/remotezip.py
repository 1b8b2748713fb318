"""A remote distribution's metadata without holding the distribution in memory (a PEP 658
metadata file, HTTP ranges, else the file streamed to disk).

In order, as pip reads it (``pip._internal.network.lazy_wheel`` does the second for pip):

1. the index's metadata file (PEP 658/714: ``<file URL>.metadata``), a few KB;
2. a wheel from a server that answers HTTP Range requests: ``zipfile`` reads a seekable file
   whose reads are ranges of the remote file (``RangeFile``), so only the zip's end records,
   its central directory and the ``METADATA`` member cross the network (kilobytes of a 900 MB
   torch wheel);
3. otherwise the file downloaded to a temporary file (``index.download``: streamed, retried, its
   sha256 checked against the lock's), then read from disk.

Memory stays at a few MB whatever the file's size; what each path read is counted (``Read``) so
the bench can say it. The caller caches the result by the file's sha256 (``index.client``).
"""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

__all__ = ["NoRanges", "RangeFile", "Read", "dist_info_member", "remote_metadata"]

BLOCK = 64 * 1024  # a range request reads at least this much (the zip's end records fit in one)
CHUNK = 1 << 20


@dataclass
class Read:
    """How a metadata read went: ``how`` (metadata-file | range | stream) and the bytes it
    fetched."""

    how: str = ""
    bytes: int = 0
    requests: int = 0


class NoRanges(Exception):
    """The server answered a Range request with the whole file (or not at all)."""


_NoRanges = NoRanges


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file, fetched by HTTP Range requests in blocks of at
    least ``BLOCK`` bytes (each fetched block kept: zipfile re-reads the central directory)."""

    def __init__(self, url: str, http: Any, timeout: Any, read: Read) -> None:
        super().__init__()
        self.url, self.http, self.timeout, self.read_stats = url, http, timeout, read
        self.pos = 0
        self.blocks: dict[int, bytes] = {}
        tail = self._get(f"bytes=-{BLOCK}")
        total = _total_size(tail.headers.get("Content-Range", ""))
        if tail.status_code != 206 or total is None:
            raise _NoRanges()
        self.size = total
        data = tail.content
        start = total - len(data)
        self._keep(start, data)

    def _get(self, spec: str) -> Any:
        self.read_stats.requests += 1
        resp = self.http.get(
            self.url,
            headers={"Range": spec, "Accept-Encoding": "identity"},
            timeout=self.timeout,
            stream=True,
        )
        if resp.status_code != 206:
            resp.close()  # a 200 is the whole file: not read here
            if resp.status_code >= 400 and resp.status_code != 416:
                from envbuild.index.net import SourceError, redact

                raise SourceError(f"{redact(self.url)} answered HTTP {resp.status_code}")
            raise _NoRanges()
        body = resp.content
        self.read_stats.bytes += len(body)
        return resp

    def _keep(self, start: int, data: bytes) -> None:
        for off in range(0, len(data), BLOCK):
            self.blocks[start + off] = data[off : off + BLOCK]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buf: Any) -> int:
        want = min(len(buf), max(0, self.size - self.pos))
        if want == 0:
            return 0
        data = self._range(self.pos, self.pos + want)
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)

    def _range(self, start: int, end: int) -> bytes:
        """Bytes [start, end) from the kept blocks, fetching what is missing in one request."""
        out = bytearray()
        pos = start
        while pos < end:
            hit = self._kept(pos)
            if hit is None:
                stop = end
                for s in sorted(self.blocks):  # up to the next kept byte
                    if s > pos:
                        stop = min(stop, s)
                        break
                fetch_end = min(self.size, max(stop, pos + BLOCK))
                resp = self._get(f"bytes={pos}-{fetch_end - 1}")
                got = resp.content
                if not got:
                    break
                self._keep_exact(pos, got)
                hit = self._kept(pos)
                assert hit is not None
            out += hit[: end - pos]
            pos += len(hit[: end - pos])
        return bytes(out)

    def _keep_exact(self, start: int, data: bytes) -> None:
        self.blocks[start] = data

    def _kept(self, pos: int) -> bytes | None:
        for s, data in self.blocks.items():
            if s <= pos < s + len(data):
                return data[pos - s :]
        return None


def _total_size(content_range: str) -> int | None:
    """``bytes 0-99/1234`` -> 1234."""
    _, _, total = content_range.rpartition("/")
    return int(total) if total.strip().isdigit() else None


def dist_info_member(zf: zipfile.ZipFile, member: str = "METADATA") -> str:
    """The text of a wheel's ``NAME.dist-info/<member>`` (METADATA, RECORD); ValueError when the
    wheel has none."""
    for name in zf.namelist():
        parts = name.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == member:
            return zf.read(name).decode("utf-8", "replace")
    raise ValueError(f"no .dist-info/{member} in the wheel")


def remote_metadata(
    url: str,
    sha256: str | None,
    *,
    http: Any,
    timeout: Any,
    wheel: bool = True,
    metadata_url: str | None = None,
    read: Read | None = None,
) -> tuple[str | None, Path | None]:
    """A remote wheel's METADATA text, or (None, a temporary file holding the whole distribution,
    hash-checked) for an sdist or a server that neither serves a metadata file nor answers ranges
    where the caller must read the file itself (an sdist). The caller deletes the file."""
    from envbuild.index.net import SourceError, redact

    read = read if read is not None else Read()
    if wheel:
        for candidate in dict.fromkeys([metadata_url, url.split("#", 1)[0] + ".metadata"]):
            if not candidate:
                continue
            read.requests += 1
            resp = http.get(candidate, timeout=timeout)
            if resp.status_code == 200 and resp.content.lstrip().startswith(b"Metadata-Version"):
                read.how, read.bytes = "metadata-file", read.bytes + len(resp.content)
                return resp.content.decode("utf-8", "replace"), None
        try:
            with RangeFile(url, http, timeout, read) as remote, zipfile.ZipFile(remote) as zf:
                text = dist_info_member(zf)
            read.how = "range"
            return text, None
        except _NoRanges:
            pass
        except zipfile.BadZipFile as exc:
            raise SourceError(f"{redact(url)}: not a readable wheel ({exc})") from exc
    from envbuild.index.download import download

    read.requests += 1
    fd, name = tempfile.mkstemp(prefix="envbuild-dist-")
    os.close(fd)
    path = Path(name)
    try:
        download(url, path, sha256, http=http, timeout=timeout)
    except BaseException:
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".partial").unlink(missing_ok=True)
        raise
    read.bytes += path.stat().st_size
    read.how = "stream"
    if not wheel:
        return None, path
    try:
        with zipfile.ZipFile(path) as zf:
            return dist_info_member(zf), None
    except zipfile.BadZipFile as exc:
        raise SourceError(f"{redact(url)}: not a readable wheel ({exc})") from exc
    finally:
        path.unlink(missing_ok=True)
