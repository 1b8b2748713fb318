"""Where the steps to run take their packages from: a locked file from any source that serves its
sha256.

A locked step pins every file by sha256 and installs under ``--require-hashes`` (pip) or
``--verify-hashes`` (uv): no file with another hash is ever installed, so the host that serves
the bytes decides only whether the step can run, never what it installs. Before anything is
made, for the locked steps still to run:

1. the sources the installer would read for the step (its own index and find-links, and for
   pip the ones pip is configured with; pip's or uv's default index where the step names none)
   are probed (``net.probe_all``: a host name that does not resolve is final at once);
2. every locked file is looked up by sha256 on the sources that answer (``index``: PEP 503/691
   pages, find-links folders and pages), local ones first, stopping at the first that serves it;
3. a file the step's own sources do not serve is looked up on the *fallback* sources: the index
   pip is configured with (pip's default, PyPI, where none is), pip's extra indexes and
   find-links (pip.conf, ``PIP_*``), envbuild's wheelhouse (``$ENVBUILD_WHEELHOUSE``,
   ``<root>/wheelhouse``), and the fleet's build cache (``--build-cache``,
   ``$ENVBUILD_BUILD_CACHE``: the wheels ``wheelhouse build --build-cache`` published there, found
   by sha256);
4. a step all of whose files its own sources serve runs as planned. One whose source does not
   answer, or that needs a fallback, runs with its sources that answer plus the fallbacks that
   serve its files, and a one-line notice names the host; a file no source serves is an error
   (exit 3) naming the file, its sha256 and every source tried.

Unlocked steps resolve by name: there the host decides what is installed, so their sources are
never replaced, and one that does not answer stops the run, as before.

pip's configured sources come from ``pip config list`` (``installer.pip_config_sources``), not
from reading pip.conf here: pip merges half a dozen files (global, site, user, XDG,
``PIP_CONFIG_FILE``, ``os.devnull`` to disable them) and ``PIP_*`` variables by its own
precedence, and only pip knows that exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from envbuild import events
from envbuild.errors import LockError, PreflightError
from envbuild.index import PYPI
from envbuild.index.client import Artifact, ArtifactFinder, SourceError, Sources, same_version
from envbuild.index.net import Probe, probe_all, redact
from envbuild.index.wheeltags import fits_target
from envbuild.installer import pip_config_sources
from envbuild.plan import INDEX_STRATEGY, Backend, InstallerSources, Plan, PlannedStep
from envbuild.stacklock.model import Lock, LockedPackage, read_stack_lock
from envbuild.wheelhouse.sharedcache import SharedCache

__all__ = ["Source", "route_sources", "step_identity"]

WHEELHOUSE_ENV = "ENVBUILD_WHEELHOUSE"
_MAX_LISTED = 20  # files named in the error before "and N more"

# installer options that only say where files come from (what a locked step's identity leaves out)
_WITH_VALUE = frozenset({"--index-url", "--extra-index-url", "--find-links", "--index-strategy"})
_ALONE = frozenset({"--no-index"})
_SOURCE_ENV = frozenset({"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"})

Kind = Literal["index", "find-links"]


@dataclass(frozen=True)
class Source:
    location: str  # as the installer takes it (may carry credentials: shown only through ``shown``)
    kind: Kind
    # "step" (its own), "pip" (pip's configuration), "default" (the default index), "wheelhouse",
    # "build cache" (the fleet's, --build-cache)
    via: str

    @property
    def shown(self) -> str:
        return redact(self.location)

    @property
    def local(self) -> bool:
        return urlsplit(self.location).scheme in ("", "file")


def step_identity(planned: PlannedStep) -> str:
    """What the manifest records for a step: a locked step is the same step from any source.

    ``PlannedStep.digest`` covers every installer option, the sources included: right for an
    unlocked step, whose sources decide what resolves. A locked step installs the files its
    lock pins by sha256 wherever they come from, so its identity leaves the source options out:
    a re-run against a mirror, a wheelhouse (``--offline``) or another ``ENVBUILD_TORCH_INDEX``
    verifies the finished step instead of installing it again.
    """
    if planned.locked_file is None:
        return planned.digest
    payload: dict[str, object] = {
        "req": planned.requirements,
        "args": _without_sources(planned.args),
        "env": {k: v for k, v in planned.env.items() if k not in _SOURCE_ENV},
        "locked": planned.locked_file.read_text(),
    }
    if planned.offline_pins:
        payload["offline"] = dict(planned.offline_pins)
    return "h:" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _without_sources(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in _WITH_VALUE:
            skip = True
        elif a not in _ALONE:
            out.append(a)
    return out


def _arg_sources(args: Sequence[str]) -> tuple[list[Source], bool]:
    """The sources named in an installer's arguments, and whether ``--no-index`` is among them."""
    out: list[Source] = []
    for flag, value in pairwise(args):
        if flag in ("--index-url", "--extra-index-url"):
            out.append(Source(value, "index", "step"))
        elif flag == "--find-links":
            out.append(Source(value, "find-links", "step"))
    return out, "--no-index" in args


