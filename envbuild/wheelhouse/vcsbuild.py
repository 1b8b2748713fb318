"""Wheels for a lock's git and direct-URL sdist requirements, built at the locked commit.

A git requirement is locked to a commit, and pip installs it by cloning the repository: an
offline host cannot. ``wheelhouse mirror`` therefore builds each one into a wheel (``pip wheel
--no-deps`` of a clone checked out at the commit; a direct-URL sdist from its hash-checked
download), puts it in the wheelhouse, and records it twice:

- in ``lock.json`` (``steps[i].packages[j].vcs.wheel``: file name, version, sha256), so that
  ``provision --offline`` installs that very wheel under ``--require-hashes`` (``plan``
  replaces the git line with ``name==version --hash=sha256:...``): commit this change;
- in the wheelhouse's ``wheelhouse.json`` with its provenance (source URL, commit, the
  interpreter that built it, ``SOURCE_DATE_EPOCH``, when).

Builds run with ``SOURCE_DATE_EPOCH`` set to the commit's time, so that a backend that honours
it (setuptools, hatchling, flit) makes the same bytes again; a wheel already in the wheelhouse
with the recorded hash is never rebuilt. A rebuild whose hash differs from the recorded one
replaces the record, and says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from envbuild import __version__, events
from envbuild._io import atomic_write_json, sha256_file
from envbuild.errors import WheelhouseError
from envbuild.index.client import parse_filename, read_bytes
from envbuild.index.net import redact
from envbuild.index.wheeltags import fits_target
from envbuild.run import run
from envbuild.stacklock.git import GitRef
from envbuild.stacklock.model import BuiltWheel, Lock, LockedPackage, LockedStep, write_lock

__all__ = ["Built", "build_vcs_wheels", "vcs_packages"]


@dataclass(frozen=True)
class Built:
    step: str
    name: str
    wheel: Path
    sha256: str
    version: str
    source: str  # redacted URL
    commit: str | None
    reused: bool  # already in the wheelhouse with the hash lock.json records


def vcs_packages(lock: Lock) -> list[tuple[LockedStep, LockedPackage]]:
    """The git and direct-URL requirements of a lock's locked steps."""
    return [(s, p) for s in lock.steps if s.locked for p in s.packages if p.vcs is not None]


def _step_source_args(step: LockedStep) -> list[str]:
    """The step's recorded sources as pip flags (for build requirements); redacted ones are left to
    pip's config."""
    src = step.sources
    args: list[str] = []
    if src.index_url and "***@" not in src.index_url:
        args += ["--index-url", src.index_url]
    for u in src.extra_index_urls:
        if "***@" not in u:
            args += ["--extra-index-url", u]
    for f in src.find_links:
        if "***@" not in f:
            args += ["--find-links", f]
    return args


