"""Mirror every locked artifact into a wheelhouse folder.

Input is a list of ``Artifact`` (name, version, url, sha256). Hash-pinned requirement files
(pip-compile ``--generate-hashes``) carry hashes but no URLs, so ``resolve`` fetches each
project's page from the lock's indexes (PEP 691 JSON when offered, PEP 503 HTML otherwise) and
find-links, and keeps the files whose sha256 is pinned.

Downloads go through the one downloader (``index.download``): the sha256 is checked against the
lock (a mismatching file is deleted, and the error names the URL and both hashes), transient
failures are retried by ``index.net``'s rule within its deadline, an interrupted download
resumes from its ``.partial`` file with an HTTP Range request, and several files download in
parallel. URLs may carry credentials (``https://user:token@host/simple``): they are used, and
only ``redact``-ed forms are shown or written.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from envbuild import events
from envbuild._io import atomic_write_json, sha256_file
from envbuild.errors import LockError, WheelhouseError
from envbuild.index.client import TIMEOUT, Artifact, ArtifactFinder, Sources, session
from envbuild.index.download import download
from envbuild.index.net import SourceError, redact
from envbuild.index.wheeltags import fits_tag_filter, fits_target, select_target
from envbuild.spec.stepfile import parse_requirements, read_text
from envbuild.stacklock.model import MANIFEST, read_stack_lock

if TYPE_CHECKING:
    import requests


__all__ = [
    "Artifact",
    "LockSources",
    "MirrorPackage",
    "MirrorResult",
    "fits_target",
    "lock_sources",
    "manifest_artifacts",
    "mirror",
    "read_requirements",
    "resolve",
    "select",
    "select_target",
    "sizes",
]


@dataclass(frozen=True)
class MirrorPackage:
    name: str
    version: str
    hashes: tuple[str, ...]
    url: str | None = None  # a direct reference (name @ URL)
    source: str = ""  # the lock file it came from


@dataclass
class LockSources:
    packages: list[MirrorPackage] = field(default_factory=list)
    indexes: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MirrorResult:
    downloaded: tuple[Path, ...]
    present: tuple[Path, ...]
    manifest: Path


# ----------------------------------------------------------------------------- lock input


def read_requirements(path: Path, into: LockSources | None = None) -> LockSources:
    """Parse a hash-pinned requirements file (pip-compile output) into packages and sources.

    The lock's own parser (``envbuild.spec.stepfile``) reads it, here also accepting the index and
    find-links option lines a hand-made pip-compile file carries.
    """
    out = into or LockSources()
    try:
        parsed = parse_requirements(read_text(path, "requirements file"), str(path), options=True)
    except LockError as exc:
        raise WheelhouseError(exc.message, hint=exc.hint) from exc
    for u in parsed.index_urls:
        _add(out.indexes, u)
    for u in parsed.find_links:
        _add(out.find_links, u)
    for r in parsed.reqs:
        if r.url is None and r.version is None:
            raise WheelhouseError(
                f"{path}:{r.line}: not an exact pin (name==version): {redact(r.raw)}"
            )
        if not r.hashes:
            raise WheelhouseError(
                f"{path}:{r.line}: {r.name} has no --hash; the mirror needs a hash-pinned lock"
            )
        out.packages.append(MirrorPackage(r.name, r.version or "", r.hashes, r.url, path.name))
    return out


def lock_sources(lock_dir: Path) -> LockSources:
    """Every ``*.txt`` requirement file of a lock folder (``lockfiles/<profile>/``)."""
    files = sorted(lock_dir.glob("*.txt"))
    if not files:
        raise WheelhouseError(
            f"{lock_dir}: no hash-pinned requirement files (*.txt) in the lock",
            hint="Run `envbuild lock --profile NAME` first.",
        )
    sources = LockSources()
    for f in files:
        read_requirements(f, sources)
    return sources


def manifest_artifacts(lock_dir: Path) -> tuple[list[Artifact], LockSources]:
    """Artifacts with URLs from ``lock.json`` (``envbuild lock``), and what is left to resolve.

    A package whose recorded URLs are missing or redacted (credentials were in the index URL)
    goes to ``resolve`` with its step's sources; pass the credentialed ``--index-url`` then.
    A broken ``lock.json`` is a ``LockError`` (exit 8) naming the bad key.
    """
    lock = read_stack_lock(lock_dir)
    if lock is None:
        raise WheelhouseError(
            f"{lock_dir / MANIFEST}: no lock manifest there", hint="Run `envbuild lock` first."
        )
    artifacts: list[Artifact] = []
    rest = LockSources()
    for step in lock.steps:
        if not step.locked:
            events.emit(
                "warn", f"{lock.path}: step {step.name!r} is not locked; nothing to mirror for it"
            )
            continue
        src = step.sources
        for pkg in step.packages:
            # a git or direct-URL pin: built into a wheel (``wheelhouse.vcsbuild``)
            if pkg.vcs is not None:
                continue
            usable = [a for a in pkg.artifacts if a.url and "***@" not in a.url and a.sha256]
            artifacts.extend(usable)
            if not usable:
                rest.packages.append(
                    MirrorPackage(
                        canonicalize_name(pkg.name),
                        pkg.version or "",
                        pkg.hashes,
                        None,
                        step.file or "",
                    )
                )
                for u in [src.index_url, *src.extra_index_urls]:
                    if u and "***@" not in u:
                        _add(rest.indexes, u.rstrip("/"))
                for u in src.find_links:
                    if "***@" not in u:
                        _add(rest.find_links, u)
    return artifacts, rest


def _add(items: list[str], value: str) -> None:
    if value and value not in items:
        items.append(value)


# ----------------------------------------------------------------------------- resolution


def resolve(
    sources: LockSources, *, extra_indexes: Sequence[str] = (), http: requests.Session | None = None
) -> list[Artifact]:
    """An ``Artifact`` per pinned hash found on the lock's indexes and find-links
    (``index.ArtifactFinder``)."""
    http = http or session()
    indexes = tuple(dict.fromkeys([*extra_indexes, *sources.indexes]))
    links = ArtifactFinder(Sources((), tuple(sources.find_links)), http=http)
    artifacts: list[Artifact] = []
    unresolved: list[str] = []
    for pkg in sources.packages:
        wanted = set(pkg.hashes)
        if pkg.url:
            artifacts.append(
                Artifact(
                    unquote(urlsplit(pkg.url).path.rsplit("/", 1)[-1]),
                    pkg.url.split("#")[0],
                    pkg.hashes[0],
                )
            )
            continue
        found = {a.sha256: a for a in links.matching(pkg.name, None, wanted)}
        for index in indexes:
            if wanted <= found.keys():
                break
            on_index = ArtifactFinder(Sources((index,)), http=http).matching(pkg.name, None, wanted)
            for a in on_index:
                found.setdefault(a.sha256, a)
        if not found:
            where = (
                ", ".join(redact(u) for u in [*indexes, *sources.find_links])
                or "no index configured"
            )
            unresolved.append(
                f"{pkg.name}=={pkg.version} ({pkg.source}): none of its {len(wanted)} "
                f"pinned files is on {where}"
            )
        for sha in sorted(wanted - found.keys()):
            events.emit(
                "debug",
                f"{pkg.name}=={pkg.version}: pinned sha256 {sha[:16]}... not found on any index",
            )
        artifacts.extend(found.values())
    if unresolved:
        raise WheelhouseError(
            "cannot locate locked artifacts:\n" + "\n".join(f"  {u}" for u in unresolved),
            hint=(
                "A nightly may have left its index: mirror while it is there, or add a --index-url"
                " that still has it."
            ),
        )
    return artifacts


# ----------------------------------------------------------------------------- download


def sizes(
    artifacts: Iterable[Artifact], *, http: requests.Session | None = None, jobs: int = 8
) -> dict[str, int | None]:
    """{filename: bytes} of artifacts not downloaded (a HEAD request each; None where unknown)."""
    http = http or session()

    def size(a: Artifact) -> int | None:
        if a.local_path is not None:
            try:
                return a.local_path.stat().st_size
            except OSError:
                return None
        try:
            resp = http.head(a.url, allow_redirects=True, timeout=TIMEOUT)
        except Exception:  # noqa: BLE001 - a size is a figure for the report, never a failure
            return None
        length = resp.headers.get("Content-Length", "")
        return int(length) if resp.status_code < 400 and length.isdigit() else None

    todo = list(artifacts)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(zip((a.filename for a in todo), pool.map(size, todo), strict=True))


def select(
    artifacts: Iterable[Artifact], python: str | None = None, platform: str | None = None
) -> list[Artifact]:
    """Keep wheels for one interpreter tag (``cp313``) and platform glob (``manylinux*_x86_64``)."""
    kept = []
    for a in artifacts:
        name = a.filename or ""
        if name.endswith(".whl") and not fits_tag_filter(name, python, platform):
            continue
        kept.append(a)
    return kept


# ----------------------------------------------------------------------------- download


def mirror(
    artifacts: Sequence[Artifact], out: Path, *, jobs: int = 4, deadline: float | None = None
) -> MirrorResult:
    """Download every artifact into ``out`` (``index.download``: its retries; ``deadline``: the
    seconds a file may go without progress, default ``ENVBUILD_NET_DEADLINE`` or 30); errors are
    collected and raised together at the end."""
    out.mkdir(parents=True, exist_ok=True)
    http = session()
    todo: list[Artifact] = []
    present: list[Path] = []
    seen: set[tuple[str, str]] = set()
    for a in artifacts:
        if (a.filename, a.sha256 or "") in seen:  # one file locked by two steps: one download
            continue
        seen.add((a.filename, a.sha256 or ""))
        if not a.url or not a.sha256:
            raise WheelhouseError(f"{a.filename}: no URL or sha256 (resolve it first)")
        dest = out / a.filename
        if dest.is_file() and sha256_file(dest) == a.sha256:
            present.append(dest)
        else:
            todo.append(a)
    lock = threading.Lock()
    errors: list[str] = []
    downloaded: list[Path] = []

    def one(a: Artifact) -> Path:
        assert a.sha256 is not None
        last = [0.0]

        def on_bytes(done: int, total: int | None) -> None:
            now = time.monotonic()
            if now - last[0] > 0.1 or (total is not None and done >= total):
                last[0] = now
                events.emit(
                    "debug",
                    f"{a.filename} {done}/{total}",
                    download=a.filename,
                    completed=done,
                    total=total,
                )

        try:
            return download(
                a.url, out / a.filename, a.sha256, http=http, deadline=deadline, on_bytes=on_bytes
            )
        except SourceError as exc:
            raise WheelhouseError(exc.message, hint=exc.hint) from exc

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(one, a): a for a in todo}
        for fut in as_completed(futures):
            a = futures[fut]
            try:
                path = fut.result()
            except WheelhouseError as exc:
                with lock:
                    errors.append(str(exc).replace("\n", " "))
                events.emit(
                    "fail", f"{a.filename}: {exc.message}", download=a.filename, failed=True
                )
                continue
            with lock:
                downloaded.append(path)
            events.emit("ok", f"{a.filename}", download=a.filename, done=True)
    manifest = out / "wheelhouse.json"
    _write_manifest(manifest, artifacts, out)
    if errors:
        raise WheelhouseError(
            f"{len(errors)} of {len(artifacts)} artifacts failed to mirror:\n"
            + "\n".join(f"  {e}" for e in errors),
            hint="Good files are kept; run the mirror again to retry the rest.",
        )
    return MirrorResult(tuple(downloaded), tuple(present), manifest)


def _write_manifest(path: Path, artifacts: Sequence[Artifact], out: Path) -> None:
    existing: dict[str, Any] = {}
    kept: dict[str, Any] = {}  # what other writers record beside the artifacts (lock builds)
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
            existing = {a["filename"]: a for a in doc.get("artifacts", [])}
            kept = {k: v for k, v in doc.items() if k not in ("schema", "artifacts")}
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            existing = {}
    for a in artifacts:
        if (out / a.filename).is_file():
            existing[a.filename] = {
                "name": a.project or "",
                "version": a.version or "",
                "filename": a.filename,
                "sha256": a.sha256,
                "size": (out / a.filename).stat().st_size,
                "url": redact(a.url or ""),
            }
    rows = sorted(existing.values(), key=lambda x: x["filename"])
    atomic_write_json(path, {"schema": 1, "artifacts": rows, **kept})
