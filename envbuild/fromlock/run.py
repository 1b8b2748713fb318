"""``provision --lock``: read, choose, gate, stage, adopt, then provision's own guarded run.

Every refusal comes before anything is made: an unreadable or unsupported lock and an ambiguous
selection (exit 2), a lock the gate fails (exit 8), a venv whose torch is not the lock's (exit 6),
file hosts that do not answer (exit 3), an offline wheelhouse that lacks a file or holds other
bytes than the lock pins (exit 5, ``fromlock.offline``). Then ``envbuild.provision.provision``
runs the stages as steps (``fromlock.stack``).

Adopting the torch that is there: a ``--venv`` that already holds the lock's exact torch
(version and local tag, every file as its RECORD lists it) keeps it as the baseline, unstamped
and with no download. Every other locked package the venv already holds at the locked version,
each of its files present at the size its RECORD lists, is kept too (as ``uv sync`` keeps an
installed package of the right version): in a base image that has the stack, the stages install
only what it lacks. What was kept is decided once per root (``adopted.json``). A different torch
is refused with both versions named, or replaced with ``--replace-torch``.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from envbuild import events, guard, layout
from envbuild.errors import ABIViolation, ConfigError, InstallError, LockError, PreflightError
from envbuild.fromlock.select import (
    Chosen,
    Request,
    choose,
    gate,
    host_platform_key,
    read_lock,
    refuse,
)
from envbuild.fromlock.stack import HOME_LINKS, stack_for, stage_files
from envbuild.fromlock.stages import StagePlan, host_glibc, plan_stages
from envbuild.fromlock.uvsync import SyncFlags
from envbuild.gate.check import FileReport
from envbuild.gate.findings import Finding
from envbuild.gate.model import Format
from envbuild.index.download import download
from envbuild.index.net import redact
from envbuild.provision.options import ProvisionOptions, ProvisionResult
from envbuild.spec import StackSpec

if TYPE_CHECKING:
    from envbuild.fromlock.image import SliceSourceJSON

__all__ = ["LockRequest", "Prepared", "adopt", "prepare", "provision_lock", "provision_slice", "unreachable_hosts"]

DEFAULT_ROOT = "/mnt/data"


@dataclass(frozen=True, kw_only=True)
class LockRequest:
    """What ``provision --lock`` / ``plan --lock`` are asked, beside provision's own options."""

    lock: Path
    fmt: Format | None = None
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    accept: Path | None = None
    project: bool = True
    replace_torch: bool = False
    require_hashes: bool = False  # refuse a lock that records no sha256 for a file it installs (before anything is made)
    base_torch: str | None = None  # the torch the --venv already has: the baseline of a lock that leaves torch to it
    wheelhouse: str | None = None  # --offline --wheelhouse DIR: every file from there, none from the network
    rebuild_mismatched: bool = False  # build a mismatched prebuilt extension from its sdist (``fromlock.rebuild``)
    sync: SyncFlags = SyncFlags()  # uv sync's selection and install flags (``--extra`` and ``--group`` included)


@dataclass
class Prepared:
    chosen: Chosen
    report: FileReport
    plan: StagePlan
    adopted: str | None = None  # the venv's torch, kept as the baseline
    already: tuple[str, ...] = ()  # packages the adopted venv holds at the locked version
    full: StagePlan | None = None  # the plan before adoption left out what the venv holds (the spec digest's)
    failing: tuple[Finding, ...] = ()  # the gate's failing findings (``prepare(refusing=False)`` only)


def target_python(req: LockRequest, python: str | None, venv: Path | None) -> str:
    """The Python minor the environment is for: the --venv's, the --python's, the lock folder's
    ``.python-version`` (uv's rule), else this interpreter's."""
    from envbuild.installer import probe_python

    exe: str | Path | None = None
    if venv is not None:
        exe = venv.expanduser() / "bin" / "python"
        if not Path(exe).exists():
            raise PreflightError(f"--venv {venv}: no environment there (no {exe})")
    elif python is not None:
        import shutil

        exe = shutil.which(python) or (python if Path(python).exists() else None)
        if exe is None:
            raise PreflightError(f"--python {python}: no such interpreter")
    if exe is not None:
        probed = probe_python(exe)
        if probed is None:
            raise PreflightError(f"{exe}: the interpreter does not run")
        return ".".join(probed.version.split(".")[:2])
    pinned = req.lock.parent / ".python-version"
    try:
        text = pinned.read_text(encoding="utf-8").split()[0] if pinned.is_file() else ""
    except (OSError, IndexError):
        text = ""
    if text and text[:1].isdigit():
        return ".".join(text.split(".")[:2])
    return python_for_lock(req.lock)


