"""Exact sync: the environment holds what the selection installs and nothing else, as ``uv sync``.

``provision --lock`` records in the manifest (``Manifest.sync``) the names its selection installs;
after the steps, what else the venv holds is removed (``--inexact`` keeps it, as uv's flag does),
and ``verify`` calls it drift. What the selection installs and the venv no longer holds (a package
uninstalled by hand) is missing: a re-run puts it back, re-running the finished steps that install
it (``missing_steps``), and ``verify`` calls it drift too. Three things are never removed:

- the installer's seed packages of a venv envbuild made with them (pip, setuptools, wheel: the
  pip backend installs with pip);
- what an adopted environment (``--venv``, a base image) held before envbuild first provisioned
  it (``base``): the image's packages are its own, not a selection's;
- torch and its protected set (the guard's baseline): a removal that would touch them is refused
  (exit 6), so a narrower selection can never take the baseline away.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypedDict

from packaging.utils import canonicalize_name

from envbuild import events, guard
from envbuild.errors import ABIViolation, InstallError

__all__ = [
    "SEEDS",
    "SyncJSON",
    "extraneous",
    "missing",
    "missing_steps",
    "remove",
    "sync_record",
]

SEEDS = frozenset({"pip", "setuptools", "wheel"})  # a seeded venv's own (``--seed``, pip backend)


class _SyncJSON(TypedDict):
    exact: bool  # true: what the selection does not install is removed (false: --inexact)
    installs: list[str]  # the names the selection installs
    seeded: bool  # the venv holds the installer's seed packages (pip backend), kept


class SyncJSON(_SyncJSON, total=False):
    """The selection a root was provisioned with, in the manifest and the receipt's lock record."""

    base: list[str]  # an adopted environment: what it held before envbuild first provisioned it
    removed: list[
        str
    ]  # `name version` of what the last run removed (not installed by the selection)


def sync_record(
    installs: Iterable[str],
    *,
    exact: bool,
    seeded: bool,
    previous: Mapping[str, object] | None,
    site: Path | None,
) -> SyncJSON:
    """The manifest's record of a selection. ``site``: an adopted environment's site-packages
    (None: a venv envbuild made), whose own packages are recorded once, on the first run."""
    out: SyncJSON = {
        "exact": exact,
        "installs": sorted({str(canonicalize_name(n)) for n in installs}),
        "seeded": seeded,
    }
    base = previous.get("base") if previous else None
    if isinstance(base, list):
        out["base"] = [str(n) for n in base]
    elif site is not None:
        out["base"] = sorted(guard.scan(site))
    return out


def _names(value: object) -> set[str]:
    return {n for n in value if isinstance(n, str)} if isinstance(value, list) else set()


def extraneous(record: Mapping[str, object], dists: Mapping[str, guard.Dist]) -> list[guard.Dist]:
    """What ``dists`` holds beyond the recorded selection (and the seeds, and an adopted base)."""
    keep = _names(record.get("installs")) | _names(record.get("base"))
    if record.get("seeded"):
        keep |= SEEDS
    return [d for name, d in sorted(dists.items()) if name not in keep]


def missing(record: Mapping[str, object], dists: Mapping[str, guard.Dist]) -> list[str]:
    """The names the recorded selection installs that ``dists`` does not hold."""
    return sorted(_names(record.get("installs")) - set(dists))


def missing_steps(
    steps: Iterable[tuple[str, Iterable[str]]], selection: Iterable[str], site: Path
) -> dict[str, list[str]]:
    """{step: the names it installs, of ``selection``, that ``site`` no longer holds} for each of
    ``steps`` ((name, the canonical names it installs)) with one: the steps a re-run puts back.
    Reads the dist-info names only (``guard.scan``): the no-op re-run stays fast."""
    wanted = {str(canonicalize_name(n)) for n in selection}
    held = guard.scan(site) if site.is_dir() else {}
    out: dict[str, list[str]] = {}
    for step, names in steps:
        gone = sorted({str(n) for n in names} & wanted - set(held))
        if gone:
            out[step] = gone
    return out


def remove(
    python: Path,
    dists: list[guard.Dist],
    protected: Iterable[str],
    *,
    backend: str,
    env: Mapping[str, str],
    log_file: Path,
) -> list[str]:
    """Uninstall ``dists`` from the venv of ``python`` with the run's installer; returns ``name
    version`` of each. ABIViolation (exit 6): one of them is torch or its protected set."""
    from envbuild.installer.python import find_uv
    from envbuild.run import run

    if not dists:
        return []
    guarded = {str(canonicalize_name(n)) for n in protected}
    hit = [f"{d.name} {d.version}" for d in dists if d.name in guarded]
    if hit:
        raise ABIViolation(
            f"the selection no longer installs {', '.join(hit)}, part of the ABI baseline: "
            "removing it would take the baseline away, so nothing was removed",
            hint="Provision this selection into a new root, or keep what is there with --inexact.",
        )
    names = [d.name for d in dists]
    uv = find_uv() if backend == "uv" else None
    if uv is not None:
        argv: list[str | Path] = [uv, "pip", "uninstall", "--python", python, *names]
    else:
        argv = [python, "-m", "pip", "uninstall", "--yes", *names]
    out = run(argv, env=env, log_file=log_file)
    if not out.ok:
        raise InstallError(
            f"removing what the selection no longer installs ({', '.join(names)}) "
            f"failed; see {log_file}",
            hint="Run provision again, or keep them with --inexact.",
        )
    gone = [f"{d.name} {d.version}" for d in dists]
    events.emit(
        "info",
        f"exact sync: removed {len(gone)} package(s) the selection does not install: "
        + ", ".join(gone)
        + " (--inexact keeps them)",
    )
    return gone
