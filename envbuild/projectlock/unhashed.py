"""Files the lock records no sha256 for: named before anything is made (``--require-hashes``
refuses them), and pinned on first install: a remote one downloaded and installed from the bytes
hashed, its sha256 required from then on (``<root>/.envbuild/unhashed.json``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from envbuild import events
from envbuild.errors import InstallError, LockError
from envbuild.index.download import download
from envbuild.index.net import redact
from envbuild.projectlock.request import LockRequest, Prepared
from envbuild.projectlock.stages import StagePlan

__all__ = ["pin_unhashed", "say_unhashed"]


def say_unhashed(prepared: Prepared, req: LockRequest) -> None:
    """One notice naming the files the lock records no sha256 for (uv installs them as they are);
    with ``--require-hashes`` a refusal before anything is made (exit 8)."""
    from envbuild.projectlock.stages import unhashed

    found = unhashed(prepared.plan)
    if not found:
        return
    names = ", ".join(
        f"{p.label} ({p.artifact.filename if p.artifact else '?'})" for p in found[:6]
    )
    more = f" and {len(found) - 6} more" if len(found) > 6 else ""
    if req.require_hashes:
        raise LockError(
            f"{prepared.chosen.path}: the lock records no sha256 for {len(found)} file(s) it"
            f" installs, and --require-hashes was given, so nothing was installed: {names}{more}",
            hint=(
                "Re-lock from an index that serves hashes (uv records none for a local flat index"
                " or a find-links folder), or drop --require-hashes to pin the files' sha256 on"
                " first install."
            ),
        )
    events.emit(
        "warn",
        f"the lock records no sha256 for {len(found)} file(s): {names}{more}; they install as uv"
        " installs them, and the sha256 of the bytes installed is recorded (manifest and receipt)"
        " and required from then on",
    )


def pin_unhashed(plan: StagePlan, state: Path) -> tuple[StagePlan, dict[str, dict[str, str]]]:
    """The files the lock records no sha256 for, pinned: a remote one is downloaded (streamed) into
    ``state/unhashed/`` and installed from there, so the bytes hashed are the bytes installed. The
    sha256 of each is recorded in ``state/unhashed.json`` on first install and required from then on
    (InstallError, exit 5, when a file changed). Returns the plan and {name: {url, file, sha256}}.
    """
    import json

    from envbuild._io import atomic_write_json, sha256_file
    from envbuild.projectlock.stages import LockedFile, Placed

    found = [p for p in plan.placed if p.unhashed and p.artifact is not None]
    if not found:
        return plan, {}
    record_path = state / "unhashed.json"
    try:
        known = json.loads(record_path.read_text(encoding="utf-8"))
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    pinned: dict[str, dict[str, str]] = {}
    placed = list(plan.placed)
    for i, p in enumerate(placed):
        if not (p.unhashed and p.artifact is not None):
            continue
        art = p.artifact
        if art.sha256 is None:
            try:  # index.download: a source that does not answer is a PreflightError (exit 3)
                local = download(art.url, state / "unhashed" / art.filename)
            except OSError as exc:
                raise InstallError(
                    f"{state}: cannot write the download of {redact(art.url)} "
                    f"({exc.strerror or exc})",
                    hint="Free space on the data root.",
                ) from exc
            art = LockedFile(local.as_uri(), sha256_file(local), art.filename)
        assert art.sha256 is not None
        was = known.get(p.artifact.url)
        if isinstance(was, str) and was != art.sha256:
            raise InstallError(
                f"{p.artifact.url}: the lock records no sha256 for {p.label}, and its bytes changed"
                f" since they were first installed here (sha256 {was[:16]}... then,"
                f" {art.sha256[:16]}... now); nothing was installed",
                hint=(
                    "Find out why the file changed; re-lock with hashes, or "
                    f"delete {record_path} to accept the new bytes."
                ),
            )
        known[p.artifact.url] = art.sha256
        pinned[p.entry.name] = {"url": p.artifact.url, "file": art.filename, "sha256": art.sha256}
        placed[i] = Placed(
            p.entry,
            p.stage,
            p.why,
            art,
            f"{p.entry.name} @ {art.url} --hash=sha256:{art.sha256}",
            needs_glibc=p.needs_glibc,
            rebuilt=p.rebuilt,
            unhashed=True,
            index=p.index,
        )
    state.mkdir(parents=True, exist_ok=True)
    atomic_write_json(record_path, known)
    return replace(plan, placed=placed), pinned