def _requires_python(lock: Path) -> str | None:
    """The lock's top-level ``requires-python`` (uv.lock, pylock.toml), read without parsing the whole file."""
    import re

    try:
        with lock.open(encoding="utf-8") as f:
            for line in f:
                if line.startswith("["):
                    return None
                m = re.match(r'\s*requires-python\s*=\s*["\']([^"\']*)["\']', line)
                if m:
                    return m.group(1)
    except (OSError, UnicodeDecodeError):
        return None
    return None


def python_for_lock(lock: Path) -> str:
    """The Python minor a lock is installed with, as uv chooses: this interpreter's when it fits the
    lock's ``requires-python``; else the newest that does among the interpreters found (``python3.N``
    on PATH, pyenv's, ``/usr/bin``, then ``uv python find``). PreflightError (exit 3) naming
    ``requires-python`` and what was looked at when none fits."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    text = _requires_python(lock)
    try:
        spec = SpecifierSet(text) if text else None
    except InvalidSpecifier:
        spec = None
    if spec is None or spec.contains(f"{here}.{sys.version_info[2]}", prereleases=True):
        return here
    from envbuild.installer.python import _candidates, probe_python

    looked: list[str] = [f"{sys.executable} ({here})"]
    for minor in range(20, 7, -1):
        version = f"3.{minor}"
        if not any(spec.contains(f"{version}.{patch}", prereleases=True) for patch in (0, 5, 20)):
            continue
        for exe in dict.fromkeys(_candidates(version)):
            if not Path(exe).exists():
                continue
            info = probe_python(exe)
            if info is None:
                continue
            got = ".".join(info.version.split(".")[:2])
            if got == version and spec.contains(info.version, prereleases=True):
                events.emit("info", f"the lock requires Python {text}, and this interpreter is {here}: installing for "
                            f"Python {version} ({info.executable}); --python chooses another")
                return version
            looked.append(f"{exe} ({got})")
    found = _uv_python_find(text or "")
    if found is not None:
        events.emit("info", f"the lock requires Python {text}: installing for Python {found[0]} ({found[1]}, found by "
                    "uv python find)")
        return found[0]
    raise PreflightError(f"{lock}: the lock requires Python {text}, and no interpreter here fits it (looked at: "
                         f"{', '.join(dict.fromkeys(looked))}, and uv python find)",
                         hint="Install a Python the lock allows (e.g. `uv python install`), or name one with --python.")


def _uv_python_find(requires: str) -> tuple[str, str] | None:
    """``uv python find REQUIRES``: (minor, executable) of an interpreter uv knows, else None."""
    from envbuild.installer.python import find_uv, probe_python
    from envbuild.run import run

    uv = find_uv()
    if uv is None or not requires:
        return None
    try:
        out = run([uv, "python", "find", "--no-python-downloads", requires], capture=True, separate_stderr=True,
                  timeout=30)
    except OSError:
        return None
    exe = (out.output or "").strip().splitlines()[-1] if out.ok and out.output else ""
    info = probe_python(exe) if exe else None
    return (".".join(info.version.split(".")[:2]), str(info.executable)) if info is not None else None


def prepare(req: LockRequest, python: str, *, refusing: bool = True) -> Prepared:
    """Read, choose, gate and stage (no network, no venv): what ``plan --lock`` prints. A lock the
    gate fails is refused here (exit 8), unless ``refusing`` is off: ``plan --lock`` shows its
    stages first, then refuses it."""
    lock, sha = read_lock(req.lock, req.fmt)
    request = Request(python=python, extras=req.extras, groups=req.groups, environment=req.environment, fmt=req.fmt,
                      sync=req.sync)
    chosen = choose(lock, sha, request)
    report, failing = gate(chosen, request, req.accept)
    if not req.rebuild_mismatched:
        if refusing:
            refuse(chosen, failing, req.accept)
        prepared = Prepared(chosen, report, plan_stages(chosen, project=req.project, base_torch=req.base_torch),
                            failing=tuple(failing))
        _say_unhashed(prepared, req)
        _check_base_torch(prepared)
        return prepared
    from envbuild.fromlock.offline import wheelhouse_folder
    from envbuild.fromlock.rebuild import RULE, rebuild_mismatched

    if refusing and any(f.rule != RULE for f in failing):  # refused before any index is asked for an sdist
        refuse(chosen, failing, req.accept, rebuild=True)
    folder = wheelhouse_folder(req.wheelhouse) if req.wheelhouse else None
    plan, failing = rebuild_mismatched(plan_stages(chosen, project=req.project, base_torch=req.base_torch), failing,
                                       wheelhouse=folder)
    if refusing:
        refuse(chosen, failing, req.accept, rebuild=True)
    prepared = Prepared(chosen, report, plan, failing=tuple(failing))
    _say_unhashed(prepared, req)
    _check_base_torch(prepared)
    return prepared


def _say_unhashed(prepared: Prepared, req: LockRequest) -> None:
    """One notice naming the files the lock records no sha256 for (uv installs them as they are);
    with ``--require-hashes`` a refusal before anything is made (exit 8)."""
    from envbuild.fromlock.stages import unhashed

    found = unhashed(prepared.plan)
    if not found:
        return
    names = ", ".join(f"{p.label} ({p.artifact.filename if p.artifact else '?'})" for p in found[:6])
    more = f" and {len(found) - 6} more" if len(found) > 6 else ""
    if req.require_hashes:
        raise LockError(f"{prepared.chosen.path}: the lock records no sha256 for {len(found)} file(s) it installs, and "
                        f"--require-hashes was given, so nothing was installed: {names}{more}",
                        hint="Re-lock from an index that serves hashes (uv records none for a local flat index or a "
                        "find-links folder), or drop --require-hashes to pin the files' sha256 on first install.")
    events.emit("warn", f"the lock records no sha256 for {len(found)} file(s): {names}{more}; they install as uv "
                "installs them, and the sha256 of the bytes installed is recorded (manifest and receipt) and required "
                "from then on")


def base_torch_of(venv: Path | None) -> str | None:
    """The distribution version of the torch ``venv`` already has (None: no venv, or no torch in it)."""
    env = _env(venv) if venv is not None else None
    return env.torch.version if env is not None and env.torch is not None else None


def _check_base_torch(prepared: Prepared) -> None:
    """A lock that leaves torch to the base environment: every locked package that depends on torch
    has its declared requirement on torch checked against the torch that is there (its metadata:
    from the lock, the cache, else its index). LockError (exit 8) naming the packages it does not
    meet, before anything is made; a requirement that cannot be read is said, not guessed."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    from envbuild.fromlock.stages import BASE_TORCH_KEY
    from envbuild.gate.metadata import declared_requirements

    plan = prepared.plan
    if plan.torch.key != BASE_TORCH_KEY or not plan.torch.version:
        return
    try:
        have = Version(plan.torch.version)
    except InvalidVersion:
        return
    values = prepared.chosen.env.values
    unmet: list[str] = []
    unread: list[str] = []
    for p in plan.placed:
        if "torch" not in (p.entry.dependencies or ()):
            continue
        reqs = declared_requirements(p.entry, prepared.chosen.lock, offline=False)
        if reqs is None:
            unread.append(p.label)
            continue
        for text in reqs:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.name.lower() != "torch" or (req.marker is not None and not req.marker.evaluate({**values, "extra": ""})):
                continue
            if req.specifier and not req.specifier.contains(have.public, prereleases=True) \
                    and not req.specifier.contains(have, prereleases=True):
                unmet.append(f"{p.label} requires {text.split(';')[0].strip()}")
    if unread:
        events.emit("warn", f"the requirement on torch of {', '.join(unread)} could not be read (no metadata in the lock, "
                    "the cache or a reachable index): not checked against the environment's torch")
    if unmet:
        raise LockError(f"{prepared.chosen.path}: the lock leaves torch to the environment, whose torch {plan.torch.version} "
                        f"does not meet what locked packages require, so nothing was installed: {'; '.join(unmet)}",
                        hint="Use a base image with a torch they accept, or re-lock them for this torch.")


