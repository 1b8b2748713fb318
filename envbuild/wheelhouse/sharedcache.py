"""The shared build cache a fleet points at (``--build-cache DIR|URL``, ``ENVBUILD_BUILD_CACHE``):
each key built once, on one host, and installed by every other.

A folder on a filesystem the hosts share (NFS, Lustre, a mounted bucket) is read and written; an
``http(s)://`` URL (any static server in front of such a folder) is read only. Its layout::

    wheels/<key[:32]>/{WHEEL, result.json, index.html}   a published build and its record
    leases/<key[:32]>.lease                               the builder of that key (``lease``)
    by-sha256/<sha256>.json                               which build holds a wheel of that sha256
    tmp/                                                  publications being written

One builder per key, the rest wait (``SharedCache.turn``): the first host to miss takes the key's
lease, builds, publishes (written aside, fsynced, renamed into place: a reader sees a whole entry
or none) and releases; the others wait, saying every ``_SAY_S`` seconds which host builds and for
how long, and install what it published. A lease whose holder is dead or whose heartbeat stopped
for ``ENVBUILD_BUILD_CACHE_STALE`` seconds (60) is taken over, and the output says so; a host that
waited ``ENVBUILD_BUILD_CACHE_WAIT`` seconds (7200), or cannot write the folder, builds for itself.

Nothing is installed unchecked (``SharedCache.fetch``): the record must parse, its key parts must
equal this host's in every part (else the part that differs is named), the wheel's sha256 must be
the record's (checked on the copy this host installs, not the shared file), and the key parts in
the wheel's own provenance must be the same. A rejected entry is rebuilt and republished in its
place. The record says who built it (host, when); the build says where a wheel came from
(``Origin``), which the receipt keeps.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import time
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from envbuild import events
from envbuild._io import atomic_write_json, sha256_file
from envbuild.errors import ConfigError
from envbuild.guard.buildrecord import PROVENANCE_FILE
from envbuild.index.net import redact
from envbuild.wheelhouse import lease as leases

__all__ = [
    "ENV",
    "Origin",
    "SharedCache",
    "Turn",
    "key_differences",
    "open_shared",
]

ENV = "ENVBUILD_BUILD_CACHE"
WAIT_ENV = "ENVBUILD_BUILD_CACHE_WAIT"
STALE_ENV = "ENVBUILD_BUILD_CACHE_STALE"
_SAY_S = 15.0  # seconds between a waiter's progress lines
_POLL_S = 1.0


def key_differences(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """``part theirs, now ours`` for each key part that differs (dotted for nested parts)."""
    return [f"{name} {_shown(a)}, now {_shown(b)}" for name, a, b in _diff(theirs, ours)]


def _diff(
    theirs: Mapping[str, Any], ours: Mapping[str, Any], prefix: str = ""
) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name), ours.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{name}.")
        elif a != b:
            out.append((f"{prefix}{name}", a, b))
    return out


def _shown(value: Any) -> str:
    return "none" if value is None else str(value)


@dataclass(frozen=True)
class Origin:
    """Where an installed build came from: built here, this host's cache, or the shared one."""

    how: Literal["built here", "local cache", "build cache"]
    host: str | None = None  # the host that built it
    at: str | None = None  # when (ISO, that host's clock)
    cache: str | None = None  # the shared cache it was taken from (redacted)

    def to_json(self) -> dict[str, str | None]:
        return {"how": self.how, "built_on": self.host, "built_at": self.at, "cache": self.cache}

    @property
    def shown(self) -> str:
        if self.how == "build cache":
            return f"from the build cache {self.cache} (built on {self.host} at {self.at})"
        return self.how


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def open_shared(value: str | None) -> SharedCache | None:
    """The shared cache ``--build-cache`` (else ``$ENVBUILD_BUILD_CACHE``) names; None: none."""
    value = value or os.environ.get(ENV) or None
    if value is None:
        return None
    scheme = urlsplit(value).scheme
    if scheme in ("http", "https"):
        return SharedCache(value.rstrip("/"), url=True)
    if "://" in value or scheme == "file":
        raise ConfigError(
            f"--build-cache {redact(value)}: a build cache is a folder (a shared filesystem) or"
            " an http(s):// URL (read only)",
        )
    return SharedCache(str(Path(value).expanduser().absolute()), url=False)