@dataclass(frozen=True)
class _Setting:
    """Where the installers look besides a step's arguments."""

    backend: Backend
    pip: InstallerSources  # what pip is configured with
    wheelhouses: tuple[str, ...]

    @property
    def default_index(self) -> str:
        """The index an installer reads when the step names none."""
        if self.backend == "uv":
            return os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or PYPI
        return self.pip.index_url or PYPI

    def own(self, planned: PlannedStep) -> list[Source]:
        """Every source the installer reads for ``planned``, in its order."""
        named, no_index = _arg_sources(planned.args)
        out: list[Source] = []
        if not no_index and "--index-url" not in planned.args:
            configured = self.backend == "pip" and self.pip.index_url is not None
            out.append(Source(self.default_index, "index", "pip" if configured else "default"))
        out += named
        # pip reads its configured extras and find-links beside the arguments
        if self.backend == "pip":
            if not no_index:
                out += [Source(u, "index", "pip") for u in self.pip.extra_index_urls]
            out += [Source(u, "find-links", "pip") for u in self.pip.find_links]
        return _unique(out)

    def fallbacks(self) -> list[Source]:
        out = [
            Source(self.pip.index_url or PYPI, "index", "pip" if self.pip.index_url else "default")
        ]
        out += [Source(u, "index", "pip") for u in self.pip.extra_index_urls]
        out += [Source(u, "find-links", "pip") for u in self.pip.find_links]
        out += [Source(w, "find-links", "wheelhouse") for w in self.wheelhouses]
        return _unique(out)


def _unique(sources: Iterable[Source]) -> list[Source]:
    seen: dict[str, Source] = {}
    for s in sources:
        seen.setdefault(s.location, s)
    return list(seen.values())


def wheelhouses(root: Path) -> tuple[str, ...]:
    """envbuild's wheelhouse on this host: ``$ENVBUILD_WHEELHOUSE`` and ``<root>/wheelhouse``
    (where the documentation mirrors to), where they are folders or URLs."""
    out = []
    named = os.environ.get(WHEELHOUSE_ENV, "")
    if named and (urlsplit(named).scheme in ("http", "https") or Path(named).is_dir()):
        out.append(named)
    if (root / "wheelhouse").is_dir():
        out.append(str(root / "wheelhouse"))
    return tuple(dict.fromkeys(out))


# ----------------------------------------------------------------------------- finding files


@dataclass(frozen=True)
class _Found:
    source: Source
    filename: str
    sha256: str | None  # None: a page that gives no hash named the file (the installer checks it)


