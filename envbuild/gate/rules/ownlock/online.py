"""``--online``: every artifact the lock pins is still where the lock says, with the same hash.

Nightly indexes prune old builds within weeks, and a re-uploaded file changes its hash: either
way a lock that passed yesterday stops installing. For each locked package the project's files
are listed again on the step's sources (the ones ``lock.json`` records; the installer's own
configuration where the lock says it used that) and each locked artifact is looked up by its
sha256:

- ``artifact-changed`` (finding): a file of the same name is there with another sha256;
- ``artifact-gone``: the file is not there any more. A finding when nothing the lock pins for
  that package still installs on the target from the index *and* the wheelhouse
  (``--wheelhouse``) lacks it too; otherwise a notice that says where it still is.

git pins are not fetched (a commit does not vanish from its repository the way a nightly wheel
does); with ``--wheelhouse`` the wheel ``wheelhouse mirror`` built from one is looked for.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from envbuild.gate.rules.ownlock.steps import StackContext, shown
from envbuild.index.client import Artifact, ArtifactFinder, SourceError, Sources
from envbuild.index.net import redact
from envbuild.installer import pip_config_sources
from envbuild.spec import DEFAULT_PLATFORM
from envbuild.stacklock.model import LockedPackage, LockedStep

__all__ = ["check"]


def _sources(step: LockedStep) -> Sources:
    """Where the step's artifacts were found: its recorded sources (credentials are redacted in the
    lock, so those cannot be asked again), plus pip's configuration where the lock used it."""
    src = step.sources
    indexes = [u for u in (src.index_url, *src.extra_index_urls) if u and "***@" not in u]
    links = [u for u in src.find_links if "***@" not in u]
    if src.installer_configured:
        conf = pip_config_sources()
        indexes = [
            *(u for u in (conf.index_url or "https://pypi.org/simple", *conf.extra_index_urls)),
            *indexes,
        ]
        links = [*conf.find_links, *links]
    return Sources(tuple(dict.fromkeys(indexes)), tuple(dict.fromkeys(links)))


def _listing(step: LockedStep, pkg: LockedPackage) -> tuple[dict[str, str], dict[str, str], str]:
    """({sha256: file name}, {file name: sha256}, error) of the package's files on the step's
    sources."""
    finder = ArtifactFinder(_sources(step))
    try:
        files = [finder.with_sha256(a) for a in finder.files(pkg.name) if a.version is not None]
    except (SourceError, OSError) as exc:
        return {}, {}, str(exc)
    by_sha = {a.sha256: a.filename for a in files if a.sha256}
    return by_sha, {a.filename: a.sha256 or "" for a in files}, ""


def check(ctx: StackContext, wheelhouse: str | None) -> None:
    """``wheelhouse``: where what left its index may still be (a folder or a URL)."""
    from envbuild.index.wheeltags import fits_target, wheelhouse_files

    lock, spec = ctx.lock, ctx.spec
    if lock is None:
        return
    kept = wheelhouse_files(wheelhouse) if wheelhouse else None
    python = lock.target.get("python") or lock.python or spec.python
    platform = lock.target.get("platform") or DEFAULT_PLATFORM
    work = [(s, p) for s in lock.steps if s.locked for p in s.packages]

    def ask(item: tuple[LockedStep, LockedPackage]) -> tuple[dict[str, str], dict[str, str], str]:
        step, pkg = item
        return ({}, {}, "") if pkg.vcs is not None else _listing(step, pkg)

    with ThreadPoolExecutor(max_workers=8) as pool:
        listings = list(pool.map(ask, work))
    checked = gone_count = 0
    for (step, pkg), (by_sha, by_name, error) in zip(work, listings, strict=True):
        file = shown(lock.folder / (step.file or ""))
        if pkg.vcs is not None:
            wheel = pkg.vcs.wheel
            if kept is not None and wheel is not None:
                where = "has" if wheel.sha256 in kept else "does not have"
                ctx.note(
                    f"{pkg.name}: git pin {redact(pkg.vcs.url)} not fetched; the wheelhouse {where}"
                    f" the wheel built from it ({wheel.filename})"
                )
            continue
        if error:
            ctx.add(file, pkg.name, "artifact-gone", f"cannot list its files: {error}")
            continue
        arts = pkg.artifacts or tuple(Artifact(f"sha256:{h[:12]}", "", h) for h in pkg.hashes)
        gone: list[Artifact] = []
        for a in arts:
            checked += 1
            if a.sha256 in by_sha:
                continue
            if a.filename in by_name:
                ctx.add(
                    file,
                    pkg.name,
                    "artifact-changed",
                    f"{a.filename} is on the index with sha256 {by_name[a.filename][:16]}..., "
                    f"the lock pins {str(a.sha256)[:16]}... (re-uploaded or tampered)",
                )
                continue
            gone.append(a)
        if not gone:
            continue
        gone_count += len(gone)
        still = [a for a in arts if a not in gone]
        usable = [
            a
            for a in still
            if fits_target(a.filename, python, platform) or not a.filename.endswith(".whl")
        ]
        for a in gone:
            where = (
                "not given (--wheelhouse DIR)"
                if kept is None
                else "has it"
                if a.sha256 in kept
                else "does not have it"
            )
            text = (
                f"{a.filename} ({pkg.version}) is gone from {redact(a.url) or 'its index'}; the"
                f" wheelhouse {where}"
            )
            in_house = kept is not None and any(x.sha256 in kept for x in arts)
            for_target = fits_target(a.filename, python, platform) or not a.filename.endswith(
                ".whl"
            )
            if for_target and not usable and not in_house:
                ctx.add(file, pkg.name, "artifact-gone", text)
            else:
                ctx.note(f"{file}: {pkg.name}: {text}")
    ctx.note(f"--online: {checked} locked artifact(s) looked up, {gone_count} gone")