def pin_unhashed(plan: StagePlan, state: Path) -> tuple[StagePlan, dict[str, dict[str, str]]]:
    """The files the lock records no sha256 for, pinned: a remote one is downloaded (streamed) into
    ``state/unhashed/`` and installed from there, so the bytes hashed are the bytes installed. The
    sha256 of each is recorded in ``state/unhashed.json`` on first install and required from then on
    (InstallError, exit 5, when a file changed). Returns the plan and {name: {url, file, sha256}}."""
    import json

    from envbuild._io import atomic_write_json, sha256_file
    from envbuild.fromlock.stages import LockedFile, Placed

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
                raise InstallError(f"{state}: cannot write the download of {redact(art.url)} "
                                   f"({exc.strerror or exc})", hint="Free space on the data root.") from exc
            art = LockedFile(local.as_uri(), sha256_file(local), art.filename)
        assert art.sha256 is not None
        was = known.get(p.artifact.url)
        if isinstance(was, str) and was != art.sha256:
            raise InstallError(f"{p.artifact.url}: the lock records no sha256 for {p.label}, and its bytes changed since "
                               f"they were first installed here (sha256 {was[:16]}... then, {art.sha256[:16]}... now); "
                               "nothing was installed", hint="Find out why the file changed; re-lock with hashes, or "
                               f"delete {record_path} to accept the new bytes.")
        known[p.artifact.url] = art.sha256
        pinned[p.entry.name] = {"url": p.artifact.url, "file": art.filename, "sha256": art.sha256}
        placed[i] = Placed(p.entry, p.stage, p.why, art, f"{p.entry.name} @ {art.url} --hash=sha256:{art.sha256}",
                           needs_glibc=p.needs_glibc, rebuilt=p.rebuilt, unhashed=True)
    state.mkdir(parents=True, exist_ok=True)
    atomic_write_json(record_path, known)
    return replace(plan, placed=placed), pinned


