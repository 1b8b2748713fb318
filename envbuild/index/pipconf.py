"""What pip is configured with (pip.conf and ``PIP_*``), as pip itself reads it: the sources (index,
extra indexes, find-links) and the network settings (``cert``, ``client-cert``, ``proxy``).

``pip config list`` imports pip (half a second, more on a loaded host): its answer is kept in the
cache folder under a key of everything it reads (``_config_key``), and asked again when any of it
changes; never written down when a value carries credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envbuild._io import atomic_write_json
from envbuild.index.redaction import redact

__all__ = ["KEYS", "PipNetwork", "pip_config_values", "pip_network"]

KEYS = ("index-url", "extra-index-url", "find-links", "cert", "client-cert", "proxy")
_READER = 3  # how ``_ask_pip`` reads the listing: a change makes every cached answer stale
# `pip config list` names PIP_* ":env:"
_SECTION_RANK = {"global": 0, "install": 1, "download": 1, ":env:": 2}


@dataclass(frozen=True)
class PipNetwork:
    """pip's own TLS and proxy settings: what envbuild's HTTP client uses too (``index.http``)."""

    cert: str | None = None  # a CA bundle: the only trust (pip's --cert)
    # a PEM with the client's key and certificate (pip's --client-cert)
    client_cert: str | None = None
    proxy: str | None = None  # scheme://[user:passwd@]proxy.server:port (pip's --proxy)


def _config_key(env: Mapping[str, str]) -> str:
    """What ``pip config list`` depends on: the ``PIP_*`` and XDG variables, the interpreter and
    pip, and the state (mtime, size) of every file pip documents that it reads
    (https://pip.pypa.io/en/stable/topics/configuration/). Only a cache key: pip still parses."""
    home = Path(env.get("HOME") or Path.home())
    files = [
        env.get("PIP_CONFIG_FILE") or "",
        "/etc/pip.conf",
        str(Path(sys.prefix) / "pip.conf"),
        str(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"),
        str(home / ".pip" / "pip.conf"),
        str(home / "Library" / "Application Support" / "pip" / "pip.conf"),
    ]
    files += [
        str(Path(d) / "pip" / "pip.conf")
        for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
        if d
    ]
    state = []
    for f in files:
        try:
            st = os.stat(f) if f else None
            state.append(f"{f}:{st.st_mtime_ns}:{st.st_size}" if st else f"{f}:-")
        except OSError:
            state.append(f"{f}:missing")
    variables = sorted(
        (k, v)
        for k, v in env.items()
        if k.startswith(("PIP_", "XDG_")) or k in ("HOME", "VIRTUAL_ENV")
    )
    pip = next(iter(Path(sys.prefix).glob("lib/python3*/site-packages/pip-*.dist-info")), None)
    return hashlib.sha256(
        json.dumps([_READER, sys.executable, str(pip), state, variables]).encode()
    ).hexdigest()


KEPT_ANSWERS = 32  # pip's answers kept, one file per key: the newest ones


def _cache_folder() -> Path:
    from envbuild.index.metacache import (
        cache_dir,  # the one cache folder ($ENVBUILD_CACHE_DIR, else XDG)
    )

    return cache_dir() / "pip-config"


def _cache_file(key: str) -> Path:
    """The answer for one key: a run under other variables (a test, cron, another shell) keeps its
    own file rather than putting the next run back to asking pip."""
    return _cache_folder() / f"{key[:32]}.json"


def _prune(folder: Path) -> None:
    """Keep the ``KEPT_ANSWERS`` newest answers."""
    with contextlib.suppress(OSError):
        kept = sorted(folder.glob("*.json"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
        for old in kept[KEPT_ANSWERS:]:
            old.unlink(missing_ok=True)


def pip_config_values(env: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """{key: its words} of ``KEYS`` as pip resolves them (PIP_* over [install] over [global])."""
    key = _config_key(os.environ if env is None else env)
    cache = _cache_file(key)
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
        doc = json.loads(cache.read_text(encoding="utf-8"))
        if doc.get("key") == key and isinstance(doc.get("values"), dict):
            return {k: [str(x) for x in v] for k, v in doc["values"].items()}
    values = _ask_pip(env)
    if any(redact(w) != w for words in values.values() for w in words):
        return values  # a value with credentials is never written down: ask pip every time
    with contextlib.suppress(OSError):
        atomic_write_json(cache, {"key": key, "values": values}, private=True)
    _prune(cache.parent)
    return values


def _ask_pip(env: Mapping[str, str] | None) -> dict[str, list[str]]:
    try:  # subprocess, not envbuild.run: the runner sits above the package sources
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=30,
            env=None if env is None else dict(env),
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    ranked: dict[str, tuple[int, list[str]]] = {}
    pattern = re.compile(r"^([^.]*)\.(" + "|".join(map(re.escape, KEYS)) + r")='(.*)'$")
    for line in (out.stdout if out.returncode == 0 else "").splitlines():
        m = pattern.match(line.strip())
        if m:
            section, name, raw = m.groups()
            rank = _SECTION_RANK.get(section, -1)
            if rank >= 0 and rank >= ranked.get(name, (-1, []))[0]:
                ranked[name] = (rank, raw.split())
    return {k: words for k, (_, words) in ranked.items()}


def pip_network(env: Mapping[str, str] | None = None) -> PipNetwork:
    values = pip_config_values(env)

    def one(key: str) -> str | None:
        words = values.get(key) or []
        return words[0] if words else None

    return PipNetwork(cert=one("cert"), client_cert=one("client-cert"), proxy=one("proxy"))
