"""Day 2 of a lock: which steps must be resolved again, and what each keeps of its last pins.

A lock lives for months. Resolving a spec afresh moves every package that has a newer release,
so ``envbuild lock`` resolves only what it must, and keeps what it may:

- **current steps are not resolved at all.** Step *i* is current when the lock records the same
  ``step_digest`` (python, ``[abi]`` and the ``[[step]]`` tables 1..i: ``serve.step_digests``),
  its file is the one ``lock.json`` hashed, and the lock was made for the same ``[target]``.
  The first step that is not current, and every step after it (they resolve under its pins),
  is resolved again. ``stale_steps`` says which and why; ``envbuild lock --check`` prints it
  without resolving, and a relock of an unchanged spec writes nothing.
- **a step resolved again prefers its last pins** (``preferences``): pip-compile and uv read
  an existing output file and keep every pin in it that still satisfies the input. The file
  envbuild hands them holds the step's own last pins, then the other steps' (a package that
  moved between steps keeps its version too).
- **pins move only when asked**: ``--upgrade-package NAME`` leaves NAME out of the preferences
  of every step, ``NAME==VERSION`` also constrains every step to that version, ``--upgrade``
  drops every preference. A step that pins an upgraded name, and every step after it, is
  resolved again even when current.
- a git requirement on a branch, a tag or HEAD keeps its locked commit while the spec names the
  same repository and ref (``vcs.ref``); ``--upgrade-package NAME`` asks ``git ls-remote`` again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild._io import sha256_file
from envbuild.errors import ConfigError
from envbuild.spec import StackSpec
from envbuild.spec._toml import did_you_mean
from envbuild.stacklock.model import Lock, LockedStep

__all__ = ["StepStatus", "Upgrade", "parse_upgrades", "preferences", "stale_steps"]


@dataclass(frozen=True)
class Upgrade:
    """What ``--upgrade`` / ``--upgrade-package NAME[==VERSION]`` asked to move."""

    everything: bool = False
    # canonical name -> version or None
    packages: Mapping[str, str | None] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.everything or bool(self.packages)

    def asks(self, name: str) -> bool:
        return self.everything or canonicalize_name(name) in self.packages

    def constraints(self) -> dict[str, str]:
        """``NAME==VERSION`` upgrades: constraints of every step."""
        return {n: v for n, v in self.packages.items() if v is not None}


def parse_upgrades(values: Sequence[str], everything: bool = False) -> Upgrade:
    """``--upgrade-package`` values (``NAME`` or ``NAME==VERSION``) into an ``Upgrade``."""
    packages: dict[str, str | None] = {}
    for raw in values:
        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            raise ConfigError(f"--upgrade-package {raw!r}: write NAME or NAME==VERSION") from exc
        specs = list(req.specifier)
        if (
            req.url
            or req.extras
            or req.marker
            or len(specs) > 1
            or (specs and specs[0].operator != "==")
        ):
            raise ConfigError(
                f"--upgrade-package {raw!r}: write NAME or NAME==VERSION (one exact version)"
            )
        packages[canonicalize_name(req.name)] = specs[0].version if specs else None
    if everything and packages:
        raise ConfigError("give --upgrade (every package) or --upgrade-package NAME, not both")
    return Upgrade(everything=everything, packages=packages)


def check_upgrade_names(upgrade: Upgrade, spec: StackSpec, old: Lock | None) -> None:
    """Every ``--upgrade-package`` name must be something the lock pins or the spec names."""
    known: set[str] = {n for s in spec.steps for n in s.names}
    if old is not None:
        known |= {canonicalize_name(p.name) for s in old.steps for p in s.packages}
    for name in upgrade.packages:
        if name not in known:
            raise ConfigError(
                f"--upgrade-package {name}: no step of {spec.name!r} pins or names it"
                + did_you_mean(name, sorted(known)),
                hint="Name a package the lock pins (see lock.json or the step files).",
            )


@dataclass(frozen=True)
class StepStatus:
    name: str
    current: bool
    reason: str = ""  # why it is resolved again ("" when current)
    # stale only because an earlier step is resolved again: kept as it is when that step's pins
    # come out the same (its own digest, file and flags are the lock's)
    soft: bool = False


def _file_ok(folder: Path, step: LockedStep) -> str:
    """Why the step's file is not the one ``lock.json`` recorded ("" when it is)."""
    if not step.locked:
        return ""
    path = folder / (step.file or "")
    if not step.file or not path.is_file():
        return f"its file {step.file} is missing"
    if sha256_file(path) != step.file_sha256:
        return f"its file {step.file} was changed after `envbuild lock` wrote it"
    return ""