class _Lookup:
    """One run's view of the sources: probes, pages (read once per source and project), hashes."""

    def __init__(self, python: str, platform: str) -> None:
        self.python, self.platform = python, platform
        self.probes: dict[str, Probe] = {}
        self.unread: dict[str, str] = {}  # location -> why its pages could not be read
        self._finders: dict[str, ArtifactFinder] = {}

    def probe(self, sources: Iterable[Source], pages: Mapping[str, str]) -> None:
        todo = [s.location for s in sources if s.location not in self.probes]
        self.probes.update(
            probe_all([t for t in todo if not t.startswith("file:")], projects=pages)
        )
        for loc in todo:
            if loc.startswith("file:"):
                path = Path(unquote(urlsplit(loc).path))
                self.probes[loc] = Probe(
                    redact(loc),
                    path.exists(),
                    "exists" if path.exists() else "no such file or folder",
                )

    def answers(self, source: Source) -> bool:
        probe = self.probes.get(source.location)
        return probe is None or probe.ok

    def why(self, source: Source) -> str:
        probe = self.probes.get(source.location)
        if probe is not None and not probe.ok:
            return probe.detail
        return self.unread.get(source.location, "answers; serves none of the files above")

    def find(self, package: LockedPackage, sources: Sequence[Source]) -> _Found | None:
        """The first of ``sources`` (local ones first) that serves a locked file of ``package``
        that installs on the target."""
        for source in sorted(sources, key=lambda s: not s.local):
            if not self.answers(source) or source.location in self.unread:
                continue
            found = self._serves(source, package)
            if found is not None:
                return found
        return None

    def _serves(self, source: Source, package: LockedPackage) -> _Found | None:
        finder = self._finders.setdefault(
            source.location,
            ArtifactFinder(
                Sources(index_urls=(source.location,))
                if source.kind == "index"
                else Sources(find_links=(source.location,))
            ),
        )
        wanted = set(package.hashes)
        names = {a.filename for a in package.artifacts}
        try:
            for a in finder.files(package.name):
                if (
                    a.version is None
                    or package.version is None
                    or not same_version(a.version, package.version)
                ):
                    continue
                if a.is_wheel and not fits_target(a.filename, self.python, self.platform):
                    continue
                if a.sha256 is None and a.local_path is None:
                    if a.filename in names:  # a page without hashes: the installer checks the bytes
                        return _Found(source, a.filename, None)
                    continue
                a = finder.with_sha256(a)
                if a.sha256 in wanted:
                    return _Found(source, a.filename, a.sha256)
        except (SourceError, OSError) as exc:
            self.unread[source.location] = f"cannot be read: {getattr(exc, 'message', exc)}"[:240]
        return None


def _target_files(package: LockedPackage, python: str, platform: str) -> list[Artifact]:
    """The locked files of ``package`` that install on the target (what the error names)."""
    fitting = [
        a
        for a in package.artifacts
        if (fits_target(a.filename, python, platform) or not a.is_wheel)
    ]
    return fitting or list(package.artifacts)


# ----------------------------------------------------------------------------- routing


@dataclass
class _StepRoute:
    planned: PlannedStep
    own: list[Source]
    down: list[Source] = field(default_factory=list)
    via_fallback: dict[str, _Found] = field(default_factory=dict)  # package -> where it was found
    unserved: list[LockedPackage] = field(default_factory=list)

    @property
    def rerouted(self) -> bool:
        return bool(self.down or self.via_fallback)

    def sources(self, lookup: _Lookup) -> list[Source]:
        """What the step reads once rerouted: its own sources that answer, then the fallbacks that
        serve it."""
        live = [s for s in self.own if lookup.answers(s)]
        return _unique([*live, *(f.source for f in self.via_fallback.values())])


