"""``file-overlap``: two packages an environment installs own the same file.

What a locked wheel installs is its RECORD (``index.records``: the one reader and its cache by
sha256), read here from the cache, a local wheel, or online from the wheel's URL by HTTP Range
requests (kilobytes, not the wheel). Per environment, the paths two of its wheels both install
(other bytes; ``index.records.find_overlaps``) are:

- a finding where one owner is torch or its protected runtime (the policy's package and
  ``--protect``, torch's ``nvidia-*`` and triton dependencies, any triton): the other package
  overwrites torch's files (``provision --lock`` refuses it before installing);
- a note otherwise (``opencv-python`` beside ``opencv-python-headless``: one ``cv2`` wins, and
  uv's winner is a race).

Offline, only the cache is read (``provision --lock`` fills it with what it prepared), and the
wheels it could not read are said in a note; an sdist, a git or folder source has no RECORD before
it is built and is not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from packaging.utils import canonicalize_name

from envbuild.gate.context import Context, View
from envbuild.gate.model import Entry
from envbuild.index import records
from envbuild.index.wheeltags import installs_on

__all__ = ["RULE", "check"]

RULE = "file-overlap"
WORKERS = 8  # remote RECORD reads in flight


def _wheel(entry: Entry, view: View) -> tuple[str, str | None] | None:
    """(URL or file name, sha256) of the wheel of ``entry`` that installs in ``view``."""
    for url, sha in entry.files:
        name = url.split("#", 1)[0].split("?", 1)[0]
        if name.endswith(".whl") and installs_on(name, view.env.python, view.env.platform):
            return url, sha
    if entry.url and entry.url.split("#", 1)[0].endswith(".whl"):
        return entry.url, entry.hashes[0] if entry.hashes else None
    return None


def _protected(ctx: Context, view: View) -> set[str]:
    names = set(ctx.policy.protected) | {"triton", "pytorch-triton", "pytorch-triton-rocm"}
    for dep in (view.torch.dependencies or ()) if view.torch is not None else ():
        n = canonicalize_name(dep)
        if n.startswith("nvidia-") or "triton" in n:
            names.add(n)
    return names


def _read(ctx: Context, url: str, sha: str | None) -> dict[str, str] | None:
    """The files of one wheel: the cache, a local file, else (online) its URL by ranges."""
    from envbuild.errors import EnvbuildError

    cached = records.get(sha)
    if cached is not None or ctx.offline:
        return cached
    if url.startswith("file:"):
        from pathlib import Path
        from urllib.parse import unquote, urlsplit

        return records.local_record(Path(unquote(urlsplit(url).path)), sha)
    if not url.startswith(("http://", "https://")) or not ctx.sources.reachable(url):
        return None
    from envbuild.index.client import TIMEOUT, session

    try:
        return records.remote_record(url, sha, http=session(), timeout=TIMEOUT)
    except (EnvbuildError, OSError, ValueError):
        return None


def _wanted(ctx: Context) -> Iterator[tuple[View, Entry, tuple[str, str | None]]]:
    for view in ctx.views:
        for entry in view.members.entries:
            wheel = _wheel(entry, view)
            if wheel is not None:
                yield view, entry, wheel


def check(ctx: Context) -> None:
    wanted = list(_wanted(ctx))
    files = {w for _, _, w in wanted}
    if any(records.get(sha) is None for _, sha in files) and not ctx.offline:
        for url, _ in files:  # one probe per host, before the reads run side by side
            if url.startswith(("http://", "https://")):
                ctx.sources.reachable(url)
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="envbuild-record") as pool:
        read = dict(zip(files, pool.map(lambda w: _read(ctx, *w), files), strict=True))
    unread: list[str] = []
    for view in ctx.views:
        owned = {}
        for v, entry, wheel in wanted:
            if v is not view:
                continue
            rows = read[wheel]
            if rows is None:
                if entry.label() not in unread:
                    unread.append(entry.label())
                continue
            owned[entry.name] = rows
        _judge(ctx, view, owned)
    if unread:
        how = "in the cache" if ctx.offline else "in the cache or by range requests"
        ctx.note(
            f"file overlaps: {len(unread)} wheel(s) not compared, their files could not be read"
            f" {how} (--explain names them)"
        )
        for label in unread:
            ctx.explained(f"{label}: its files (RECORD) could not be read {how}")


def _judge(ctx: Context, view: View, owned: dict[str, dict[str, str]]) -> None:
    protected = _protected(ctx, view)
    entries = {e.name: e for e in view.members.entries}
    for o in records.find_overlaps(owned):
        if o.touches(sorted(protected)):
            others = [p for p in o.packages if p not in protected] or list(o.packages[1:])
            ctx.add(
                others[0],
                RULE,
                f"{o.shown()}: installed with {', '.join(p for p in o.packages if p in protected)}"
                " it overwrites the protected baseline's files (drop it, or accept it with a"
                " reason)",
                env=view.env,
                entry=entries.get(others[0]),
            )
        else:
            ctx.note(
                f"{o.shown()} (in {view.env.name}): one copy overwrites the other; uv's winner is"
                " a race, `provision --lock` installs the last by name last"
            )