def rebuilt_record(plan: StagePlan) -> dict[str, object]:
    """What a receipt's lock record says of ``--rebuild-mismatched`` builds: {name: where its sdist
    came from, and that the lock does not pin it} ({} where nothing was rebuilt)."""
    rebuilt = {p.entry.name: p.rebuilt for p in plan.placed if p.rebuilt}
    return {"rebuilt": rebuilt} if rebuilt else {}


@dataclass(frozen=True)
class _Env:
    """An environment's site-packages, its distributions and its torch (None without)."""

    site: Path
    dists: dict[str, guard.Dist]

    @property
    def torch(self) -> guard.Dist | None:
        return self.dists.get("torch")

    def torch_versions(self) -> tuple[str, ...]:
        """torch's version as its metadata and as its runtime (``version.py``) say; () without torch."""
        if self.torch is None:
            return ()
        return (self.torch.version, guard.read_runtime_version(self.site) or self.torch.version)


def _env(prefix: Path) -> _Env | None:
    """The environment at ``prefix`` (a venv, or a base image's prefix); None where there is none."""
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
            events.emit("warn", f"--replace-torch: {venv} has torch {runtime}; the lock's {want} replaces it")
            return prepared
        raise ABIViolation(f"{venv} has torch {runtime}, the lock installs torch {want}: provisioning would replace "
                           "the environment's torch (and every extension built against it); nothing was changed",
                           hint="Use an environment with the lock's torch, re-lock for the torch that is there, or "
                           "replace it knowingly with --replace-torch.")
    plan = prepared.plan
    already = tuple(p.entry.name for p in plan.placed if p.entry is not plan.torch and p.stage != "project"
                    and (d := env.dists.get(p.entry.name)) is not None and d.version == p.entry.version)
    events.emit("info", f"adopting {venv}'s torch {runtime}: the lock's own, kept as the baseline (no download)")
    adopted = _keeping(replace(prepared, adopted=runtime, full=plan), already, f"{venv} already has torch {runtime}")
    return verify_adoption(adopted, venv) if verify else adopted


def verify_adoption(prepared: Prepared, venv: Path) -> Prepared:
    """torch's files as its RECORD lists them (exit 6 otherwise), and of the packages kept by version
    only those whose RECORD files are all there at their size: a base image holds thousands of
    files, and the guard watches torch's."""
    env = _env(venv)
    assert env is not None and env.torch is not None  # adopt() found them
    bad = guard.files_differ(env.torch, env.site)
    if bad:
        raise ABIViolation(f"{venv} has torch {prepared.adopted}, the lock's version, but {len(bad)} of its files "
                           f"differ from its RECORD ({', '.join(bad[:3])}): it was changed after it was installed; "
                           "nothing was changed", hint="Reinstall torch there, or replace it with --replace-torch.")
    intact = tuple(n for n in prepared.already if not guard.files_differ(env.dists[n], env.site, hash_limit=0))
    if intact == prepared.already:
        return prepared
    return _keeping(prepared, intact, f"{venv} already has torch {prepared.adopted}")


