"""Reachability probes (``unreachable``), the one retry rule (deadlines, backoff) and redaction,
for every request to a package source.

A source that is slow is not a source that is down: a proxy that fetches a page before it
answers, or a mirror that hiccups, answers a second attempt. So every request here is *retried
within a deadline*: each attempt has a short timeout that grows (3, 4.8, 7.7 s, ... for a probe),
and attempts go on, after an exponential backoff with jitter, until an overall deadline (30 s
for a probe, ``ENVBUILD_NET_DEADLINE`` to change it). Timeouts, resets and HTTP 5xx/429 are
retried, and said on the console ("slow, retrying"); a refused connection is retried for about
a second and a half (a proxy restarting), no longer; a host name that does not resolve, and an
HTTP answer such as 404, are final at once. Nothing hangs: no attempt outlives the deadline.

A probe asks for something small: with ``project`` the project's page (``<index>/<project>/``,
what the installer reads first), else the location itself, with ``HEAD`` (a streaming ``GET``
only where ``HEAD`` is refused); it never reads a body. The index root is the wrong question:
PyPI's ``/simple/`` lists every project (40 MB), which a proxy may fetch whole before it sends
a byte.

URLs may carry credentials (``https://user:token@host/simple``); they are used for the
request and never printed: ``redact`` is what goes into messages, logs and receipts.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

from packaging.utils import canonicalize_name

from envbuild import events
from envbuild.errors import PreflightError
from envbuild.index.redaction import redact as redact  # re-exported: every source message uses it

if TYPE_CHECKING:
    import requests


class SourceError(PreflightError):
    """A package source (index, find-links page, artifact URL) did not answer, or answered an
    error."""


DEFAULT_TIMEOUT = 3.0  # seconds of a probe's first attempt (to connect; of silence while reading)
DEFAULT_DEADLINE = 30.0  # seconds a probe goes on retrying
DEADLINE_ENV = "ENVBUILD_NET_DEADLINE"  # seconds: the overall deadline of every retried request
GROW = 1.6  # each attempt's timeout is this much longer than the last one's ...
_MAX_ATTEMPT = 15.0  # ... up to this (or the first attempt's own timeout, when that is longer)
_REFUSED_FOR = 1.5  # seconds a refused connection is retried: a proxy restarting, not a dead host
_MIN_ATTEMPT = 0.5  # an attempt with less time than this left is not worth starting
_DNS = (
    "Name or service not known",
    "Temporary failure in name resolution",
    "NameResolutionError",
    "nodename nor servname",
    "No address associated with hostname",
)


def is_url(location: str) -> bool:
    return urlsplit(location).scheme in ("http", "https")


def deadline_seconds(default: float = DEFAULT_DEADLINE) -> float:
    """``$ENVBUILD_NET_DEADLINE`` when it is a positive number, else ``default``."""
    try:
        value = float(os.environ.get(DEADLINE_ENV, ""))
    except ValueError:
        return default
    return value if value > 0 else default


class Deadline:
    """The overall time limit that the attempts of one request share, and what they have used."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = seconds if seconds is not None else deadline_seconds()
        self.started = time.monotonic()
        self.attempts = 0

    def left(self) -> float:
        return max(0.0, self.started + self.seconds - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def renew(self) -> None:
        """Progress was made (a download's bytes came): the deadline starts again from now."""
        self.started = time.monotonic()


class Answer(Protocol):
    """What ``retrying`` needs of a response (``requests.Response`` is one)."""

    status_code: int

    def close(self) -> None: ...


A = TypeVar("A", bound=Answer)
Timeouts = tuple[float, float]  # (connect, read) seconds, as requests takes them


def retrying(
    url: str,
    send: Callable[[Timeouts], A],
    *,
    timeout: float | Timeouts = DEFAULT_TIMEOUT,
    deadline: Deadline | float | None = None,
    grow: float = GROW,
) -> A:
    """``send(timeouts)`` (one request to ``url``) until it gives a final answer or the deadline
    passes.

    Final: any HTTP status but 5xx and 429 (a 404 is an answer), and the errors no wait mends:
    a host name that does not resolve, TLS, an invalid URL, redirect loops. Retried after a
    backoff: timeouts, resets, dropped connections and 5xx/429; a refused connection for
    ``_REFUSED_FOR`` seconds. Each retry is announced (``info``, the URL redacted). When the
    deadline passes, the last failure stands: a 5xx response is returned, an exception raised.
    The deadline bounds the waiting, not a transfer that keeps sending: ``timeout`` is per attempt
    (to connect, and of silence while reading), the first one as given, each next ``grow`` times
    longer, none longer than what is left.

    Why not urllib3's ``Retry`` (``HTTPAdapter(max_retries=...)``): it counts attempts but knows
    no overall deadline (a read stall costs the full read timeout on every attempt), its timeouts
    do not grow, it retries a host name that does not resolve like any connect error, it cannot
    say "retrying" as it goes, and it gives up on a body cut short after the headers (a
    non-streaming ``get``), which this loop retries like any reset.
    """
    import requests  # here, not at module level: it costs 0.1-0.2 s of every CLI start

    clock = deadline if isinstance(deadline, Deadline) else Deadline(deadline)
    first = (timeout, timeout) if isinstance(timeout, (int, float)) else timeout
    cap = max(_MAX_ATTEMPT, *first)
    refused: list[float] = []  # when each refusal came
    while True:
        n = clock.attempts
        clock.attempts += 1
        left = clock.left()
        scale = grow**n
        t = (
            min(first[0] * scale, cap, max(left, _MIN_ATTEMPT)),
            min(first[1] * scale, cap, max(left, _MIN_ATTEMPT)),
        )
        try:
            answer = send(t)
        except requests.exceptions.RequestException as exc:
            kind, why = failure(exc, t)
            if kind == "final":
                raise
            if kind == "refused":  # quietly: it is over in a second and a half either way
                refused.append(time.monotonic())
                if refused[-1] - refused[0] >= _REFUSED_FOR:
                    raise
                if not _wait(url, why, min(1.0, 0.4 * 2 ** (len(refused) - 1)), clock, "debug"):
                    raise
            elif not _wait(url, why, min(8.0, 0.5 * 2**n), clock):
                raise
            continue
        if answer.status_code < 500 and answer.status_code != 429:
            return answer
        pause = max(min(8.0, 0.5 * 2**n), _retry_after(answer))
        if not _wait(url, f"answered HTTP {answer.status_code}", pause, clock):
            return answer
        answer.close()


def _wait(url: str, why: str, pause: float, clock: Deadline, level: events.Level = "info") -> bool:
    """Sleep ``pause`` (with jitter) and say so, when an attempt still fits in the deadline."""
    pause *= random.uniform(0.5, 1.0)
    left = clock.left() - pause
    if left < _MIN_ATTEMPT:
        return False
    events.emit(
        level,
        f"{redact(url)} {why}, retrying (attempt {clock.attempts + 1}, {left:.0f} s left)",
        url=redact(url),
        attempt=clock.attempts + 1,
    )
    time.sleep(pause)
    return True


def _retry_after(answer: Answer) -> float:
    headers = getattr(answer, "headers", None)
    try:
        return (
            min(30.0, max(0.0, float(headers.get("Retry-After", ""))))
            if headers is not None
            else 0.0
        )
    except (TypeError, ValueError):
        return 0.0


def failure(exc: Exception, timeouts: Timeouts | None = None) -> tuple[str, str]:
    """(kind, why) of a failed request: kind ``timeout``/``reset`` (retried), ``refused``
    (retried briefly) or ``final``; ``why`` as a message says it ("slow (no answer within 3 s)")."""
    import requests

    text = str(exc)
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "timeout", f"slow (no connection within {timeouts[0]:g} s)" if timeouts else "slow"
    if isinstance(exc, requests.exceptions.ReadTimeout) or (
        isinstance(exc, requests.exceptions.ConnectionError) and "timed out" in text.lower()
    ):
        return "timeout", f"slow (no answer within {timeouts[1]:g} s)" if timeouts else "slow"
    if isinstance(exc, requests.exceptions.SSLError):
        if "CERTIFICATE_VERIFY_FAILED" in text:
            return (
                "final",
                (
                    "its TLS certificate is not trusted (CERTIFICATE_VERIFY_FAILED): no CA of the"
                    " system trust store, of pip's `cert` or of REQUESTS_CA_BUNDLE signed it"
                ),
            )
        return "final", _first_line(exc)
    if isinstance(exc, requests.exceptions.ConnectionError):
        if any(s in text for s in _DNS):
            return "final", "host name does not resolve"
        if "Connection refused" in text:
            return "refused", "connection refused"
        return "reset", "connection reset or dropped"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "reset", "connection dropped mid-answer"
    return "final", _first_line(exc)


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return redact(text.splitlines()[0] if text else type(exc).__name__)[:200]


@dataclass(frozen=True)
class Probe:
    location: str  # redacted
    ok: bool
    detail: str  # "HTTP 200 in 0.05 s", "connection refused", "folder exists", ...


def project_page(index_url: str, project: str) -> str:
    """``<index>/<project>/`` with the PEP 503 normalized name."""
    return index_url.rstrip("/") + "/" + canonicalize_name(project) + "/"


def probe(
    location: str,
    timeout: float = DEFAULT_TIMEOUT,
    *,
    project: str | None = None,
    deadline: float | None = None,
) -> Probe:
    """Check an index URL, a find-links URL or a local folder/``file://`` location.

    ``project``: a project the caller will read from this index; its page is probed rather than
    the index itself (a 404 there is checked against the index's own URL: a project an extra
    index does not carry is no fault of the index). ``timeout``: the first attempt's seconds;
    ``deadline``: seconds for every attempt together (default ``$ENVBUILD_NET_DEADLINE``, else
    30 s, and never shorter than ``timeout``).
    """
    shown = redact(location)
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        path = Path(parts.path if parts.scheme == "file" else location)
        if path.exists():
            return Probe(shown, True, "exists")
        return Probe(shown, False, "no such file or folder")
    if parts.scheme not in ("http", "https"):
        return Probe(shown, False, f"unsupported scheme {parts.scheme!r}")
    auth = None
    url = location
    if parts.username is not None:
        auth = (parts.username, parts.password or "")
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    clock = Deadline(deadline if deadline is not None else max(deadline_seconds(), timeout))
    from envbuild.index.http import session

    with session() as http:  # trusted and routed as pip is; its connections closed after
        return _probe_with(http, url, shown, auth, project, timeout, clock)


def _probe_with(
    http: requests.Session,
    url: str,
    shown: str,
    auth: tuple[str, str] | None,
    project: str | None,
    timeout: float,
    clock: Deadline,
) -> Probe:
    """``probe``'s requests, on ``http``."""
    import requests

    def ask(target: str) -> requests.Response:
        def send(t: Timeouts) -> requests.Response:
            resp: requests.Response = http.head(target, timeout=t, auth=auth, allow_redirects=True)
            # HEAD refused: a GET's headers, its body left unread
            if resp.status_code in (405, 501):
                resp = http.get(target, timeout=t, auth=auth, stream=True, allow_redirects=True)
                resp.close()
            return resp

        return retrying(target, send, timeout=timeout, deadline=clock)  # target: no credentials

    note = ""
    try:
        resp = ask(project_page(url, project) if project else url)
        if project and resp.status_code == 404:
            note = f"; no {project} page"
            resp = ask(url)
    except requests.exceptions.RequestException as exc:
        kind, why = failure(exc)
        if kind == "timeout":
            said = (
                "no answer"
                if isinstance(exc, requests.exceptions.ConnectTimeout)
                else "accepted the connection but sent no answer"
            )
            why = f"{said} within {clock.elapsed():.0f} s ({_attempts(clock)})"
        elif kind == "reset":
            why += f" ({_attempts(clock)} in {clock.elapsed():.0f} s)"
        return Probe(shown, False, why)
    retried = clock.attempts > (2 if note else 1)  # the index's own URL after a 404 is no retry
    if resp.status_code >= 400:
        return Probe(
            shown, False, f"HTTP {resp.status_code}" + (f" ({_attempts(clock)})" if retried else "")
        )
    tries = f", {_attempts(clock)}" if retried else ""
    return Probe(shown, True, f"HTTP {resp.status_code} in {clock.elapsed():.2f} s{tries}{note}")


def _attempts(clock: Deadline) -> str:
    return f"{clock.attempts} attempt{'s' if clock.attempts != 1 else ''}"


def unreachable(
    locations: Iterable[str],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    projects: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> list[str]:
    """The package sources among ``locations`` that do not answer, as ``"<redacted> (<why>)"``.

    The one reachability rule of ``provision``, ``lock`` and ``check-lock``: every distinct
    http(s) URL and local path is probed (``probe``: retried within the deadline), in parallel;
    ``file://`` URIs are left to the installer (pip names a missing one itself). ``projects``
    maps an index URL to a project the step reads from it, whose page is probed instead of the
    index (find-links locations are left out of it: they are pages or folders, not indexes).
    """
    probes = probe_all(locations, timeout, projects=projects, deadline=deadline)
    return [f"{p.location} ({p.detail})" for p in probes.values() if not p.ok]


def probe_all(
    locations: Iterable[str],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    projects: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> dict[str, Probe]:
    """``probe`` of every distinct location, in parallel: {location as given: its probe}.

    ``file://`` URIs are left out (the installer names a missing one itself); ``projects`` as
    for ``unreachable``.
    """
    todo = list(
        dict.fromkeys(loc for loc in locations if is_url(loc) or not loc.startswith("file:"))
    )
    if not todo:
        return {}
    wanted = projects or {}
    with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
        probes = list(
            pool.map(
                lambda loc: probe(loc, timeout, project=wanted.get(loc), deadline=deadline), todo
            )
        )
    return dict(zip(todo, probes, strict=True))
