"""Reachability probes: fail fast (seconds), never hang on an unreachable host.

URLs may carry credentials (``https://user:token@host/simple``); they are used for the
request and never printed: ``redact`` is what goes into messages, logs and receipts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_TIMEOUT = 3.0
_CRED = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<cred>[^/@\s]+)@")


def redact(text: str) -> str:
    """Replace ``user:secret@`` in every URL inside ``text`` with ``***@``."""
    return _CRED.sub(lambda m: f"{m.group('scheme')}***@", text)


def is_url(location: str) -> bool:
    return urlsplit(location).scheme in ("http", "https")


@dataclass(frozen=True)
class Probe:
    location: str  # redacted
    ok: bool
    detail: str  # "HTTP 200 in 0.05 s", "connection refused", "folder exists", ...


def probe(location: str, timeout: float = DEFAULT_TIMEOUT) -> Probe:
    """Check an index URL, a find-links URL or a local folder/``file://`` location."""
    shown = redact(location)
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        path = Path(parts.path if parts.scheme == "file" else location)
        if path.exists():
            return Probe(shown, True, "exists")
        return Probe(shown, False, "no such file or folder")
    if parts.scheme not in ("http", "https"):
        return Probe(shown, False, f"unsupported scheme {parts.scheme!r}")
    import requests  # here, not at module level: it costs 0.1-0.2 s of every CLI start

    auth = None
    url = location
    if parts.username is not None:
        auth = (parts.username, parts.password or "")
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    try:
        resp = requests.get(url, timeout=(timeout, timeout), auth=auth, stream=True, allow_redirects=True)
        resp.close()
    except requests.exceptions.ConnectTimeout:
        return Probe(shown, False, f"no answer within {timeout:g} s")
    except requests.exceptions.ReadTimeout:
        return Probe(shown, False, f"accepted the connection but sent no answer within {timeout:g} s")
    except requests.exceptions.ConnectionError as exc:
        return Probe(shown, False, _connection_reason(exc))
    except requests.exceptions.RequestException as exc:
        return Probe(shown, False, redact(str(exc)))
    if resp.status_code >= 400:
        return Probe(shown, False, f"HTTP {resp.status_code}")
    return Probe(shown, True, f"HTTP {resp.status_code} in {resp.elapsed.total_seconds():.2f} s")


def unreachable(locations: Iterable[str], timeout: float = DEFAULT_TIMEOUT) -> list[str]:
    """The package sources among ``locations`` that do not answer, as ``"<redacted> (<why>)"``.

    The one reachability rule of ``provision``, ``lock`` and ``check-lock``: every distinct
    http(s) URL and local path is probed, in parallel, each within ``timeout``; ``file://`` URIs
    are left to the installer (pip names a missing one itself).
    """
    todo = list(dict.fromkeys(loc for loc in locations if is_url(loc) or not loc.startswith("file:")))
    if not todo:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
        probes = list(pool.map(lambda loc: probe(loc, timeout), todo))
    return [f"{p.location} ({p.detail})" for p in probes if not p.ok]


def _connection_reason(exc: Exception) -> str:
    text = str(exc)
    if "Name or service not known" in text or "Temporary failure in name resolution" in text or "NameResolutionError" in text:
        return "host name does not resolve"
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    return redact(text.splitlines()[0] if text else type(exc).__name__)[:200]