def stale_steps(
    spec: StackSpec,
    old: Lock | None,
    digests: Sequence[str],
    *,
    skip: Sequence[str] = (),
    upgrade: Upgrade | None = None,
    resolve_all: bool = False,
    resolver: str = "auto",
) -> list[StepStatus]:
    """Each step of ``spec``: current in ``old`` (kept as it is), or resolved again, and why.
    ``resolver``: an explicit ``--resolver`` other than the one that made the lock resolves
    every step again.

    Reads only ``lock.json`` and the step files' sha256: nothing is resolved. A step after one
    that is resolved again is resolved again too (it resolves under that step's pins), unless
    that step's pins come out the same (``soft``).
    """
    upgrade = upgrade or Upgrade()
    target_moved = ""
    if old is not None and old.target:
        was = (old.target.get("python"), old.target.get("platform"))
        if was != (spec.python, spec.target.platform):
            target_moved = (
                f"the lock was made for Python {was[0]} on {was[1]}, the spec's [target] is "
                f"Python {spec.python} on {spec.target.platform}"
            )
        elif resolver != "auto" and old.target.get("resolver") != resolver:
            target_moved = (
                f"the lock was resolved by {old.target.get('resolver')}, --resolver {resolver} asks"
                " for another"
            )
    by_name = {s.name: s for s in old.steps} if old is not None else {}
    out: list[StepStatus] = []
    earlier = ""  # the first step resolved again
    for i, step in enumerate(spec.steps):
        entry = by_name.get(step.name)
        own = ""
        if old is None:
            own = "there is no lock yet"
        elif target_moved:
            own = target_moved
        elif resolve_all:
            own = "--resolve-all"
        elif entry is None:
            own = "it is new"
        elif i >= len(old.steps) or old.steps[i].name != step.name:
            own = "it moved to another position"
        elif entry.locked != (step.name not in skip):
            own = "it is locked now" if not entry.locked else "it is left out now (--skip-step)"
        elif why := _file_ok(old.folder, entry):
            own = why
        elif upgrade and (
            asked := sorted(
                {p.name for p in entry.packages if upgrade.asks(p.name)}
                | (set(step.names) & set(upgrade.packages))
            )
        ):
            own = f"upgrade asked ({', '.join(asked)})"
        same = entry is not None and i < len(digests) and entry.step_digest == digests[i]
        if own:
            status = StepStatus(step.name, False, own)
        elif earlier:
            status = StepStatus(
                step.name,
                False,
                f"it resolves under step {earlier!r}, which is resolved again",
                soft=same,
            )
        elif not same:
            assert entry is not None
            status = StepStatus(step.name, False, _changed(step.packages, entry))
        else:
            status = StepStatus(step.name, True)
        out.append(status)
        if not status.current and not earlier:
            earlier = step.name
    return out


def _changed(packages: Sequence[str], entry: LockedStep) -> str:
    if entry.requirements is not None and list(entry.requirements) != list(packages):
        return "its packages changed in the spec"
    return "its [[step]] table, python or [abi] changed in the spec"


def old_pins(old: Lock | None) -> dict[str, dict[str, str]]:
    """{step name: {package: version}} of the old lock (VCS pins left out: they have no version)."""
    if old is None:
        return {}
    return {
        s.name: {canonicalize_name(p.name): p.version for p in s.packages if p.version}
        for s in old.steps
    }


def preferences(step: str, pins: Mapping[str, Mapping[str, str]], upgrade: Upgrade) -> list[str]:
    """The ``name==version`` lines handed to the resolver as its existing output file: the step's
    own last pins first, then every other step's, minus what an upgrade asked to move."""
    if upgrade.everything:
        return []
    chosen: dict[str, str] = {}
    for name, version in pins.get(step, {}).items():
        chosen[name] = version
    for other, versions in pins.items():
        if other == step:
            continue
        for name, version in versions.items():
            chosen.setdefault(name, version)
    return [f"{n}=={v}" for n, v in sorted(chosen.items()) if n not in upgrade.packages]
