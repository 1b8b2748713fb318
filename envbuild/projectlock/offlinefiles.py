"""A project lock's files offline: ``wheelhouse mirror --lock FILE`` puts them in a wheelhouse,
``provision --lock FILE --offline --wheelhouse DIR`` installs them from it (the build
requirements: ``offlinebuilds``; a stack lock's wheelhouse check: ``provision.offlinecheck``).

The mirror downloads every file the chosen environment installs (the files ``plan --lock``
names, from the URLs the lock records, each checked against the lock's sha256) into a wheelhouse
folder with the layout of envbuild's own mirror (the files side by side, ``wheelhouse.json``,
PEP 503 pages under ``simple/``), so the same folder serves ``--find-links`` and a static server.

The offline provision takes the same stages and installs each file from the wheelhouse by its
path (``name @ file:///wheelhouse/FILE --hash=sha256:...``, ``--no-index``): nothing resolves and
nothing reaches a network. Before stage (a), every file the stages still to run install is
hashed and compared with the sha256 the lock pins (in parallel: hashlib lets go of the GIL). A
file that is not there, or whose bytes are not the lock's, stops the run with exit 5 before the
data root or the venv is made, naming the file (and both hashes).

``--have FILE`` (a ``pip freeze`` or ``pip list --format json`` of the target, a base image's
environment) leaves out what the target already holds at the locked version: ``provision --lock
--venv`` into that environment keeps those packages (their files present), so the wheelhouse a
team carries to it holds only what the image lacks.

A git pin has no file to mirror (installing it clones the repository): the mirror names it, and
an offline provision that still has to install it is refused with it in the list.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envbuild._io import sha256_file
from envbuild.errors import ConfigError, InstallError
from envbuild.projectlock.stages import LockedFile, Placed, StagePlan

__all__ = [
    "LockMirror",
    "check_files",
    "in_wheelhouse",
    "mirror_lock",
    "read_installed",
    "wheelhouse_folder",
    "without_installed",
]


@dataclass(frozen=True)
class LockMirror:
    """What ``mirror_lock`` did: the files downloaded and already there, and what it could not
    mirror."""

    out: Path
    downloaded: tuple[str, ...]
    present: tuple[str, ...]
    not_mirrored: tuple[str, ...]  # "name: why" (git pins)
    index: Path
    bytes: int


def mirror_lock(
    plan: StagePlan, out: Path, *, jobs: int = 4, deadline: float | None = None
) -> LockMirror:
    """Download every file ``plan`` installs into ``out`` (sha256-checked), then index the
    folder."""
    from envbuild.index.client import Artifact
    from envbuild.wheelhouse.mirror import mirror
    from envbuild.wheelhouse.pages import write_index

    files = [p.artifact for p in plan.placed if p.artifact is not None]
    result = mirror(
        [Artifact(a.filename, a.url, a.sha256) for a in files], out, jobs=jobs, deadline=deadline
    )
    index = write_index(out)
    skipped = tuple(
        f"{p.entry.name}: {p.why}; a git pin has no file to mirror (installing it clones the"
        " repository)"
        for p in plan.placed
        if p.artifact is None and p.stage != "project"
    )
    size = sum((out / a.filename).stat().st_size for a in {a.filename: a for a in files}.values())
    return LockMirror(
        out,
        tuple(x.name for x in result.downloaded),
        tuple(x.name for x in result.present),
        skipped,
        index.root / "simple",
        size,
    )


def read_installed(path: Path) -> dict[str, str]:
    """{canonical name: version} of a ``pip freeze`` / ``uv pip freeze`` file or a ``pip list
    --format json`` document; ConfigError (exit 2) for anything else."""
    import json

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--have {path}: cannot read it ({exc})") from exc
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
            return {canonicalize_name(r["name"]): str(r["version"]) for r in rows}
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(
                f"--have {path}: not a `pip list --format json` document ({exc!r})",
                hint="Write it with `python -m pip list --format json` in the target environment.",
            ) from exc
    have: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-e ") or " @ " in line:
            continue  # an editable or a direct URL: no version to compare
        try:
            req = Requirement(line)
        except InvalidRequirement:
            req = None
        pins = [x.version for x in req.specifier if x.operator == "=="] if req else []
        if req is None or len(pins) != 1:
            raise ConfigError(
                f"--have {path}:{n}: {raw.strip()!r} is not a `name==version` line",
                hint=(
                    "Write it with `python -m pip freeze` (or `pip list --format json`) in the "
                    "target environment."
                ),
            )
        have[canonicalize_name(req.name)] = pins[0]
    return have


def without_installed(plan: StagePlan, have: dict[str, str]) -> StagePlan:
    """``plan`` without the packages ``have`` holds at the locked version (what an adopted venv
    keeps)."""
    from packaging.version import InvalidVersion, Version

    def same(a: str, b: str) -> bool:
        try:
            return Version(a) == Version(b)
        except InvalidVersion:
            return a == b

    kept = [
        p
        for p in plan.placed
        if p.stage == "project"
        or p.entry.version is None
        or p.entry.name not in have
        or not same(have[p.entry.name], p.entry.version)
    ]
    return replace(plan, placed=kept)


def wheelhouse_folder(wheelhouse: str) -> Path:
    """The folder of ``--wheelhouse`` (a path or a ``file://`` URL). A wheelhouse served over HTTP
    cannot be hashed before stage (a) without downloading it: refused (exit 2)."""
    parts = urlsplit(wheelhouse)
    if parts.scheme not in ("", "file"):
        raise ConfigError(
            f"--lock --offline: --wheelhouse {wheelhouse} is not a folder; provision --lock"
            " installs offline from a wheelhouse folder, whose every file it hashes before the"
            " first stage",
            hint=(
                "Copy the wheelhouse here (`envbuild wheelhouse mirror --lock FILE --out DIR` makes"
                " it) and give its path."
            ),
        )
    folder = (
        Path(unquote(parts.path) if parts.scheme == "file" else wheelhouse).expanduser().absolute()
    )
    if not folder.is_dir():
        raise ConfigError(
            f"--wheelhouse {wheelhouse}: no such folder",
            hint=(
                "Make it with `envbuild wheelhouse mirror --lock FILE --out DIR` where the lock's "
                "file hosts answer."
            ),
        )
    return folder


def in_wheelhouse(plan: StagePlan, folder: Path) -> StagePlan:
    """``plan`` with every file taken from ``folder`` by its path (``check_files`` proves them
    first)."""
    return replace(
        plan, placed=[_local(p, folder) if p.artifact is not None else p for p in plan.placed]
    )


def check_files(plan: StagePlan, folder: Path, stages: Collection[str]) -> None:
    """The files of ``stages`` (the stages still to run) are in ``folder`` with the sha256 the lock
    pins; InstallError (exit 5) naming each missing or changed file otherwise."""
    missing: list[str] = []
    todo: list[LockedFile] = []
    for p in plan.placed:
        if p.stage not in stages:
            continue
        if p.artifact is None:
            if p.stage != "project":
                missing.append(f"{p.entry.name}: {p.why}; offline it would clone the repository")
            continue
        if not (folder / p.artifact.filename).is_file():
            missing.append(f"{p.entry.name}=={p.entry.version}: {p.artifact.filename}")
        else:
            todo.append(p.artifact)
    where = f"the wheelhouse {folder}"
    lock = plan.chosen.path
    if missing:
        raise InstallError(
            f"--offline: {where} lacks {len(missing)} file(s) that the stages to run install from"
            f" {lock}; nothing was made:\n" + "\n".join(f"  {m}" for m in missing),
            hint=(
                "Mirror them where the lock's file hosts answer: `envbuild wheelhouse mirror"
                f" --lock {lock} --out {folder}` (with the same --extra/--group/--environment),"
                " then bring the folder here."
            ),
        )
    changed = _changed(folder, todo)
    if changed:
        raise InstallError(
            f"--offline: {len(changed)} file(s) in {where} are not the bytes {lock} pins (changed"
            " after the mirror?); nothing was made:\n" + "\n".join(f"  {c}" for c in changed),
            hint=(
                f"Mirror again (`envbuild wheelhouse mirror --lock {lock} --out {folder}` replaces"
                " a file whose hash is wrong), or restore the wheelhouse from a good copy."
            ),
        )


def _changed(folder: Path, files: list[LockedFile]) -> list[str]:
    """``"<file>: the lock pins sha256 <a>, the file has <b>"`` for each file whose bytes differ."""
    names = sorted({f.filename: f.sha256 for f in files}.items())
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        actual = list(pool.map(lambda item: sha256_file(folder / item[0]), names))
    return [
        f"{name}: the lock pins sha256 {want}, the file has {got}"
        for (name, want), got in zip(names, actual, strict=True)
        if got != want
    ]


def _local(p: Placed, folder: Path) -> Placed:
    assert p.artifact is not None
    uri = (folder / p.artifact.filename).as_uri()
    return replace(
        p,
        artifact=replace(p.artifact, url=uri),
        line=f"{p.entry.name} @ {uri} --hash=sha256:{p.artifact.sha256}",
    )