def route_sources(
    plan: Plan, todo: Sequence[PlannedStep], *, root: Path, build_cache: SharedCache | None = None
) -> Plan:
    """``plan`` with the sources of its locked steps to run as they can be read here (see the
    module's docstring); raises ``PreflightError`` (exit 3) when a step cannot get its files."""
    if not todo:
        return plan
    # offline: one source, checked file by file by ``offline.check_wheelhouse``
    if plan.options.wheelhouse:
        _refuse_unreachable(
            plan, [s for p in todo for s in _arg_sources(p.args)[0]], _Lookup("", "")
        )
        return plan
    lock = _lock_of(todo)
    locked = [
        p
        for p in todo
        if p.locked_file is not None and lock is not None and lock.step(p.name) is not None
    ]
    unlocked = [p for p in todo if p not in locked]
    backend = plan.options.backend
    setting = _Setting(
        backend,
        pip_config_sources() if locked else InstallerSources(),
        wheelhouses(root) if locked else (),
    )
    spec = plan.spec
    lookup = _Lookup(spec.python, spec.target.platform)
    routes = [_StepRoute(p, setting.own(p)) for p in locked]
    pages = _pages(todo)
    lookup.probe([s for p in unlocked for s in _arg_sources(p.args)[0]], pages)
    strict = [s for p in unlocked for s in _needed(p, lookup)]
    # an index the step reads without naming it (pip's, the default): probed at its page too
    for r in routes:
        for s in r.own:
            if s.kind == "index" and r.planned.step.packages:
                pages.setdefault(s.location, r.planned.step.names[0])
    lookup.probe([*strict, *(s for r in routes for s in r.own)], pages)
    _refuse_unreachable(plan, strict, lookup)
    if not routes:
        return plan
    assert lock is not None
    packages = _to_fetch(lock, {r.planned.name for r in routes})
    fallbacks = setting.fallbacks()
    _look_up(lookup, routes, packages, fallbacks, build_cache)
    unserved = [(r, p) for r in routes for p in r.unserved]
    if unserved:
        raise _no_source(unserved, fallbacks, lookup, spec.python, spec.target.platform)
    for r in routes:
        r.down = [s for s in r.own if not lookup.answers(s)]
    _notify(routes, lookup)
    steps = {
        r.planned.name: _rerouted(r.planned, r.sources(lookup), setting, r.down)
        for r in routes
        if r.rerouted
    }
    return replace(plan, steps=tuple(steps.get(s.name, s) for s in plan.steps))


def _needed(planned: PlannedStep, lookup: _Lookup) -> list[Source]:
    """The sources of an unlocked step that must answer. With uv's ``first-index`` strategy (a
    lock's stages, whose only resolution is their isolated builds' requirements, as uv sync's) uv
    reads the indexes in order (the extra ones, then the index) and takes each package from the
    first that has it: the indexes after the first that answers are asked only for what it lacks,
    so one that does not answer is a note here, and uv's own error if a build needs it."""
    named, _ = _arg_sources(planned.args)
    if planned.env.get(INDEX_STRATEGY) not in ("first-index", "unsafe-first-match"):
        return named
    indexes = [s for s in named if s.kind == "index"]
    order = [s for s in indexes if s.location in _extra_urls(planned.args)] + [
        s for s in indexes if s.location not in _extra_urls(planned.args)
    ]
    first = next((i for i, s in enumerate(order) if lookup.answers(s)), len(order))
    for s in order[first + 1 :]:
        if not lookup.answers(s):
            events.emit(
                "info",
                f"note: {s.shown} does not answer ({lookup.why(s)}); step {planned.name} does not"
                f" need it: uv takes each build requirement from the first index that has it, and"
                f" {order[first].shown} answers before it",
                source=s.shown,
                steps=planned.name,
            )
    return [s for s in named if s.kind != "index"] + order[: first + 1]


def _extra_urls(args: Sequence[str]) -> set[str]:
    return {value for flag, value in pairwise(args) if flag == "--extra-index-url"}


def _to_fetch(lock: Lock, steps: set[str]) -> dict[str, list[LockedPackage]]:
    """{step: the hash-pinned files it downloads}: a package an earlier step pins at the same
    version is installed by then (and held by the constraints), so it is not looked up again."""
    out: dict[str, list[LockedPackage]] = {}
    earlier: set[tuple[str, str | None]] = set()
    for entry in lock.steps:
        if entry.name in steps:
            out[entry.name] = [
                p
                for p in entry.packages
                if p.vcs is None and p.hashes and (p.name, p.version) not in earlier
            ]
        earlier.update((p.name, p.version) for p in entry.packages)
    return out


def _lock_of(todo: Sequence[PlannedStep]) -> Lock | None:
    files = [p.locked_file for p in todo if p.locked_file is not None]
    if not files:
        return None
    try:
        return read_stack_lock(files[0].parent)
    except LockError:
        return None  # the lock itself was checked when it was loaded


def _pages(steps: Iterable[PlannedStep]) -> dict[str, str]:
    """index -> the first project of a step that reads it (its page is probed, not the index
    root)."""
    pages: dict[str, str] = {}
    for s in steps:
        for flag, value in pairwise(s.args):
            if flag in ("--index-url", "--extra-index-url") and s.step.packages:
                pages.setdefault(value, s.step.names[0])
    return pages


