"""Adopting the torch an environment already has (``provision --lock --venv``).

A ``--venv`` that already holds the lock's exact torch (version and local tag, every file as its
RECORD lists it) keeps it as the baseline, unstamped and with no download. Every other locked
package the venv already holds at the locked version, each of its files present at the size its
RECORD lists, is kept too (as ``uv sync`` keeps an installed package of the right version): in a
base image that has the stack, the stages install only what it lacks. What was kept is decided
once per root (``adopted.json``). A different torch is refused with both versions named, or
replaced with ``--replace-torch``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from envbuild import events, guard, layout
from envbuild.errors import ABIViolation
from envbuild.projectlock.request import Prepared

__all__ = [
    "adopt",
    "base_torch_of",
    "first_adoption",
    "record_adoption",
    "say_python_has_torch",
    "verify_adoption",
]


def base_torch_of(venv: Path | None) -> str | None:
    """The distribution version of the torch ``venv`` already has (None: no venv, or no torch in
    it)."""
    env = _env(venv) if venv is not None else None
    return env.torch.version if env is not None and env.torch is not None else None


@dataclass(frozen=True)
class _Env:
    """An environment's site-packages, its distributions and its torch (None without)."""

    site: Path
    dists: dict[str, guard.Dist]

    @property
    def torch(self) -> guard.Dist | None:
        return self.dists.get("torch")

    def torch_versions(self) -> tuple[str, ...]:
        """torch's version as its metadata and as its runtime (``version.py``) say; () without
        torch."""
        if self.torch is None:
            return ()
        return (self.torch.version, guard.read_runtime_version(self.site) or self.torch.version)


def _env(prefix: Path) -> _Env | None:
    """The environment at ``prefix`` (a venv, or a base image's prefix); None where there is
    none."""
    try:
        site = guard.site_packages(prefix.expanduser())
    except FileNotFoundError:
        return None
    return _Env(site, guard.scan(site))


def adopt(prepared: Prepared, venv: Path, replace_torch: bool, *, verify: bool = True) -> Prepared:
    """Keep the venv's torch when it is the lock's (see the module docstring). ``verify`` off: by
    versions alone, the files looked at later by ``verify_adoption`` (unless a finished root's
    record says what was kept, with torch's RECORD unchanged since)."""
    env = _env(venv)
    if env is None or env.torch is None:
        return prepared
    have_version, runtime = env.torch_versions()
    want = prepared.plan.torch.version or ""
    if want not in (have_version, runtime):
        if replace_torch:
            events.emit(
                "warn",
                f"--replace-torch: {venv} has torch {runtime}; the lock's {want} replaces it",
            )
            return prepared
        raise ABIViolation(
            f"{venv} has torch {runtime}, the lock installs torch {want}: provisioning would"
            " replace the environment's torch (and every extension built against it); nothing was"
            " changed",
            hint=(
                "Use an environment with the lock's torch, re-lock for the torch that is there, or "
                "replace it knowingly with --replace-torch."
            ),
        )
    plan = prepared.plan
    already = tuple(
        p.entry.name
        for p in plan.placed
        if p.entry is not plan.torch
        and p.stage != "project"
        and (d := env.dists.get(p.entry.name)) is not None
        and d.version == p.entry.version
    )
    events.emit(
        "info",
        f"adopting {venv}'s torch {runtime}: the lock's own, kept as the baseline (no download)",
    )
    adopted = _keeping(
        replace(prepared, adopted=runtime, full=plan),
        already,
        f"{venv} already has torch {runtime}",
    )
    return verify_adoption(adopted, venv) if verify else adopted


