"""A stack's (or requirement files') every locked file mirrored into one folder, its git pins built.

``envbuild wheelhouse mirror`` without ``--lock FILE``: read the lock (``lock.json``'s recorded
URLs, else the step files, else the requirement files given), resolve the pins that have no URL on
their indexes, keep the files for the lock's target (or the tags asked for, or all), download them
hash-checked, build the git/URL pins into wheels, and write the PEP 503 pages. The command prints
the returned ``StackMirror``; nothing here prints.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envbuild import events
from envbuild.errors import PreflightError
from envbuild.index.net import redact
from envbuild.installer import find_python
from envbuild.run import run
from envbuild.spec import DEFAULT_PLATFORM, profile_path
from envbuild.stacklock.model import Lock, read_stack_lock
from envbuild.wheelhouse import mirror as m
from envbuild.wheelhouse.pages import write_index
from envbuild.wheelhouse.vcsbuild import Built, build_vcs_wheels, vcs_packages


@dataclass(frozen=True)
class StackMirrorRequest:
    """What to mirror: ``requirements`` files, else the lock in ``lock_dir``, else ``profile``'s."""

    out: Path
    lock_dir: Path | None = None
    profile: str | None = None
    requirements: Sequence[Path] = ()
    index_urls: Sequence[str] = ()  # searched besides the lock's own indexes
    python_tag: str | None = None  # with platform: the files for these tags only
    platform: str | None = None
    all_platforms: bool = False  # every file, for every Python and platform
    python: Path | None = None  # the interpreter that builds git pins (default: the lock's Python)
    jobs: int = 4
    deadline: float | None = None  # seconds a file may go without progress (index.net's rule)


@dataclass(frozen=True)
class StackMirror:
    """What one mirror run did: the files downloaded or already there, the index, the target the
    files were chosen for and what it left out (with the bytes that saved), and the git pins built.
    """

    out: Path
    result: m.MirrorResult
    index: Path  # the PEP 503 root (``<out>/simple``)
    # (python, platform) the files were chosen for; None: not by target
    target: tuple[str, str] | None
    left_out: tuple[str, ...] = ()
    bytes_saved: int = 0
    bytes_unknown: int = 0  # left-out files whose size the index did not say
    bytes_mirrored: int = 0
    built: tuple[Built, ...] = field(default_factory=tuple)


def mirror_stack(req: StackMirrorRequest) -> StackMirror:
    known: list[m.Artifact] = []
    lock: Lock | None = None
    if req.requirements:
        sources = m.LockSources()
        for f in req.requirements:
            m.read_requirements(f, sources)
    else:
        lock_dir = req.lock_dir or profile_path(req.profile or "cpu").parent
        if (lock_dir / "lock.json").is_file():
            known, sources = m.manifest_artifacts(lock_dir)  # URLs recorded by `envbuild lock`
            lock = read_stack_lock(lock_dir)
        else:
            sources = m.lock_sources(lock_dir)
    resolved: list[m.Artifact] = []
    if sources.packages:
        where = [*req.index_urls, *sources.indexes, *sources.find_links]
        events.emit(
            "step",
            f"resolving {len(sources.packages)} locked packages on "
            f"{', '.join(redact(u) for u in where) or 'no index'}",
        )
        resolved = m.resolve(sources, extra_indexes=req.index_urls)
    # a file two steps lock
    everything = list({(a.filename, a.sha256): a for a in [*known, *resolved]}.values())
    target: tuple[str, str] | None = None
    left: list[m.Artifact] = []
    if req.python_tag or req.platform:
        artifacts = m.select(everything, req.python_tag, req.platform)
    elif req.all_platforms or lock is None:
        artifacts = everything
        if lock is None and not req.all_platforms:
            events.emit(
                "info", "no lock.json: every locked file is mirrored, for every Python and platform"
            )
    else:
        target = _target_of(lock)
        artifacts, left = m.select_target(everything, *target)
    events.emit(
        "step",
        f"mirroring {len(artifacts)} artifacts into {req.out}"
        + (
            f" (for Python {target[0]} on {target[1]}; {len(left)} files for other targets left"
            " out)"
            if target
            else ""
        ),
    )
    # bars: the front end's display
    result = m.mirror(artifacts, req.out, jobs=req.jobs, deadline=req.deadline)
    built: list[Built] = []
    if lock is not None and (vcs := vcs_packages(lock)):
        python = req.python or _builder(lock.python or "")
        built = build_vcs_wheels(lock, req.out, python=python, target=target or _target_of(lock))
        events.emit(
            "info",
            f"{len(vcs)} git/URL requirement(s): {sum(1 for b in built if not b.reused)} built, "
            f"{sum(1 for b in built if b.reused)} already in the wheelhouse",
        )
    saved = m.sizes(left) if left else {}
    index = write_index(req.out)
    mirrored = sum(
        (req.out / a.filename).stat().st_size
        for a in {a.filename: a for a in artifacts}.values()
        if (req.out / a.filename).is_file()
    )
    return StackMirror(
        out=req.out,
        result=result,
        index=index.root / "simple",
        target=target,
        left_out=tuple(sorted(a.filename for a in left)),
        bytes_saved=sum(v for v in saved.values() if v is not None),
        bytes_unknown=sum(1 for v in saved.values() if v is None),
        bytes_mirrored=mirrored,
        built=tuple(built),
    )


def _target_of(lock: Lock) -> tuple[str, str]:
    return (
        lock.target.get("python") or lock.python or "",
        lock.target.get("platform") or DEFAULT_PLATFORM,
    )


def _builder(version: str) -> Path:
    """The lock's Python to build git requirements with, else this one (a pure-Python wheel is the
    same from any 3.x; ``build_vcs_wheels`` refuses a wheel that does not fit the target)."""
    try:
        python = find_python(version)
        if run([str(python), "-m", "pip", "--version"], capture=True, timeout=60).ok:
            return python
    except PreflightError:
        pass
    events.emit(
        "info",
        f"no Python {version} with pip here: git requirements are built with {sys.executable}",
    )
    return Path(sys.executable)
