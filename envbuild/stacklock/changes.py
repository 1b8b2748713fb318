"""What a lock run moved: per step, each package added, removed or moved (old -> new), and why;
the wheelhouse wheels to rebuild when torch moves.

Reasons, first that applies:

- ``first lock``: there was no lock before this one, and the spec names the package;
- ``upgrade asked``: ``--upgrade`` or ``--upgrade-package NAME`` named it;
- ``spec changed``: the step names the package (or named it) and is new or gone, or its
  requirement on the package in the spec is not the one the last lock was made from
  (``lock.json`` records each step's ``requirements``);
- ``needed by another pin``: anything else: a dependency that moved because a pin it hangs off
  moved, was added or went away (``by`` names the locked packages that require it).

When torch's version or local tag moves, the wheels of a wheelhouse that ``envbuild wheelhouse
build`` made against the old torch (their provenance record says which) must be rebuilt:
``stale_wheels`` lists them.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.guard.buildrecord import PROVENANCE_FILE
from envbuild.index.net import redact
from envbuild.spec import StackSpec
from envbuild.stacklock.model import Lock, LockedPackage, LockedStep
from envbuild.stacklock.relock import Upgrade

FIRST = "first lock"
SPEC = "spec changed"
UPGRADE = "upgrade asked"
NEEDED = "needed by another pin"

__all__ = ["Change", "StaleWheel", "lock_changes", "stale_wheels", "torch_moved"]


class ChangeJSON(TypedDict):
    """One pin that moved in a lock run."""

    step: str  # the step whose lock file holds it
    package: str  # the package
    change: Literal["added", "removed", "changed"]  # what happened to its pin
    old: str | None  # the old version, or `git <commit>` (null: added)
    new: str | None  # the new one (null: removed)
    # why it moved: `first lock`, `spec changed`, `upgrade asked` or `needed by another pin`
    reason: str
    by: list[str]  # `needed by another pin`: the locked packages that require it


@dataclass(frozen=True)
class Change:
    step: str
    package: str
    old: str | None  # a version, or "git <commit>"; None when added
    new: str | None  # None when removed
    reason: str
    by: tuple[str, ...] = ()  # for NEEDED: the locked packages that require it

    @property
    def kind(self) -> Literal["added", "removed", "changed"]:
        return "added" if self.old is None else "removed" if self.new is None else "changed"

    def to_json(self) -> ChangeJSON:
        return {
            "step": self.step,
            "package": self.package,
            "change": self.kind,
            "old": self.old,
            "new": self.new,
            "reason": self.reason,
            "by": list(self.by),
        }


def _shown(p: LockedPackage) -> str:
    if p.version is not None:
        return p.version
    return f"git {p.vcs.commit[:12]}" if p.vcs is not None and p.vcs.commit else "url"


def _requirements(packages: Iterable[str] | None) -> dict[str, str] | None:
    if packages is None:
        return None
    out: dict[str, str] = {}
    for raw in packages:
        try:
            out[canonicalize_name(Requirement(raw).name)] = str(Requirement(raw))
        except InvalidRequirement:
            continue
    return out


def _requirers(name: str, steps: Iterable[LockedStep]) -> tuple[str, ...]:
    out = []
    for step in steps:
        for p in step.packages:
            for raw in p.requires_dist or ():
                try:
                    if canonicalize_name(Requirement(raw).name) == name:
                        out.append(f"{p.name} {_shown(p)}")
                        break
                except InvalidRequirement:
                    continue
    return tuple(dict.fromkeys(out))


def lock_changes(
    old: Lock | None, new: Lock, spec: StackSpec, upgrade: Upgrade | None = None
) -> list[Change]:
    """Every pin that differs between ``old`` and ``new``, step by step, with its reason."""
    upgrade = upgrade or Upgrade()
    before_steps = {s.name: s for s in old.steps} if old is not None else {}
    wanted = {s.name: _requirements(redact(p) for p in s.packages) or {} for s in spec.steps}
    out: list[Change] = []
    for i, step in enumerate(new.steps):
        was = before_steps.get(step.name)
        before = {canonicalize_name(p.name): p for p in was.packages} if was is not None else {}
        after = {canonicalize_name(p.name): p for p in step.packages}
        asked_then = _requirements(was.requirements) if was is not None else None
        asked_now = wanted.get(step.name, {})
        for name in sorted(before.keys() | after.keys()):
            a, b = before.get(name), after.get(name)
            if a is not None and b is not None and _shown(a) == _shown(b):
                continue
            named = (
                name in asked_now
                or (asked_then is not None and name in asked_then)
                or (asked_then is None and any(p is not None and p.requested for p in (a, b)))
            )
            if old is None and named:
                reason = FIRST  # nothing was locked before: nothing changed, every pin is new
            elif upgrade.asks(name):
                reason = UPGRADE
            elif named and (
                was is None or asked_then is None or asked_then.get(name) != asked_now.get(name)
            ):
                reason = SPEC  # the step is new, or its requirement on the package changed
            else:
                reason = NEEDED
            by: tuple[str, ...] = ()
            if reason == NEEDED:
                by = (
                    _requirers(name, new.steps[: i + 1])
                    if b is not None
                    else _requirers(name, old.steps if old is not None else ())
                )
            out.append(
                Change(
                    step.name, name, _shown(a) if a else None, _shown(b) if b else None, reason, by
                )
            )
    for gone, was in before_steps.items():
        if new.step(gone) is None:  # a step the spec no longer has
            out += [
                Change(
                    gone,
                    canonicalize_name(p.name),
                    _shown(p),
                    None,
                    SPEC if p.requested else NEEDED,
                )
                for p in was.packages
            ]
    return out


def torch_moved(old: Lock | None, new: Lock) -> tuple[str, str] | None:
    """(old, new) torch version when the lock's ABI package moved (version or local tag)."""
    if (
        old is None
        or old.abi is None
        or new.abi is None
        or not old.abi.version
        or not new.abi.version
    ):
        return None
    return (old.abi.version, new.abi.version) if old.abi.version != new.abi.version else None


@dataclass(frozen=True)
class StaleWheel:
    path: Path
    name: str
    version: str
    built_against: str  # the torch the provenance record names


def read_wheel_provenance(path: Path) -> Mapping[str, Any] | None:
    """The provenance record inside a wheel ``envbuild wheelhouse build`` made; None for others."""
    try:
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                parts = member.split("/")
                if (
                    len(parts) == 2
                    and parts[0].endswith(".dist-info")
                    and parts[1] == PROVENANCE_FILE
                ):
                    data = json.loads(zf.read(member))
                    return data if isinstance(data, dict) else None
    except (OSError, zipfile.BadZipFile, ValueError, KeyError):
        return None
    return None


def built_against(provenance: Mapping[str, Any]) -> str | None:
    torch = provenance.get("torch")
    return (
        str(torch["version"])
        if isinstance(torch, dict) and isinstance(torch.get("version"), str)
        else None
    )


def stale_wheels(folders: Iterable[Path], torch_version: str) -> list[StaleWheel]:
    """Wheels in ``folders`` built by ``wheelhouse build`` against a torch other than
    ``torch_version``."""
    out: list[StaleWheel] = []
    for folder in dict.fromkeys(folders):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.whl")):
            prov = read_wheel_provenance(path)
            torch = built_against(prov) if prov is not None else None
            if torch is not None and torch != torch_version:
                assert prov is not None
                out.append(
                    StaleWheel(
                        path, str(prov.get("name", "?")), str(prov.get("version", "?")), torch
                    )
                )
    return out
