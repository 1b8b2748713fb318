"""``--rebuild-mismatched``: a prebuilt extension wheel the gate fails for its ABI (rule
``extension-abi``: built for another torch minor, CUDA major or C++ ABI than the lock's torch) is
built from its sdist against the lock's torch instead, in the ``builds`` stage
(``projectlock.builds``: without build isolation, through the build cache).

The sdist, for the entry's public version (``2.8.1+cu13torch2.10cxx11abitrue`` -> ``2.8.1``):

1. the lock entry's own sdist, when the lock records one (its URL and sha256);
2. offline (``--offline --wheelhouse DIR``): the wheelhouse's, as ``wheelhouse mirror --lock
   --rebuild-mismatched`` put it there (its ``wheelhouse.json`` names the URL it came from);
3. else the project page on the entry's index, then the lock's other indexes (PyPI where the lock
   names none), read by ``envbuild.index.client``: the first sdist of that version whose page gives
   its sha256, which pins it from then on (the offline check and the install hash-check it).

Only findings of rule ``extension-abi`` are taken; any other failing finding still refuses the
lock (exit 8). A package with no sdist anywhere keeps its finding, with the places looked in
added to its reason, so the refusal names it. An index that does not answer is exit 3
(``SourceError``). The plan and the receipt's lock record say where each rebuilt sdist came from and
that the lock does not pin it (``Rebuilt``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from envbuild.gate.findings import Finding
from envbuild.gate.model import Entry
from envbuild.index import PYPI
from envbuild.index.wheeltags import is_sdist
from envbuild.projectlock.stages import LockedFile, Placed, StagePlan, lock_files

__all__ = ["RULE", "Rebuilt", "rebuild_mismatched", "rebuildable"]

RULE = "extension-abi"
_MISMATCH = re.compile(r" is (built for .*?): it will fail to import")


@dataclass(frozen=True)
class Rebuilt:
    """Where a rebuilt package's sdist came from: the lock (``origin="lock"``) or not."""

    lock_version: str  # the wheel's version in the lock (with its local ABI tag)
    version: str  # the public version built from the sdist
    filename: str
    url: str
    sha256: str
    origin: str  # "lock" | "index" | "wheelhouse"
    where: str  # the index host, the lock file, or the wheelhouse folder

    def to_json(self) -> dict[str, object]:
        return {
            "lock_version": self.lock_version,
            "version": self.version,
            "sdist": self.filename,
            "url": self.url,
            "sha256": self.sha256,
            "origin": self.origin,
            "where": self.where,
            "in_lock": self.origin == "lock",
        }


def rebuildable(failing: list[Finding]) -> list[Finding]:
    """The findings ``--rebuild-mismatched`` may answer (rule ``extension-abi``)."""
    return [f for f in failing if f.rule == RULE]


def public(version: str) -> str:
    return version.split("+", 1)[0]


def rebuild_mismatched(
    plan: StagePlan, failing: list[Finding], *, wheelhouse: Path | None = None
) -> tuple[StagePlan, list[Finding]]:
    """``plan`` with each package of a failing ``extension-abi`` finding that has an sdist moved to
    the builds stage; the findings still failing (other rules, and those with no sdist, their
    reason naming where none was found)."""
    by_package: dict[str, list[Finding]] = {}
    for f in rebuildable(failing):
        by_package.setdefault(f.package, []).append(f)
    placed = list(plan.placed)
    still = [f for f in failing if f.rule != RULE]
    for name, findings in by_package.items():
        i = next(
            (
                n
                for n, p in enumerate(placed)
                if p.entry.name == name and p.artifact is not None and p.artifact.wheel
            ),
            None,
        )
        if i is None:  # not installed from a wheel here (nothing prebuilt to replace)
            still += findings
            continue
        p = placed[i]
        found, why_not = _find_sdist(plan, p.entry, wheelhouse)
        if found is None:
            still += [
                replace(f, reason=f"{f.reason}; --rebuild-mismatched: {why_not}") for f in findings
            ]
            continue
        placed[i] = _moved(p, found, plan, findings)
    return replace(plan, placed=placed), still


def _moved(p: Placed, found: Rebuilt, plan: StagePlan, findings: list[Finding]) -> Placed:
    built_for = "; ".join(
        dict.fromkeys(m.group(1) for f in findings if (m := _MISMATCH.search(f.reason)))
    )
    built_for = built_for or f"not built for the lock's torch {plan.torch.version}"
    source = {
        "lock": "the lock",
        "index": found.where,
        "wheelhouse": f"the wheelhouse ({found.url})",
    }[found.origin]
    pinned = {
        "lock": "",
        "index": " (not in the lock: pinned by the sha256 its index page gives)",
        "wheelhouse": " (not in the lock: pinned by the sha256 the mirror recorded)",
    }[found.origin]
    why = (
        f"rebuilt (--rebuild-mismatched): the lock's wheel is {built_for}; its sdist from"
        f" {source}{pinned} is built against that torch"
    )
    entry = replace(p.entry, version=found.version)
    art = LockedFile(found.url, found.sha256, found.filename)
    return Placed(
        entry,
        "builds",
        why,
        art,
        f"{entry.name} @ {found.url} --hash=sha256:{found.sha256}",
        rebuilt=found.to_json(),
        index=p.index,
    )