def _keeping(prepared: Prepared, already: tuple[str, ...], torch_why: str) -> Prepared:
    """``prepared`` whose plan leaves out the adopted torch and ``already`` (of its full plan)."""
    plan = prepared.full or prepared.plan
    kept = [p for p in plan.placed if p.entry is not plan.torch and p.entry.name not in already]
    left = [*plan.left_out, ("torch", f"adopted: {torch_why} (RECORD intact)"),
            *((n, "already in the adopted environment at the locked version (its RECORD's files present)") for n in already)]
    return replace(prepared, plan=replace(plan, placed=kept, left_out=left), already=already)


def _first_adoption(prepared: Prepared, digest: str, paths: layout.Paths, venv: Path) -> Prepared:
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
    if isinstance(doc, dict) and doc.get("digest") == digest and isinstance(doc.get("already"), list) \
            and doc.get("torch_record_sha256") == _torch_record(venv):
        names = tuple(n for n in doc["already"] if isinstance(n, str))
        return prepared if set(names) == set(prepared.already) else \
            _keeping(prepared, names, f"the environment's torch {prepared.adopted}")
    return verify_adoption(prepared, venv)


def _torch_record(venv: Path) -> str | None:
    env = _env(venv)
    return env.torch.record_sha256 if env is not None and env.torch is not None else None


def _record_adoption(prepared: Prepared, digest: str, paths: layout.Paths, venv: Path) -> None:
    """After a provision that adopted: what it kept, for ``_first_adoption`` (a re-run keeps the same)."""
    from envbuild._io import atomic_write_json

    record = paths.state / "adopted.json"
    if prepared.full is not None and paths.state.is_dir():
        atomic_write_json(record, {"digest": digest, "torch": prepared.adopted, "already": list(prepared.already),
                                   "torch_record_sha256": _torch_record(venv)})


def _say_python_has_torch(python: str, want: str) -> None:
    """``--python`` whose own environment (a base image's) already holds the lock's torch: the venv
    made with it gets a second copy; say how to keep the one that is there (``--venv PREFIX``)."""
    from envbuild.run import run

    try:
        out = run([python, "-I", "-c", "import sys; print(sys.prefix)"], capture=True, separate_stderr=True,
                  timeout=20)
    except OSError:
        return
    prefix = Path((out.output or "").strip().splitlines()[-1]) if out.ok and out.output else None
    env = _env(prefix) if prefix is not None else None
    have = env.torch_versions() if env is not None else ()
    if have and want in have:
        events.emit("warn", f"--python {python}: its environment ({prefix}) already has the lock's torch {have[-1]}; "
                    f"the venv made with it installs torch again. To keep the one that is there as the baseline (no "
                    f"download), provision into that environment: --venv {prefix}")


def unreachable_hosts(prepared: Prepared, spec_steps: set[str]) -> list[str]:
    """HEAD of one file per host the stages still to run download from (file:// is the installer's)."""
    from envbuild.index.net import unreachable

    first: dict[str, str] = {}
    for p in prepared.plan.placed:
        if p.stage not in spec_steps or p.artifact is None:
            continue
        parts = urlsplit(p.artifact.url)
        if parts.scheme in ("http", "https"):
            first.setdefault(f"{parts.scheme}://{parts.netloc}", p.artifact.url)
    return unreachable(first.values())


