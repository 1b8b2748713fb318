"""The metadata cache: a distribution's ``Requires-Dist``, by the sha256 of the artifact it was
read from (``$ENVBUILD_CACHE_DIR/metadata/<sha256>.json``). Light on purpose: ``check-lock`` reads
it on every run (offline too) and must not pay for the index client (``envbuild.index.client``) to
do so.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["cache_dir", "cached_requires", "get", "put"]


def cache_dir() -> Path:
    if env := os.environ.get("ENVBUILD_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuild"


def get(sha: str | None) -> list[str] | None:
    if not sha:
        return None
    path = cache_dir() / "metadata" / f"{sha}.json"
    try:
        data = json.loads(path.read_text())
        return [str(r) for r in data["requires_dist"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def put(sha: str | None, reqs: Sequence[str]) -> None:
    if not sha:
        return
    from envbuild._io import atomic_write_json

    with contextlib.suppress(OSError):  # a read-only cache only costs speed
        atomic_write_json(
            cache_dir() / "metadata" / f"{sha}.json", {"requires_dist": list(reqs)}, durable=False
        )


def cached_requires(hashes: Iterable[str]) -> list[str] | None:
    for h in hashes:
        got = get(h)
        if got is not None:
            return got
    return None