def _look_up(
    lookup: _Lookup,
    routes: list[_StepRoute],
    packages: Mapping[str, list[LockedPackage]],
    fallbacks: list[Source],
    build_cache: SharedCache | None = None,
) -> None:
    """Each route's files on its own sources, then what is left on the fallbacks (probed only
    then), the fleet's build cache among them (``--build-cache``: the published wheels of the
    sha256s still missing)."""
    jobs = [(r, p) for r in routes for p in packages[r.planned.name]]
    # threads that wait on pages (16, as many as a run's pages are worth asking for at once); the
    # hashing of local files lets go of the GIL
    with ThreadPoolExecutor(max_workers=16, thread_name_prefix="envbuild-lookup") as pool:
        own = list(pool.map(lambda job: lookup.find(job[1], job[0].own), jobs))
        missing = [job for job, found in zip(jobs, own, strict=True) if found is None]
        if not missing:
            return
        if build_cache is not None:
            held = build_cache.holding(sorted({h for _, p in missing for h in p.hashes}))
            cached = [Source(where, "find-links", "build cache") for where in held.values()]
            fallbacks = _unique([*fallbacks, *cached])
        lookup.probe(
            fallbacks, {s.location: missing[0][1].name for s in fallbacks if s.kind == "index"}
        )
        found = list(pool.map(lambda job: lookup.find(job[1], fallbacks), missing))
    for (route, package), where in zip(missing, found, strict=True):
        if where is not None:
            route.via_fallback[package.name] = where
        elif not any(s.location in lookup.unread for s in [*route.own, *fallbacks]):
            # a source whose pages could not be read may hold it: the installer will say
            route.unserved.append(package)