def provision_lock(req: LockRequest, opts: ProvisionOptions) -> tuple[Prepared, ProvisionResult]:
    """Provision the lock's chosen environment (see the module docstring)."""
    from envbuild.fromlock.builds import BuildCache, caches
    from envbuild.fromlock.offline import check_files, in_wheelhouse, wheelhouse_folder
    from envbuild.installer import installer_for
    from envbuild.provision.core import pending_steps, provision

    folder = wheelhouse_folder(req.wheelhouse) if req.wheelhouse else None
    python = target_python(req, opts.python, opts.venv)
    if opts.venv is not None and req.base_torch is None:
        req = replace(req, base_torch=base_torch_of(opts.venv))
    prepared = prepare(req, python)
    here = host_platform_key().replace("-", " ")
    if prepared.chosen.env.platform != here:
        raise ConfigError(f"--environment chose {prepared.chosen.env.platform}, and this host is {here}: provision "
                          "installs on this host", hint="`envbuild plan --lock` shows another platform's stages.")
    newer = [p for p in prepared.plan.placed if p.needs_glibc is not None]
    if newer:
        have = host_glibc()
        raise ConfigError(f"{prepared.chosen.path}: {len(newer)} package(s) of {prepared.chosen.env.name} have only "
                          f"wheels for a newer glibc than this host's ({f'2.{have}' if have else 'none'}), so nothing "
                          "was installed: " + ", ".join(f"{p.label} ({p.artifact.filename if p.artifact else '?'})"
                                                        for p in newer[:5]),
                          hint="Provision on a host with that glibc (or in an image based on one: `envbuild docker "
                          "--lock`), or re-lock with an older manylinux wheel of them.")
    if opts.venv is not None:
        prepared = adopt(prepared, opts.venv, req.replace_torch, verify=False)  # the files: _first_adoption
    elif opts.python is not None:
        _say_python_has_torch(opts.python, prepared.plan.torch.version or "")
    backend = installer_for(opts.backend).name
    pip_backend = backend == "pip"
    root = str(opts.root) if opts.root is not None else DEFAULT_ROOT
    links = HOME_LINKS if opts.home is not None else None  # --home: $HOME/venv and $HOME/data, as the stacks make them
    spec = stack_for(prepared.plan, root=root, adopt=prepared.adopted is not None, pip_backend=pip_backend,
                     torch_version=prepared.adopted, digest_plan=prepared.full, links=links)
    paths = layout.paths_for(spec, opts.root)
    if prepared.full is not None and opts.venv is not None:
        kept = _first_adoption(prepared, spec.digest, paths, opts.venv)
        if kept is not prepared:
            prepared = kept
            spec = stack_for(prepared.plan, root=root, adopt=True, pip_backend=pip_backend,
                             torch_version=prepared.adopted, digest_plan=prepared.full, links=links)
    source = {**prepared.chosen.to_json(), "stages": {s.name: list(s.packages) for s in spec.steps},
              "adopted_torch": prepared.adopted, "wheelhouse": str(folder) if folder else None,
              # what the adopted venv already held, by the stage it would have gone to (smoke checks them too)
              "kept": {p.entry.name: p.stage for p in (prepared.full.placed if prepared.full else ())
                       if p.entry.name in prepared.already}, **rebuilt_record(prepared.plan)}
    run_opts = replace(opts, backend=backend, seed=pip_backend, lock_source=source)
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        if folder is None:
            plan, pinned = pin_unhashed(prepared.plan, paths.state)
            if pinned:
                source["unhashed"] = pinned
                run_opts = replace(run_opts, lock_source=source)
        else:
            plan = in_wheelhouse(prepared.plan, folder)
        locked = stage_files(plan, spec, Path(tmp), pip_backend=pip_backend)
        todo = set(pending_steps(spec, replace(run_opts, locked=locked), paths))  # what provision will run
        if folder is None:
            if todo and (bad := unreachable_hosts(prepared, todo)):
                raise PreflightError("the lock's file hosts do not answer: " + "; ".join(bad),
                                     hint="Check the network (or a proxy), or provision where they can be reached.")
        else:  # the offline check hashes the files of the steps still to run: a finished root re-verifies
            check_files(plan, folder, todo)
        builds = BuildCache(plan.chosen.path, caches(paths.root, folder), paths.state / "builds", Path(tmp))
        result = provision(spec, replace(run_opts, locked=locked, prepare_steps={"builds": builds}))
    if opts.venv is not None:
        _record_adoption(prepared, spec.digest, paths, opts.venv)  # provision raised if it did not finish
    return prepared, result


def provision_slice(path: Path, opts: ProvisionOptions) -> tuple[StackSpec, SliceSourceJSON, ProvisionResult]:
    """``provision --lock SLICE``: the stages of one image layer's slice (``fromlock.image``). The gate
    ran when the Dockerfile was rendered; the slice's stages are installed as ``provision_lock``
    installs them, each from its hash-pinned lines, the guard after each."""
    from envbuild.fromlock.builds import BuildCache, caches
    from envbuild.fromlock.image import read_slice
    from envbuild.installer import installer_for
    from envbuild.provision.core import provision

    backend = installer_for(opts.backend).name
    spec, texts, source = read_slice(path, str(opts.root) if opts.root is not None else DEFAULT_ROOT)
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        locked = {}
        for n, step in enumerate(spec.steps, 1):
            locked[step.name] = Path(tmp) / f"{n:02d}-{step.name}.txt"
            locked[step.name].write_text(texts[step.name], encoding="utf-8")
        paths = layout.paths_for(spec, opts.root)
        builds = BuildCache(path, caches(paths.root, None), paths.state / "builds", Path(tmp))
        result = provision(spec, replace(opts, backend=backend, locked=locked, seed=backend == "pip",
                                         lock_source=source, prepare_steps={"builds": builds}))
    return spec, source, result
