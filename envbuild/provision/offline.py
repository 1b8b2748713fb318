"""``provision --offline --wheelhouse WH``: before step 1, prove the wheelhouse holds what the lock installs.

For every locked step still to run, each pinned package needs a file in the wheelhouse whose
sha256 the lock pins and that installs on the stack's target (a wheel of its Python and
platform, or an sdist); a git or direct-URL pin needs the wheel ``wheelhouse mirror`` built
from it, with the hash ``lock.json`` records (``vcs.wheel``), since cloning is a network
operation. Anything missing is listed, all of it at once, and the run stops with exit 5
before the data root, the links or the venv are made.

The wheelhouse is a folder or a find-links page (``wheeltags.wheelhouse_files``). A new
venv made by the uv backend is seeded (pip, setuptools, wheel) from the wheelhouse too.
"""

from __future__ import annotations

from collections.abc import Iterable

from envbuild.errors import InstallError, LockError
from envbuild.index import parse_filename
from envbuild.lock.model import read_lock
from envbuild.net import redact
from envbuild.plan import PlannedStep
from envbuild.spec import StackSpec
from envbuild.wheeltags import fits_target, wheelhouse_files

__all__ = ["check_wheelhouse", "seed_packages"]


def seed_packages(python: str) -> tuple[str, ...]:
    """What ``uv venv --seed`` installs into a new venv of ``python``: pip, and setuptools and
    wheel below 3.12. Offline, it takes them from the wheelhouse."""
    minor = int(python.split(".")[1]) if python.count(".") >= 1 and python.split(".")[1].isdigit() else 12
    return ("pip", "setuptools", "wheel") if minor < 12 else ("pip",)


def check_wheelhouse(spec: StackSpec, steps: Iterable[PlannedStep], wheelhouse: str, *, seed: bool = False) -> None:
    """Raise ``InstallError`` (exit 5) listing every locked artifact of ``steps`` the wheelhouse lacks;
    ``seed``: a new venv is made by ``uv venv --seed``, whose seed packages must be there too."""
    locked = [s for s in steps if s.locked_file is not None]
    if not locked and not seed:
        return
    lock = None
    if locked:
        assert locked[0].locked_file is not None
        try:
            lock = read_lock(locked[0].locked_file.parent)
        except LockError:
            lock = None  # the lock itself was checked when it was loaded
    files = wheelhouse_files(wheelhouse)
    python, platform = spec.python, spec.target.platform
    missing: list[str] = []
    if seed:
        have = {parsed[0] for f in files.values() if (parsed := parse_filename(f)) is not None
                and (fits_target(f, python, platform) or not f.endswith(".whl"))}
        missing += [f"the new venv: {name} (the uv backend seeds it with {', '.join(seed_packages(python))} from the "
                    "wheelhouse: lock them in a bootstrap step, or copy their wheels in)"
                    for name in seed_packages(python) if name not in have]
    for planned in locked:
        entry = lock.step(planned.name) if lock is not None else None
        for p in entry.packages if entry is not None else ():
            if p.vcs is not None:
                wheel = p.vcs.wheel
                if wheel is None:
                    missing.append(f"{planned.name}: {p.name} @ {redact(p.vcs.url)}: no wheel built from it is recorded "
                                   "in lock.json (installing it would clone the repository)")
                elif wheel.sha256 not in files:
                    missing.append(f"{planned.name}: {p.name}: {wheel.filename} (sha256 {wheel.sha256[:16]}..., built "
                                   f"from {redact(p.vcs.url)})")
                continue
            present = [files[h] for h in p.hashes if h in files]
            if not present:
                missing.append(f"{planned.name}: {p.name}=={p.version}: none of its {len(p.hashes)} locked files")
            elif not any(fits_target(f, python, platform) or not f.endswith(".whl") for f in present):
                missing.append(f"{planned.name}: {p.name}=={p.version}: no file for Python {python} on {platform} "
                               f"(only {', '.join(sorted(present)[:3])})")
    if missing:
        raise InstallError(
            f"--offline: the wheelhouse {redact(wheelhouse)} lacks {len(missing)} file(s) that the steps to run "
            "install; nothing was made:\n" + "\n".join(f"  {m}" for m in missing),
            hint=f"Mirror them where the indexes answer: `envbuild wheelhouse mirror --lock {spec.path.parent} --out "
            "WHEELHOUSE` (it also builds the git requirements into wheels and records them in lock.json), then "
            "bring the wheelhouse and the lock here.")