def _refuse_unreachable(plan: Plan, sources: list[Source], lookup: _Lookup) -> None:
    """Sources of unlocked steps (and of an offline run) must answer: exit 3, as they decide what
    resolves."""
    lookup.probe(sources, _pages(plan.steps))
    bad = [f"{s.shown} ({lookup.why(s)})" for s in _unique(sources) if not lookup.answers(s)]
    if not bad:
        return
    spec = plan.spec
    try:
        names = sorted(set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", spec.path.read_text())))
    except OSError:
        names = []
    via = f" ({spec.path} reads {', '.join(names)})" if names else ""
    raise PreflightError(
        "package sources the plan needs do not answer: " + "; ".join(bad),
        hint=(
            "Check the network and the URLs in the stack spec or the variables they expand"
            f" from{via}, or install from a mirrored wheelhouse with --offline --wheelhouse DIR."
        )
        + _empty_var_fix(spec.path),
    )


def _empty_var_fix(spec_path: Path) -> str:
    """The exact command that takes pip's configured sources instead of a ``${VAR-default}`` URL."""
    import shlex
    import sys

    try:
        names = sorted(set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)-", spec_path.read_text())))
    except OSError:
        return ""
    unset = [n for n in names if n not in os.environ]
    if not unset:
        return ""
    args = sys.argv[1:] if "provision" in sys.argv[1:] else ["provision", "--stack", str(spec_path)]
    command = " ".join(f"{n}=" for n in unset) + " envbuild " + shlex.join(args)
    return (
        " To use the sources pip is configured with (pip.conf, PIP_*) instead of the default"
        f" {'URLs' if len(unset) > 1 else 'URL'} of {', '.join(unset)}, set"
        f" {'them' if len(unset) > 1 else 'it'} empty: `{command}`"
    )


def _no_source(
    unserved: list[tuple[_StepRoute, LockedPackage]],
    fallbacks: list[Source],
    lookup: _Lookup,
    python: str,
    platform: str,
) -> PreflightError:
    lines = []
    tried: dict[str, Source] = {}
    for route, package in unserved:
        files = _target_files(package, python, platform)
        named = (
            " or ".join(f"{a.filename} (sha256 {a.sha256})" for a in files)
            if files
            else (
                f"none of its {len(package.hashes)} locked hashes"
                f" ({', '.join(package.hashes[:2])}...)"
            )
        )
        lines.append(f"  {route.planned.name}: {package.name}=={package.version}: {named}")
        for s in route.own:
            tried.setdefault(s.location, s)
    for s in fallbacks:
        tried.setdefault(s.location, s)
    shown = lines[:_MAX_LISTED] + (
        [f"  ... and {len(lines) - _MAX_LISTED} more"] if len(lines) > _MAX_LISTED else []
    )
    sources = "\n".join(f"  {s.shown} [{_VIA[s.via]}]: {lookup.why(s)}" for s in tried.values())
    return PreflightError(
        f"no package source serves {len(lines)} locked file(s) that the steps to run install (a"
        " file is taken from any source that serves its sha256, and from no other); nothing was"
        " made:\n" + "\n".join(shown) + "\nsources tried:\n" + sources,
        hint=(
            "Bring the files to a source pip is configured with (pip.conf / PIP_FIND_LINKS /"
            f" PIP_EXTRA_INDEX_URL), or to ${WHEELHOUSE_ENV} (`envbuild wheelhouse mirror` on a"
            " host where the lock's index answers), or re-lock against the sources this host has"
            " (`envbuild lock`)."
        ),
    )


_VIA = {
    "step": "the step's",
    "pip": "pip's configuration",
    "default": "the default index",
    "wheelhouse": "envbuild's wheelhouse",
    "build cache": "the fleet's build cache (--build-cache)",
}


def _notify(routes: list[_StepRoute], lookup: _Lookup) -> None:
    """One line per source that does not answer, naming the steps it leaves and where their files
    come from."""
    by_source: dict[str, list[_StepRoute]] = {}
    for r in routes:
        for s in r.down:
            by_source.setdefault(s.location, []).append(r)
    for loc, affected in by_source.items():
        source = next(s for s in affected[0].down if s.location == loc)
        froms = _unique(s for r in affected for s in r.sources(lookup))
        steps = ", ".join(r.planned.name for r in affected)
        events.emit(
            "info",
            f"notice: {source.shown} does not answer ({lookup.why(source)}); the locked files of "
            f"step{'s' if len(affected) > 1 else ''} {steps} come by sha256 from "
            f"{', '.join(s.shown for s in froms) or 'the other sources'}",
            source=source.shown,
            steps=steps,
        )
    for r in routes:
        if not r.down and r.via_fallback:
            froms = _unique(f.source for f in r.via_fallback.values())
            events.emit(
                "info",
                f"notice: step {r.planned.name}: {len(r.via_fallback)} locked file(s) its sources"
                f" do not serve come by sha256 from {', '.join(s.shown for s in froms)}",
                steps=r.planned.name,
            )


def _rerouted(
    planned: PlannedStep, sources: list[Source], setting: _Setting, down: list[Source]
) -> PlannedStep:
    """``planned`` reading ``sources`` only. pip also reads its configured extras and find-links
    by itself: those stay off the command line, and where one of them does not answer, the
    step's environment names the ones that do (``PIP_*`` variables override pip.conf)."""
    pip = setting.backend == "pip"
    configured = {*setting.pip.extra_index_urls, *setting.pip.find_links} if pip else set()
    indexes = [s for s in sources if s.kind == "index"]
    links = [s for s in sources if s.kind == "find-links"]
    args: list[str] = []
    if indexes:
        args += ["--index-url", indexes[0].location]
        args += [
            a
            for s in indexes[1:]
            if s.location not in configured
            for a in ("--extra-index-url", s.location)
        ]
    else:
        args.append("--no-index")
    args += [a for s in links if s.location not in configured for a in ("--find-links", s.location)]
    if not pip and len(sources) > 1:
        args += ["--index-strategy", "unsafe-best-match"]
    env = dict(planned.env)
    if pip:
        gone = {s.location for s in down}
        extras = [u for u in setting.pip.extra_index_urls if u not in gone]
        links_left = [u for u in setting.pip.find_links if u not in gone]
        if gone & set(setting.pip.extra_index_urls) and extras:
            env["PIP_EXTRA_INDEX_URL"] = " ".join(extras)
        if gone & set(setting.pip.find_links) and links_left:
            env["PIP_FIND_LINKS"] = " ".join(links_left)
    return replace(planned, args=(*args, *_without_sources(planned.args)), env=env)
