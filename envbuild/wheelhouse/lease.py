"""A lease on a shared filesystem: one holder of a name across hosts (NFS, Lustre, a local disk),
taken by an atomic create, kept alive by a heartbeat, taken over when the heartbeat stops.

Taking: the holder writes its record (host, pid, its PID namespace, when it started, a random
token) into a file of its own beside the lease and hard-links it to the lease's name. ``link(2)``
is atomic on every filesystem a fleet shares, NFSv2/v3 included, where ``O_EXCL`` was not always;
a link whose reply an NFS retransmit lost is told apart by the link count of the holder's own
file (2: taken), the trick of ``flufl.lock`` and ``File::SharedNFSLock``.

Heartbeat: every ``beat_s`` seconds the holder rewrites its record in place (``beat``, and the
seconds since it took the lease by its own clock), through the descriptor it took the lease with,
so a holder whose lease was taken over writes into its old file, never over the new holder's.
A waiter never compares clocks (the holder's, the file server's, its own differ): it notes, on
its own monotonic clock, when it last saw the record change, and calls the lease stale when it has
not changed for ``stale_s``. A holder on this host and in this PID namespace whose process is
gone is stale at once.

Takeover: the waiter renames the stale lease to a name of its own (rename is atomic: of two
waiters, one wins), checks that what it renamed is the record it judged stale (else puts it back)
and takes the lease as above. A holder that was only paused past ``stale_s`` finds its lease gone
at its next beat (``Lease.lost``); at worst two hosts then build the same key, and publication
(``wheelhouse.sharedcache``) is atomic and checked, so that costs time, never a wrong wheel.

Why not a library: ``filelock``'s ``SoftFileLock`` has no heartbeat, and its ``SoftFileLease``
(3.30) expires a claim by the file's mtime against the local clock; ``flufl.lock`` (NFS-safe by
the same link trick) also expires by the local clock against a time the holder wrote. Both
compare clocks of different hosts, which a fleet cannot promise; neither says who holds a lease
and for how long, which the waiters print.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["BEAT_S", "Holder", "Lease", "Watch", "take", "take_over"]

BEAT_S = 5.0  # seconds between a holder's heartbeats
_RECORD_BYTES = 1024  # the record is padded to this size and rewritten in place


def _pidns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class Holder:
    """What a lease file says of its holder."""

    host: str
    pid: int
    pidns: str
    started: str  # ISO time on the holder's clock (shown, never compared)
    token: str
    beat: int = 0
    elapsed_s: float = 0.0  # seconds since the holder took the lease, by its own clock

    def encode(self) -> bytes:
        data = json.dumps(self.__dict__, sort_keys=True).encode()
        return data.ljust(_RECORD_BYTES, b" ")

    @classmethod
    def decode(cls, data: bytes) -> Holder | None:
        try:
            raw = json.loads(data.decode("utf-8", "replace").strip() or "null")
            return cls(
                host=str(raw["host"]),
                pid=int(raw["pid"]),
                pidns=str(raw.get("pidns", "")),
                started=str(raw["started"]),
                token=str(raw["token"]),
                beat=int(raw.get("beat", 0)),
                elapsed_s=float(raw.get("elapsed_s", 0.0)),
            )
        except (ValueError, TypeError, KeyError):
            return None

    @property
    def shown(self) -> str:
        return f"{self.host} (pid {self.pid})"

    def dead_here(self) -> bool:
        """The holder runs on this host, in this PID namespace, and its process is gone."""
        if self.host != socket.gethostname() or self.pidns != _pidns():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _me() -> Holder:
    return Holder(
        host=socket.gethostname(),
        pid=os.getpid(),
        pidns=_pidns(),
        started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        token=secrets.token_hex(8),
    )


class Lease:
    """A lease this process holds; ``release`` it (or use it as a context manager)."""

    def __init__(self, path: Path, fd: int, holder: Holder, beat_s: float) -> None:
        self.path = path
        self.holder = holder
        self._fd = fd
        self._ino = os.fstat(fd).st_ino
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(
            target=self._beat, args=(beat_s,), name="envbuild-lease", daemon=True
        )
        self._thread.start()

    def _beat(self, beat_s: float) -> None:
        beat = 0
        while not self._stop.wait(beat_s):
            if not self.ours():
                self.lost = True
                return
            beat += 1
            record = Holder(
                **{
                    **self.holder.__dict__,
                    "beat": beat,
                    "elapsed_s": round(time.monotonic() - self._t0, 1),
                }
            )
            with contextlib.suppress(OSError):  # a beat missed is not a lease lost
                os.pwrite(self._fd, record.encode(), 0)
                os.fsync(self._fd)

    def ours(self) -> bool:
        """The lease's name still names the file this process took."""
        try:
            return os.stat(self.path).st_ino == self._ino
        except OSError:
            return False

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        mine = self.ours()
        os.close(self._fd)
        if mine:
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take(path: Path, beat_s: float = BEAT_S) -> Lease | None:
    """The lease at ``path`` if no one holds it, else None. OSError: the folder is not writable."""
    me = _me()
    own = path.with_name(f"{path.name}.{me.host}.{me.pid}.{me.token}")
    fd = os.open(own, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, me.encode())
        os.fsync(fd)
        try:
            os.link(own, path)
        except FileExistsError:
            if os.fstat(fd).st_nlink != 2:  # a retransmitted link that did succeed counts 2
                os.close(fd)
                return None
        return Lease(path, fd, me, beat_s)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(own)


@dataclass
class Watch:
    """A waiter's view of a lease someone else holds: what it last read, and when (on this
    process's monotonic clock) that last changed."""

    path: Path
    stale_s: float
    holder: Holder | None = None
    _seen: bytes | None = None
    _changed: float = 0.0
    since: float = 0.0  # when this process began to watch

    def look(self) -> str:
        """``free`` (no lease), ``held`` or ``stale`` (dead here, or no beat for ``stale_s``)."""
        now = time.monotonic()
        if not self.since:
            self.since = now
        try:
            # open, then read: on NFS the open revalidates the file (close-to-open consistency)
            with open(self.path, "rb") as f:
                data = f.read(_RECORD_BYTES)
        except FileNotFoundError:
            self._seen = None
            return "free"
        if data != self._seen:
            self._seen, self._changed = data, now
            self.holder = Holder.decode(data) or self.holder
        if self.holder is not None and self.holder.dead_here():
            return "stale"
        return "stale" if now - self._changed >= self.stale_s else "held"

    @property
    def quiet_s(self) -> float:
        """Seconds since the record last changed, by this process's clock."""
        return time.monotonic() - self._changed


def take_over(path: Path, seen: Holder | None, beat_s: float = BEAT_S) -> Lease | None:
    """Break the stale lease whose record was ``seen`` and take it; None when another waiter did
    first (or the holder woke and the record moved)."""
    aside = path.with_name(f"{path.name}.stale.{secrets.token_hex(8)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return take(path, beat_s)
    try:
        got = Holder.decode(aside.read_bytes()[:_RECORD_BYTES])
    except OSError:
        got = None
    if seen is not None and (got is None or got.token != seen.token):
        # not the record judged stale: a new holder's, renamed between our look and the rename
        with contextlib.suppress(OSError):
            os.link(aside, path)
        with contextlib.suppress(OSError):
            os.unlink(aside)
        return None
    with contextlib.suppress(OSError):
        os.unlink(aside)
    return take(path, beat_s)