def _find_sdist(
    plan: StagePlan, entry: Entry, wheelhouse: Path | None
) -> tuple[Rebuilt | None, str]:
    """The sdist of ``entry``'s public version, or None and why none was found."""
    lock_version = entry.version or ""
    version = public(lock_version)
    label = f"{entry.name} {version}"
    own = next(
        (
            a
            for a in lock_files(entry, plan.chosen.path.parent)
            if is_sdist(a.filename) and a.sha256
        ),
        None,
    )
    if own is not None:
        return (
            Rebuilt(
                lock_version,
                version,
                own.filename,
                own.url,
                own.sha256 or "",
                "lock",
                str(plan.chosen.path),
            ),
            "",
        )
    if wheelhouse is not None:
        got = _in_wheelhouse(entry.name, version, wheelhouse)
        if got is None:
            return (
                None,
                (
                    f"no sdist of {label} in the lock or in the wheelhouse {wheelhouse} (offline:"
                    f" `envbuild wheelhouse mirror --lock {plan.chosen.path} --rebuild-mismatched`"
                    " mirrors it where its index answers)"
                ),
            )
        filename, url, sha = got
        return Rebuilt(lock_version, version, filename, url, sha, "wheelhouse", str(wheelhouse)), ""
    return _on_index(plan, entry, lock_version, version)


def _indexes(plan: StagePlan, entry: Entry) -> list[str]:
    """The entry's own index, else the lock's, the package index (pypi.org) first: a prebuilt
    extension locked by URL (a GitHub release) publishes its sdists there."""
    if entry.index:
        return [entry.index]
    found = list(dict.fromkeys(x for x in plan.chosen.lock.indexes if x)) or [PYPI]
    return sorted(found, key=lambda url: _host(url) not in ("pypi.org", "pypi.python.org"))


def _host(url: str) -> str:
    from envbuild.index.net import redact

    parts = urlsplit(redact(url))
    return parts.netloc.rsplit("@", 1)[-1] or url


def _on_index(
    plan: StagePlan, entry: Entry, lock_version: str, version: str
) -> tuple[Rebuilt | None, str]:
    from envbuild import events
    from envbuild.index.client import SourceError, index_files, parse_filename, same_version

    unpinned: list[str] = []
    dead: list[tuple[str, str]] = []
    indexes = _indexes(plan, entry)
    for index in indexes:
        try:
            files = index_files(index, entry.name)
        except SourceError as exc:
            dead.append((_host(index), exc.message))
            continue
        for a in files:
            parsed = parse_filename(a.filename)
            if not is_sdist(a.filename) or parsed is None or not same_version(parsed[1], version):
                continue
            if not a.sha256:
                unpinned.append(a.filename)
                continue
            for host, why in dead:  # another index served it: the dead one is a notice, not a stop
                events.emit(
                    "info",
                    f"--rebuild-mismatched: {host} did not answer ({why}); the sdist of "
                    f"{entry.name} {version} came from {_host(index)}",
                )
            return (
                Rebuilt(lock_version, version, a.filename, a.url, a.sha256, "index", _host(index)),
                "",
            )
    if dead and len(dead) == len(indexes):
        host, why = dead[0]
        raise SourceError(
            f"--rebuild-mismatched: looking for the sdist of {entry.name} {version} on "
            f"{', '.join(h for h, _ in dead)}: no index answered ({host}: {why})",
            hint=(
                "Check the network (or a proxy), or mirror it where the index answers (`envbuild"
                f" wheelhouse mirror --lock {plan.chosen.path} --rebuild-mismatched --out DIR`) and"
                " provision --offline --wheelhouse DIR."
            ),
        )
    hosts = ", ".join(dict.fromkeys(_host(i) for i in indexes))
    if unpinned:
        return (
            None,
            (
                f"the sdist of {entry.name} {version} on {hosts} ({', '.join(unpinned)}) comes with"
                " no sha256 on its index page, so nothing pins it"
            ),
        )
    return None, f"no sdist of {entry.name} {version} in the lock or on its index ({hosts})"


def _in_wheelhouse(name: str, version: str, folder: Path) -> tuple[str, str, str] | None:
    """(file name, the URL it was mirrored from, sha256) of the sdist in the wheelhouse: its
    ``wheelhouse.json`` entry (the mirror checked it against the index's sha256), else the file."""
    from envbuild._io import sha256_file
    from envbuild.index.client import parse_filename, same_version

    def fits(filename: str) -> bool:
        parsed = parse_filename(filename)
        return (
            is_sdist(filename)
            and parsed is not None
            and parsed[0] == name
            and same_version(parsed[1], version)
        )

    try:
        rows = (
            json.loads((folder / "wheelhouse.json").read_text(encoding="utf-8")).get("artifacts")
            or []
        )
    except (OSError, ValueError, AttributeError):
        rows = []
    for row in rows if isinstance(rows, list) else []:
        filename = row.get("filename") if isinstance(row, dict) else None
        if (
            isinstance(filename, str)
            and fits(filename)
            and (folder / filename).is_file()
            and row.get("sha256")
        ):
            return filename, str(row.get("url") or (folder / filename).as_uri()), str(row["sha256"])
    for path in sorted(folder.iterdir()):
        if path.is_file() and fits(path.name):
            return path.name, path.as_uri(), sha256_file(path)
    return None