def verify_adoption(prepared: Prepared, venv: Path) -> Prepared:
    """torch's files as its RECORD lists them (exit 6 otherwise), and of the packages kept by
    version only those whose RECORD files are all there at their size: a base image holds thousands
    of files, and the guard watches torch's."""
    env = _env(venv)
    assert env is not None and env.torch is not None  # adopt() found them
    bad = guard.files_differ(env.torch, env.site)
    if bad:
        raise ABIViolation(
            f"{venv} has torch {prepared.adopted}, the lock's version, but {len(bad)} of its files"
            f" differ from its RECORD ({', '.join(bad[:3])}): it was changed after it was"
            " installed; nothing was changed",
            hint="Reinstall torch there, or replace it with --replace-torch.",
        )
    intact = tuple(
        n for n in prepared.already if not guard.files_differ(env.dists[n], env.site, hash_limit=0)
    )
    if intact == prepared.already:
        return prepared
    return _keeping(prepared, intact, f"{venv} already has torch {prepared.adopted}")


def _keeping(prepared: Prepared, already: tuple[str, ...], torch_why: str) -> Prepared:
    """``prepared`` whose plan leaves out the adopted torch and ``already`` (of its full plan)."""
    plan = prepared.full or prepared.plan
    kept = [p for p in plan.placed if p.entry is not plan.torch and p.entry.name not in already]
    left = [
        *plan.left_out,
        ("torch", f"adopted: {torch_why} (RECORD intact)"),
        *(
            (
                n,
                (
                    "already in the adopted environment at the locked version (its RECORD's files"
                    " present)"
                ),
            )
            for n in already
        ),
    ]
    return replace(prepared, plan=replace(plan, placed=kept, left_out=left), already=already)


def first_adoption(prepared: Prepared, digest: str, paths: layout.Paths, venv: Path) -> Prepared:
    """What the first provision of this root kept, on a re-run of the same lock environment; the
    files looked at (``verify_adoption``) on a first run.

    A re-run finds in the venv what the first run installed, at the locked version: left out
    again, the stages would shrink and the steps look changed. What was kept is therefore decided
    once per root and lock environment (``<root>/.envbuild/adopted.json``, with torch's RECORD
    sha256 then); a re-run with torch's RECORD unchanged keeps the same packages without looking
    at their files again, and a finished environment is a no-op."""
    import json

    record = paths.state / "adopted.json"
    try:
        doc = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if (
        isinstance(doc, dict)
        and doc.get("digest") == digest
        and isinstance(doc.get("already"), list)
        and doc.get("torch_record_sha256") == _torch_record(venv)
    ):
        names = tuple(n for n in doc["already"] if isinstance(n, str))
        return (
            prepared
            if set(names) == set(prepared.already)
            else _keeping(prepared, names, f"the environment's torch {prepared.adopted}")
        )
    return verify_adoption(prepared, venv)


def _torch_record(venv: Path) -> str | None:
    env = _env(venv)
    return env.torch.record_sha256 if env is not None and env.torch is not None else None


def record_adoption(prepared: Prepared, digest: str, paths: layout.Paths, venv: Path) -> None:
    """After a provision that adopted: what it kept, for ``first_adoption`` (a re-run keeps the
    same)."""
    from envbuild._io import atomic_write_json

    record = paths.state / "adopted.json"
    if prepared.full is not None and paths.state.is_dir():
        atomic_write_json(
            record,
            {
                "digest": digest,
                "torch": prepared.adopted,
                "already": list(prepared.already),
                "torch_record_sha256": _torch_record(venv),
            },
        )


def say_python_has_torch(python: str, want: str) -> None:
    """``--python`` whose own environment (a base image's) already holds the lock's torch: the venv
    made with it gets a second copy; say how to keep the one that is there (``--venv PREFIX``)."""
    from envbuild.run import run

    try:
        out = run(
            [python, "-I", "-c", "import sys; print(sys.prefix)"],
            capture=True,
            separate_stderr=True,
            timeout=20,
        )
    except OSError:
        return
    prefix = Path((out.output or "").strip().splitlines()[-1]) if out.ok and out.output else None
    env = _env(prefix) if prefix is not None else None
    have = env.torch_versions() if env is not None else ()
    if have and want in have:
        events.emit(
            "warn",
            f"--python {python}: its environment ({prefix}) already has the lock's torch"
            f" {have[-1]}; the venv made with it installs torch again. To keep the one that is"
            " there as the baseline (no download), provision into that environment: --venv"
            f" {prefix}",
        )