class Turn:
    """One build's turn at the shared cache: ``taken`` (a checked wheel is in the local slot) or
    this host builds, then ``publish``-es when it may."""

    def __init__(self, cache: SharedCache, key: str, label: str) -> None:
        self.cache, self.key, self.label = cache, key, label
        self.taken: Origin | None = None
        self.may_publish = False
        self.replace = False  # the published entry was rejected: the new one takes its place

    def publish(self, slot: Path) -> None:
        if self.may_publish:
            self.cache.publish(self.key, slot, self.label, replace=self.replace)


class SharedCache:
    """The shared build cache at ``location`` (a folder, or a URL: read only)."""

    def __init__(self, location: str, *, url: bool) -> None:
        self.location = location
        self.url = url
        self.stale_s = _seconds(STALE_ENV, 60.0)
        self.wait_s = _seconds(WAIT_ENV, 7200.0)
        self.dead: str | None = None  # why the cache is not used any more in this run
        self.read_only: str | None = None if not url else "a URL is read only"

    @property
    def shown(self) -> str:
        return redact(self.location)

    @property
    def root(self) -> Path:
        return Path(self.location)

    def _give_up(self, why: str) -> None:
        if self.dead is None:
            self.dead = why
            events.emit("warn", f"build cache {self.shown}: {why}; building here without it")

    def _no_writes(self, why: str) -> None:
        if self.read_only is None:
            self.read_only = why
            events.emit(
                "warn",
                f"build cache {self.shown}: {why}: its wheels are installed, but what is built"
                " here is not published there",
            )

    # ------------------------------------------------------------------------- reading

    def fetch(
        self, key: str, parts: Mapping[str, Any], slot: Path, label: str
    ) -> Origin | str | None:
        """The published build of ``key`` checked and copied into ``slot`` (this host's cache
        folder): its origin; why it was rejected; None when nothing is published (or the cache
        cannot be read)."""
        if self.dead is not None:
            return None
        record = self._read_record(key)
        if record is None:
            return None
        if isinstance(record, str):
            why: str | None = record
        else:
            why = self._check_record(record, parts) or self._copy_wheel(key, record, slot, parts)
        if why is not None or isinstance(record, str):
            events.emit("warn", f"{label}: the build cache's wheel for this key is not used: {why}")
            return why or "rejected"
        origin = Origin(
            "build cache",
            str(record.get("built_on") or "?"),
            str(record.get("built_at") or "?"),
            self.shown,
        )
        atomic_write_json(slot / "result.json", {**record, "origin": origin.to_json()})
        return origin

    def _read_record(self, key: str) -> dict[str, Any] | str | None:
        where = f"wheels/{key[:32]}/result.json"
        data = self._read(where)
        if data is None:
            return None
        try:
            record = json.loads(data)
        except ValueError:
            return f"its build record ({where}) is not valid JSON: rebuilt"
        if not isinstance(record, dict) or not isinstance(record.get("parts"), dict):
            return f"its build record ({where}) has no key parts: rebuilt"
        return record

    @staticmethod
    def _check_record(record: Mapping[str, Any], parts: Mapping[str, Any]) -> str | None:
        ours = json.loads(json.dumps(parts))
        if record["parts"] != ours:
            differ = key_differences(record["parts"], ours)
            return f"its key differs from this host's ({'; '.join(differ)}): rebuilt"
        wheel = record.get("wheel")
        if not isinstance(wheel, str) or "/" in wheel or not wheel.endswith(".whl"):
            return "its build record names no wheel: rebuilt"
        if not isinstance(record.get("sha256"), str):
            return "its build record has no sha256: rebuilt"
        return None

    def _copy_wheel(
        self, key: str, record: Mapping[str, Any], slot: Path, parts: Mapping[str, Any]
    ) -> str | None:
        """Copy the wheel into ``slot``, then check the copy (what this host installs)."""
        name, sha = str(record["wheel"]), str(record["sha256"])
        slot.mkdir(parents=True, exist_ok=True)
        dest = slot / name
        part = slot / f".{name}.{secrets.token_hex(4)}"
        try:
            if self.url:
                from envbuild.index.download import HashMismatch, download
                from envbuild.index.net import SourceError

                try:
                    download(f"{self.location}/wheels/{key[:32]}/{quote(name)}", part, sha)
                except HashMismatch:
                    return f"the wheel's bytes do not match its record (sha256 {sha}): corrupt"
                except SourceError as exc:
                    self._give_up(f"does not answer ({exc.message})")
                    return None
            else:
                shutil.copyfile(self.root / "wheels" / key[:32] / name, part)
            got = sha256_file(part)
            if got != sha:
                return (
                    f"the wheel's bytes do not match its record (sha256 {got}, recorded {sha}):"
                    " corrupt, rebuilt"
                )
            inner = _inner_parts(part)
            if inner != json.loads(json.dumps(parts)):
                differ = key_differences(inner or {}, parts) if inner else ["none recorded"]
                return f"the key parts inside the wheel differ ({'; '.join(differ)}): rebuilt"
            part.replace(dest)
            return None
        except OSError as exc:
            return f"cannot copy its wheel: {exc.strerror}"
        finally:
            part.unlink(missing_ok=True)

    def holding(self, sha256s: Iterable[str]) -> dict[str, str]:
        """{sha256: a find-links location (the published entry's folder, or its page over HTTP)}
        for the wheels the cache holds of these sha256s (``by-sha256/``); the installer checks
        each file's hash, so a pointer is only a place to look."""
        out: dict[str, str] = {}
        for sha in sha256s:
            if self.dead is not None:
                break
            pointer = self._read(f"by-sha256/{sha}.json")
            try:
                slot = json.loads(pointer)["slot"] if pointer else None
            except (ValueError, KeyError, TypeError):
                slot = None
            if isinstance(slot, str) and slot.isalnum():
                out[sha] = (
                    f"{self.location}/wheels/{slot}/index.html"
                    if self.url
                    else str(self.root / "wheels" / slot)
                )
        return out

    def _read(self, where: str) -> bytes | None:
        """A file of the cache; None when it is not there (or the cache cannot be read)."""
        try:
            if not self.url:
                return (self.root / where).read_bytes()
            from envbuild.index.client import read_optional
            from envbuild.index.net import SourceError

            try:
                return read_optional(f"{self.location}/{where}")
            except SourceError as exc:
                self._give_up(f"does not answer ({exc.message})")
                return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._give_up(f"cannot read {where}: {exc.strerror}")
            return None

    # ------------------------------------------------------------------------- one builder per key

    @contextlib.contextmanager
    def turn(self, key: str, parts: Mapping[str, Any], label: str, slot: Path) -> Iterator[Turn]:
        """This host's turn for ``key`` (see the module docstring); the lease, if taken, is held
        until the block ends (the build and its publication)."""
        t = Turn(self, key, label)
        found = self.fetch(key, parts, slot, label)
        if isinstance(found, Origin):
            t.taken = found
            yield t
            return
        t.replace = isinstance(found, str)
        held = None if self.read_only or self.dead else self._wait_or_take(t, parts, slot)
        try:
            yield t
        finally:
            if held is not None:
                held.release()

    def _wait_or_take(self, t: Turn, parts: Mapping[str, Any], slot: Path) -> leases.Lease | None:
        path = self.root / "leases" / f"{t.key[:32]}.lease"
        watch = leases.Watch(path, self.stale_s)
        entry = self.root / "wheels" / t.key[:32] / "result.json"
        seen_entry = _identity(entry)
        said = -_SAY_S
        t0 = time.monotonic()
        while True:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                got = leases.take(path)
            except OSError as exc:
                self._no_writes(f"cannot take a lease in {path.parent} ({exc.strerror})")
                return None
            if got is None and watch.look() == "stale":
                got = self._take_over(path, watch, t.label)
            if got is not None:
                # published between the first look and the lease: take it
                if _identity(entry) != seen_entry and self._taken(t, parts, slot):
                    got.release()
                    return None
                t.may_publish = True
                return got
            if _identity(entry) not in (seen_entry, None):
                seen_entry = _identity(entry)
                if self._taken(t, parts, slot):
                    return None
            waited = time.monotonic() - t0
            if waited >= self.wait_s:
                events.emit(
                    "warn",
                    f"{t.label}: waited {waited:.0f} s for {_holder(watch)}'s build of this key"
                    f" (ENVBUILD_BUILD_CACHE_WAIT={self.wait_s:g}): building here",
                )
                t.may_publish = True
                return None
            if waited - said >= _SAY_S and watch.holder is not None:
                said = waited
                events.emit(
                    "info",
                    f"{t.label}: building on {watch.holder.shown} for"
                    f" {watch.holder.elapsed_s:.0f} s (its clock); waiting here {waited:.0f} s",
                    waiting_for=watch.holder.host,
                )
            time.sleep(_POLL_S)

    def _taken(self, t: Turn, parts: Mapping[str, Any], slot: Path) -> bool:
        found = self.fetch(t.key, parts, slot, t.label)
        if isinstance(found, Origin):
            t.taken = found
            return True
        t.replace = t.replace or isinstance(found, str)
        return False

    def _take_over(self, path: Path, watch: leases.Watch, label: str) -> leases.Lease | None:
        holder = watch.holder
        why = (
            "its process is gone"
            if holder is not None and holder.dead_here()
            else f"its heartbeat has not moved for {watch.quiet_s:.0f} s"
        )
        got = leases.take_over(path, holder)
        if got is not None:
            events.emit(
                "warn",
                f"{label}: took over the build lease of {_holder(watch)} ({why}): building here",
            )
        return got

    # ------------------------------------------------------------------------- publishing

    def offer(self, key: str, slot: Path, label: str) -> None:
        """Publish a build this host had in its own cache where the shared one lacks it."""
        if self.read_only or self.dead:
            return
        if _identity(self.root / "wheels" / key[:32] / "result.json") is None:
            self.publish(key, slot, label, replace=False)

    def publish(self, key: str, slot: Path, label: str, *, replace: bool) -> None:
        """Publish the build in ``slot`` (its wheel and ``result.json``) under ``key``: written
        aside, fsynced, renamed into place. A failure is a warning: the wheel is installed here."""
        try:
            record = json.loads((slot / "result.json").read_text())
            done = self._publish(key, slot, record, replace=replace)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            events.emit("warn", f"{label}: not published to the build cache {self.shown}: {why}")
            return
        if done:
            events.emit("info", f"{label}: published to the build cache {self.shown}")

    def _publish(self, key: str, slot: Path, record: dict[str, Any], *, replace: bool) -> bool:
        """False: another host published this key first (and ``replace`` is not asked)."""
        token = secrets.token_hex(8)
        tmp = self.root / "tmp" / f"{key[:32]}.{token}"
        tmp.mkdir(parents=True)
        try:
            record = {k: v for k, v in record.items() if k != "origin"}
            wheel = str(record["wheel"])
            _copy_synced(slot / wheel, tmp / wheel)
            (tmp / "result.json").write_text(json.dumps(record, indent=2, sort_keys=True))
            (tmp / "index.html").write_text(
                f'<a href="{escape(quote(wheel))}#sha256={record["sha256"]}">{escape(wheel)}</a>\n'
            )
            for f in ("result.json", "index.html"):
                _fsync(tmp / f)
            _fsync(tmp)
            final = self.root / "wheels" / key[:32]
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp, final)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                if not replace:
                    return False
                old = self.root / "tmp" / f"{key[:32]}.old.{token}"
                os.rename(final, old)
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            _fsync(final.parent)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        pointer = self.root / "by-sha256" / f"{record['sha256']}.json"
        atomic_write_json(pointer, {"slot": key[:32], "wheel": wheel})
        return True


def _inner_parts(wheel: Path) -> dict[str, Any] | None:
    """The key parts the wheel's own provenance record keeps."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next(
                (n for n in zf.namelist() if n.endswith(f".dist-info/{PROVENANCE_FILE}")), None
            )
            if name is None:
                return None
            parts = json.loads(zf.read(name)).get("build", {}).get("key_parts")
    except (OSError, ValueError, zipfile.BadZipFile, AttributeError):
        return None
    return parts if isinstance(parts, dict) else None


def _identity(path: Path) -> tuple[int, int] | None:
    """A published entry's record, as this host sees it now. The folder above is listed first: an
    open of a folder revalidates it on NFS (close-to-open), so an entry another host published is
    seen at once rather than after the client's attribute cache times out."""
    with contextlib.suppress(OSError):
        os.listdir(path.parent.parent)
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _holder(watch: leases.Watch) -> str:
    return watch.holder.shown if watch.holder is not None else "another host"


def _copy_synced(src: Path, dest: Path) -> None:
    shutil.copyfile(src, dest)
    _fsync(dest)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
