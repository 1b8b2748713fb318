"""The one downloader: a URL into a file, streamed 1 MiB at a time (never held in memory), retried
by ``index.net``'s one rule, its sha256 checked before the file takes its name.

Every transfer goes through ``net.retrying``: timeouts, resets, a connection dropped mid-file and
HTTP 5xx/429 are retried with backoff within the deadline (``ENVBUILD_NET_DEADLINE``, 30 s);
a host name that does not resolve and an HTTP 4xx are final at once. The deadline bounds the
time without progress, not a large file that keeps arriving: bytes beyond the most the file has
held start it again (a server that cuts every copy at the same place runs out of time). A cut
transfer resumes from its ``.partial`` file with an HTTP Range request (a server that ignores Range
sends it whole, which is taken as such); a resumed file whose sha256 is wrong is fetched once more
from zero before it counts as a mismatch.

The mirror (``wheelhouse.mirror``), the metadata reader's last resort (``index.remotezip``) and
``provision --lock``'s unhashed files (``projectlock``) all download here; the credentials a URL
carries are used and only ``net.redact``-ed forms are shown.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from envbuild.index.net import Deadline, SourceError, Timeouts, failure, redact, retrying

if TYPE_CHECKING:
    import requests

__all__ = ["CHUNK", "HashMismatch", "download"]

CHUNK = 1 << 20
CONNECT_READ = (10.0, 30.0)  # the first attempt's seconds to connect, and of silence while reading


class HashMismatch(SourceError):
    """The bytes downloaded are not the ones the lock's sha256 names (the file was not kept)."""


@dataclass
class _Progress:
    best: int = 0  # the most bytes the partial file has held
    resumed: bool = False


def download(
    url: str,
    dest: Path,
    sha256: str | None = None,
    *,
    http: requests.Session | None = None,
    timeout: float | Timeouts = CONNECT_READ,
    deadline: float | None = None,
    on_bytes: Callable[[int, int | None], None] | None = None,
) -> Path:
    """``url`` into ``dest`` (through ``dest.partial``, resumed where an earlier run left one),
    checked against ``sha256`` where given; ``dest``.

    ``SourceError`` when the source cannot be read within the deadline or answers an HTTP error
    (the partial file is kept: the next run resumes it), ``HashMismatch`` when the bytes are not the
    pinned ones (nothing is kept); ``OSError`` from the disk passes through."""
    shown = redact(url)
    part = dest.with_name(dest.name + ".partial")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if urlsplit(url).scheme == "file":
        try:
            shutil.copyfile(unquote(urlsplit(url).path), part)
        except FileNotFoundError as exc:
            raise SourceError(f"{shown}: no such file") from exc
        return _finish(part, dest, sha256, shown)
    import requests

    from envbuild.index.http import session

    if http is None:  # a session of its own, closed with the download
        with session() as own:
            return download(
                url, dest, sha256, http=own, timeout=timeout, deadline=deadline, on_bytes=on_bytes
            )
    for fresh in (False, True):
        if fresh:
            part.unlink(missing_ok=True)
        clock = Deadline(deadline)
        progress = _Progress(part.stat().st_size if part.exists() else 0)
        send = functools.partial(_attempt, http, url, part, clock, progress, on_bytes)
        try:
            answer = retrying(url, send, timeout=timeout, deadline=clock)
        except requests.exceptions.RequestException as exc:
            raise SourceError(
                f"{shown}: {failure(exc)[1]} ({clock.attempts} attempts in "
                f"{clock.elapsed():.0f} s)",
                hint=f"The partial file is kept ({part}); run again to resume.",
            ) from exc
        if answer.status_code >= 400:
            raise SourceError(
                f"{shown} answered HTTP {answer.status_code}"
                + (f" (expected sha256 {sha256})" if sha256 else "")
            )
        try:
            return _finish(part, dest, sha256, shown)
        except HashMismatch:
            if not progress.resumed or fresh:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _attempt(
    http: requests.Session,
    url: str,
    part: Path,
    clock: Deadline,
    progress: _Progress,
    on_bytes: Callable[[int, int | None], None] | None,
    t: Timeouts,
) -> requests.Response:
    """One request, its body appended to ``part``: the answer, or a ``requests`` exception that
    ``net.retrying`` judges (a body cut short is a ``ChunkedEncodingError``: retried)."""
    import requests

    have = part.stat().st_size if part.exists() else 0
    resp = http.get(
        url, headers={"Range": f"bytes={have}-"} if have else {}, stream=True, timeout=t
    )
    if resp.status_code == 416:  # the partial file is no prefix of this one: start again
        resp.close()
        part.unlink(missing_ok=True)
        raise requests.exceptions.ChunkedEncodingError("range not satisfiable: starting again")
    if resp.status_code >= 400:
        return resp  # retrying's to judge: 5xx/429 retried, any other final
    with resp:
        resumed = have > 0 and resp.status_code == 206
        progress.resumed = progress.resumed or resumed
        length = resp.headers.get("Content-Length")
        total = int(length) + (have if resumed else 0) if length and length.isdigit() else None
        done = have if resumed else 0
        with part.open("ab" if resumed else "wb") as f:
            for chunk in resp.iter_content(CHUNK):
                f.write(chunk)
                done += len(chunk)
                if done > progress.best:  # new bytes: the deadline bounds a stall, not a large file
                    progress.best = done
                    clock.renew()
                if on_bytes is not None:
                    on_bytes(done, total)
    if total is not None and done < total:
        raise requests.exceptions.ChunkedEncodingError(
            f"connection closed after {done} of {total} bytes"
        )
    return resp


def _finish(part: Path, dest: Path, sha256: str | None, shown: str) -> Path:
    if sha256:
        h = hashlib.sha256()
        with part.open("rb") as f:
            while block := f.read(CHUNK):
                h.update(block)
        if h.hexdigest() != sha256.lower():
            part.unlink(missing_ok=True)
            raise HashMismatch(
                f"sha256 mismatch for {shown}: expected {sha256}, got {h.hexdigest()}; "
                "the file was not kept (tampered or re-uploaded)"
            )
    os.replace(part, dest)
    return dest