def _env(epoch: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if epoch:
        env["SOURCE_DATE_EPOCH"] = epoch
    return env


def _git(args: list[str], log: Path, what: str) -> str:
    res = run(["git", *args], log_file=log, env=_env(None), capture=True, timeout=900)
    if not res.ok:
        raise WheelhouseError(
            f"{what} failed (exit {res.returncode}): {redact(res.tail)[-600:]}",
            hint=f"Full log: {log}",
        )
    return (res.output or "").strip()


def _source(pkg: LockedPackage, work: Path, log: Path) -> tuple[Path, str | None]:
    """The source tree (or sdist, or wheel) of a VCS/URL pin, and the SOURCE_DATE_EPOCH for its
    build."""
    assert pkg.vcs is not None
    url = pkg.vcs.url
    if url.startswith("git+"):
        ref = GitRef(url)
        if not pkg.vcs.commit:
            raise WheelhouseError(
                f"{pkg.name}: the git requirement {redact(url)} is not pinned to a commit",
                hint="Run `envbuild lock` (it pins every git ref to a commit).",
            )
        src = work / "src"
        _git(
            ["clone", "-q", "--no-checkout", ref.repo, str(src)],
            log,
            f"git clone {redact(ref.repo)}",
        )
        _git(
            ["-C", str(src), "checkout", "-q", pkg.vcs.commit],
            log,
            f"git checkout {pkg.vcs.commit}",
        )
        epoch = _git(["-C", str(src), "log", "-1", "--format=%ct", pkg.vcs.commit], log, "git log")
        sub = dict(p.split("=", 1) for p in ref.frag.lstrip("#").split("&") if "=" in p).get(
            "subdirectory"
        )
        return (src / sub if sub else src), epoch
    clean = url.split("#", 1)[0]
    name = unquote(urlsplit(clean).path.rsplit("/", 1)[-1])
    data = read_bytes(clean)
    frag = url.split("#", 1)[1] if "#" in url else ""
    wanted = set(pkg.hashes) | ({frag[7:]} if frag.startswith("sha256=") else set())
    got = hashlib.sha256(data).hexdigest()
    if wanted and got not in wanted:
        raise WheelhouseError(
            f"{redact(clean)}: sha256 {got} is not the one the lock pins"
            f" ({', '.join(sorted(wanted))})"
        )
    path = work / name
    path.write_bytes(data)
    return path, None


def _build(
    pkg: LockedPackage, step: LockedStep, python: Path, out: Path
) -> tuple[Path, dict[str, Any]]:
    assert pkg.vcs is not None
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{pkg.name}-{(pkg.vcs.commit or 'url')[:12]}.log"
    with tempfile.TemporaryDirectory(prefix="envbuild-vcs-") as tmp:
        work = Path(tmp)
        src, epoch = _source(pkg, work, log)
        dist = work / "dist"
        dist.mkdir()
        if src.name.endswith(".whl"):
            shutil.copyfile(src, dist / src.name)
        else:
            events.emit("step", f"building {pkg.name} from {redact(pkg.vcs.url)}", log=str(log))
            argv = [
                str(python),
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--wheel-dir",
                str(dist),
                *_step_source_args(step),
                str(src),
            ]
            res = run(argv, log_file=log, env=_env(epoch), cwd=work, timeout=3600)
            if not res.ok:
                raise WheelhouseError(
                    f"building {pkg.name} from {redact(pkg.vcs.url)} failed (exit"
                    f" {res.returncode}):\n{redact(res.tail)}",
                    hint=f"Full log: {log}",
                )
        wheels = sorted(dist.glob("*.whl"))
        if len(wheels) != 1:
            raise WheelhouseError(
                f"building {pkg.name} made {len(wheels)} wheels, expected 1",
                hint=f"Full log: {log}",
            )
        dest = out / wheels[0].name
        tmp_dest = dest.with_name(f".{dest.name}.tmp")
        shutil.copyfile(wheels[0], tmp_dest)
        tmp_dest.replace(dest)
    provenance = {
        "url": redact(pkg.vcs.url),
        "commit": pkg.vcs.commit,
        "python": str(python),
        "source_date_epoch": epoch,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool": f"envbuild {__version__} (pip wheel --no-deps)",
    }
    return dest, provenance


def build_vcs_wheels(
    lock: Lock, out: Path, *, python: Path, target: tuple[str, str]
) -> list[Built]:
    """Build (or find) the wheel of every git / direct-URL pin of ``lock`` in ``out``; record each
    in ``lock.json`` and ``out/wheelhouse.json``. ``target``: (python, platform) the wheel must
    install on.
    """
    results: list[Built] = []
    records: dict[str, dict[str, Any]] = {}
    changed: dict[tuple[str, str], BuiltWheel] = {}
    for step, pkg in vcs_packages(lock):
        assert pkg.vcs is not None
        have = pkg.vcs.wheel
        if (
            have is not None
            and (out / have.filename).is_file()
            and sha256_file(out / have.filename) == have.sha256
        ):
            results.append(
                Built(
                    step.name,
                    pkg.name,
                    out / have.filename,
                    have.sha256,
                    have.version,
                    redact(pkg.vcs.url),
                    pkg.vcs.commit,
                    True,
                )
            )
            continue
        wheel, provenance = _build(pkg, step, python, out)
        if not fits_target(wheel.name, *target):
            wheel.unlink()
            raise WheelhouseError(
                f"{pkg.name}: the wheel built from {redact(pkg.vcs.url)} ({wheel.name}) does not "
                f"install on the lock's target (Python {target[0]} on {target[1]})",
                hint="Mirror on a host of the target's Python and CPU, or pass --python PATH.",
            )
        sha = sha256_file(wheel)
        parsed = parse_filename(wheel.name)
        version = parsed[1] if parsed else "0"
        built = BuiltWheel(filename=wheel.name, version=version, sha256=sha)
        replaced = have.sha256 if have is not None and have.sha256 != sha else None
        if replaced:
            events.emit(
                "warn",
                f"{pkg.name}: the wheel built now from {redact(pkg.vcs.url)} is not byte-identical"
                f" to the one lock.json recorded ({replaced[:12]}...); lock.json now records"
                f" {sha[:12]}...",
            )
        if have != built:
            changed[(step.name, pkg.name)] = built
        records[wheel.name] = {
            "name": pkg.name,
            "version": version,
            "filename": wheel.name,
            "sha256": sha,
            "size": wheel.stat().st_size,
            "url": redact(pkg.vcs.url),
            "built_from": provenance,
        }
        results.append(
            Built(
                step.name, pkg.name, wheel, sha, version, redact(pkg.vcs.url), pkg.vcs.commit, False
            )
        )
    if changed:
        _record_in_lock(lock, changed)
    if records:
        _record_in_wheelhouse(out / "wheelhouse.json", records)
    return results


def _record_in_lock(lock: Lock, changed: dict[tuple[str, str], BuiltWheel]) -> None:
    steps = []
    for s in lock.steps:
        packages = tuple(
            (
                dataclasses.replace(
                    p, vcs=dataclasses.replace(p.vcs, wheel=changed[(s.name, p.name)])
                )
                if p.vcs is not None and (s.name, p.name) in changed
                else p
            )
            for p in s.packages
        )
        steps.append(dataclasses.replace(s, packages=packages))
    write_lock(dataclasses.replace(lock, steps=tuple(steps)))


def _record_in_wheelhouse(path: Path, records: dict[str, dict[str, Any]]) -> None:
    data: dict[str, Any] = {"schema": 1, "artifacts": []}
    if path.is_file():
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
    rows = {a.get("filename"): a for a in data.get("artifacts", []) if isinstance(a, dict)}
    rows.update(records)
    atomic_write_json(
        path,
        {"schema": 1, "artifacts": sorted(rows.values(), key=lambda a: str(a.get("filename")))},
    )
