"""``provision --offline --wheelhouse WH`` of a stack: before step 1, prove the wheelhouse holds
what the stack lock installs (a project lock's files: ``projectlock.offlinefiles``).

For every locked step still to run, each pinned package needs a file in the wheelhouse whose
sha256 the lock pins and that installs on the stack's target (a wheel of its Python and
platform, or an sdist); a git or direct-URL pin needs the wheel ``wheelhouse mirror`` built
from it, with the hash ``lock.json`` records (``vcs.wheel``), since cloning is a network
operation. Anything missing is listed, all of it at once, and the run stops with exit 5
before the data root, the links or the venv are made.

Then the bytes: every file of a folder wheelhouse that the steps to run install is hashed and
compared with the sha256 the lock pins. ``wheelhouse_files`` takes a file's hash from
``wheelhouse.json`` where name and size agree (so listing a wheelhouse costs no hashing), and a
byte changed after the mirror keeps the size: without this, the installer finds it at that
file's step ("Bad CRC", a hash mismatch), after a venv and the steps before it were made. A
file changed is named with both hashes, exit 5, nothing made. A wheelhouse served over HTTP is
checked by the installer (``--require-hashes``/``--verify-hashes``) as it downloads.

The wheelhouse is a folder or a find-links page (``wheeltags.wheelhouse_files``). A new
venv made by the uv backend is seeded (pip, setuptools, wheel) from the wheelhouse too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envbuild._io import sha256_file
from envbuild.errors import InstallError, LockError
from envbuild.index.client import parse_filename
from envbuild.index.net import redact
from envbuild.index.wheeltags import fits_target, wheelhouse_files
from envbuild.plan import PlannedStep
from envbuild.spec import StackSpec
from envbuild.stacklock.model import LockedPackage, read_stack_lock

__all__ = ["check_wheelhouse", "seed_packages"]


def seed_packages(python: str) -> tuple[str, ...]:
    """What ``uv venv --seed`` installs into a new venv of ``python``: pip, and setuptools and
    wheel below 3.12. Offline, it takes them from the wheelhouse."""
    minor = (
        int(python.split(".")[1])
        if python.count(".") >= 1 and python.split(".")[1].isdigit()
        else 12
    )
    return ("pip", "setuptools", "wheel") if minor < 12 else ("pip",)


def check_wheelhouse(
    spec: StackSpec, steps: Iterable[PlannedStep], wheelhouse: str, *, seed: bool = False
) -> None:
    """Raise ``InstallError`` (exit 5) listing every locked artifact of ``steps`` the wheelhouse
    lacks; ``seed``: a new venv is made by ``uv venv --seed``, whose seed packages must be there
    too."""
    locked = [s for s in steps if s.locked_file is not None]
    if not locked and not seed:
        return
    lock = None
    if locked:
        assert locked[0].locked_file is not None
        try:
            lock = read_stack_lock(locked[0].locked_file.parent)
        except LockError:
            lock = None  # the lock itself was checked when it was loaded
    files = wheelhouse_files(wheelhouse)
    python, platform = spec.python, spec.target.platform
    missing: list[str] = []
    # file name -> the sha256 the lock pins for it: its bytes are checked
    pinned: dict[str, str] = {}
    if seed:
        missing += _missing_seeds(files, python, platform)
    for planned in locked:
        entry = lock.step(planned.name) if lock is not None else None
        for p in entry.packages if entry is not None else ():
            if p.vcs is not None:
                missing += _missing_vcs_wheel(planned.name, p, files, pinned)
            else:
                missing += _missing_files(planned.name, p, files, python, platform, pinned)
    if missing:
        raise InstallError(
            f"--offline: the wheelhouse {redact(wheelhouse)} lacks {len(missing)} file(s) that the"
            " steps to run install; nothing was made:\n" + "\n".join(f"  {m}" for m in missing),
            hint=(
                "Mirror them where the indexes answer: `envbuild wheelhouse mirror --lock"
                f" {spec.path.parent} --out WHEELHOUSE` (it also builds the git requirements into"
                " wheels and records them in lock.json), then bring the wheelhouse and the lock"
                " here."
            ),
        )
    changed = _changed_bytes(wheelhouse, pinned)
    if changed:
        raise InstallError(
            f"--offline: {len(changed)} file(s) in the wheelhouse {redact(wheelhouse)} are not the"
            " bytes the lock pins (changed after the mirror?); nothing was made:\n"
            + "\n".join(f"  {c}" for c in changed),
            hint=(
                "Mirror again where the indexes answer (`envbuild wheelhouse mirror --lock"
                f" {spec.path.parent} --out WHEELHOUSE` replaces a file whose hash is wrong), or"
                " restore the wheelhouse from a good copy."
            ),
        )


def _missing_seeds(files: Mapping[str, str], python: str, platform: str) -> list[str]:
    """The seed packages of a new venv (``uv venv --seed``) the wheelhouse lacks."""
    have = {
        parsed[0]
        for f in files.values()
        if (parsed := parse_filename(f)) is not None
        and (fits_target(f, python, platform) or not f.endswith(".whl"))
    }
    return [
        f"the new venv: {name} (the uv backend seeds it with {', '.join(seed_packages(python))}"
        " from the wheelhouse: lock them in a bootstrap step, or copy their wheels in)"
        for name in seed_packages(python)
        if name not in have
    ]


def _missing_vcs_wheel(
    step: str, p: LockedPackage, files: Mapping[str, str], pinned: dict[str, str]
) -> list[str]:
    """A git requirement: the wheel lock.json records as built from it, if the wheelhouse lacks
    it (else its sha256 is pinned)."""
    assert p.vcs is not None
    wheel = p.vcs.wheel
    if wheel is None:
        return [
            f"{step}: {p.name} @ {redact(p.vcs.url)}: no wheel built from it is"
            " recorded in lock.json (installing it would clone the repository)"
        ]
    if wheel.sha256 not in files and wheel.filename not in files.values():
        return [
            f"{step}: {p.name}: {wheel.filename} (sha256"
            f" {wheel.sha256[:16]}..., built from {redact(p.vcs.url)})"
        ]
    pinned[wheel.filename] = wheel.sha256
    return []


def _missing_files(
    step: str,
    p: LockedPackage,
    files: Mapping[str, str],
    python: str,
    platform: str,
    pinned: dict[str, str],
) -> list[str]:
    """A locked package whose files the wheelhouse lacks (none of them, or none for this target);
    the sha256 of each it has is pinned (a locked file's name with other bytes is pinned by the
    lock's hash, and named later with both)."""
    pinned.update({files[h]: h for h in p.hashes if h in files})
    present = [files[h] for h in p.hashes if h in files]
    by_name = [a for a in p.artifacts if a.sha256 is not None and a.filename in files.values()]
    # the locked file's name, other bytes: named below with both hashes
    if not present and by_name:
        pinned.update({a.filename: a.sha256 for a in by_name if a.sha256 is not None})
        return []
    if not present:
        return [f"{step}: {p.name}=={p.version}: none of its {len(p.hashes)} locked files"]
    if not any(fits_target(f, python, platform) or not f.endswith(".whl") for f in present):
        return [
            f"{step}: {p.name}=={p.version}: no file for Python {python} on"
            f" {platform} (only {', '.join(sorted(present)[:3])})"
        ]
    return []


def _changed_bytes(wheelhouse: str, pinned: Mapping[str, str]) -> list[str]:
    """``"<file>: the lock pins sha256 <a>, the file has <b>"`` for each file of a folder
    wheelhouse whose bytes are not the ones pinned (hashed in parallel: hashlib lets go of the GIL).
    """
    parts = urlsplit(wheelhouse)
    if parts.scheme not in ("", "file") or not pinned:
        return []
    folder = Path(unquote(parts.path) if parts.scheme == "file" else wheelhouse)
    names = sorted(pinned)
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        actual = list(pool.map(lambda name: sha256_file(folder / name), names))
    return [
        f"{name}: the lock pins sha256 {pinned[name]}, the file has {got}"
        for name, got in zip(names, actual, strict=True)
        if got != pinned[name]
    ]
