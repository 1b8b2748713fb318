"""``envbuild lock``: compile each step of a stack into a hash-pinned requirement file.

Steps with dependencies are resolved for the stack's Python and ``[target]`` platform, by
pip-tools (``pip-compile --generate-hashes``) where this interpreter is the target, else by
``uv pip compile --python-version X --python-platform P`` (``lock.resolver`` says which and
why). pip-compile runs under the current interpreter, or ``--python PATH`` (a helper venv of
that version under the envbuild cache gets the same pip-tools when it has none). Each step after the baseline is compiled with the
baseline's locked pins as constraints (torch, its runtime wheels, everything the baseline step
installed), and those pins are left out of its file: it installs on top of the baseline and
can never carry another torch. ``no_deps`` steps pin exactly the named packages: their
artifacts and hashes come straight from the step's sources (``envbuild.index``), nothing transitive.

Sources are the step's own (index URL, extra indexes, find-links, ``no_index``); a step without
an index uses what pip is configured with. ``wheelhouse`` replaces every source with one
find-links folder (offline). Every HTTP source is probed first with a short timeout, so an
unreachable index fails in seconds. git requirements resolve to a commit with ``git ls-remote``.

Every step entry of ``lock.json`` records its ``step_digest`` (``lock.step_digests``), so a spec
cut after a step (a Docker layer's slice) can be checked against the lock step by step.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from envbuild import __version__, abi, events
from envbuild._io import atomic_write_text, sha256_file
from envbuild.errors import ConfigError, LockError, PreflightError
from envbuild.index import (
    ArtifactFinder,
    Sources,
    cache_dir,
    parse_filename,
    requires_of,
    same_version,
)
from envbuild.installer import find_python, pip_config_sources, python_version_of
from envbuild.lock.model import (
    LOCK_VERSION,
    MANIFEST,
    Lock,
    LockedReq,
    format_requirement,
    lock_dir,
    parse_requirements_text,
    read_lock,
    step_filename,
    write_lock,
)
from envbuild.lock.report import marker_env
from envbuild.lock.resolver import (
    ResolverChoice,
    choose_resolver,
    uv_compile_step,
    uv_source_args,
    uv_version,
)
from envbuild.lock.serve import step_digests
from envbuild.net import redact, unreachable
from envbuild.plan import make_plan
from envbuild.run import format_argv, run
from envbuild.spec import StackSpec, Step

PYPI = "https://pypi.org/simple"
_SHA40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    python: str | None = None  # pip-compile under this interpreter (default: see lock.resolver)
    resolver: ResolverChoice = "auto"  # auto: pip-compile when this interpreter is the target, else uv
    wheelhouse: str | None = None  # resolve only from this find-links folder/page (offline)
    skip: tuple[str, ...] = ()  # steps recorded as not locked (a partial lock), e.g. an unreachable index
    output: Path | None = None  # default: the folder of the spec
    export_pylock: bool = True


@dataclass(frozen=True)
class LockResult:
    folder: Path
    files: list[Path]
    skipped: list[str]
    seconds: float


# ----------------------------------------------------------------------------- sources


def step_sources(step: Step, wheelhouse: str | None) -> tuple[Sources, list[str]]:
    """The sources a step resolves from, and the matching pip/pip-compile arguments."""
    if wheelhouse:
        return Sources((), (wheelhouse,)), ["--no-index", "--find-links", wheelhouse]
    args: list[str] = []
    if step.no_index:
        args.append("--no-index")
        return Sources((), step.find_links), args + [a for f in step.find_links for a in ("--find-links", f)]
    n_index = n_links = 0
    if step.index_url is None:
        conf = pip_config_sources()
        index = conf.index_url or PYPI
        extras = (*conf.extra_index_urls, *step.extra_index_urls)
        links = (*conf.find_links, *step.find_links)
        n_index, n_links = 1 + len(conf.extra_index_urls), len(conf.find_links)
    else:
        index, extras, links = step.index_url, step.extra_index_urls, step.find_links
        args += ["--index-url", index]
    for u in step.extra_index_urls:
        args += ["--extra-index-url", u]
    for f in step.find_links:
        args += ["--find-links", f]
    return Sources((index, *extras), tuple(links), n_index, n_links), args


def check_reachable(sources: Sources, step: Step) -> None:
    # each index is asked for the page of the step's first project: what the resolver reads first
    pages = dict.fromkeys(sources.index_urls, step.names[0]) if step.packages else {}
    bad = unreachable((*sources.index_urls, *sources.find_links), projects=pages)
    if bad:
        raise PreflightError(
            f"step {step.name!r}: package sources do not answer: {'; '.join(bad)}",
            hint="Check the network and the step's index_url/find_links, lock offline from a wheelhouse "
            "(envbuild lock --wheelhouse DIR), or leave the step out of this lock with --skip-step NAME.")


# ----------------------------------------------------------------------------- git


def resolve_git(requirement: str, timeout: float = 20.0) -> str:
    """``name @ git+URL@REF`` -> ``name @ git+URL@<commit>`` (``git ls-remote``; fails fast)."""
    req = Requirement(requirement)
    if not req.url or not req.url.startswith("git+"):
        return requirement
    url = req.url[4:]
    frag = ""
    if "#" in url:
        url, frag = url.split("#", 1)
        frag = "#" + frag
    repo, ref = url, "HEAD"
    tail = url.rsplit("/", 1)[-1]
    if "@" in tail:
        repo, ref = url.rsplit("@", 1)
    if _SHA40.match(ref):
        return requirement
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=10"}
    try:
        out = run(["git", "ls-remote", repo, ref], capture=True, separate_stderr=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise PreflightError("git is needed to resolve git requirements to a commit, and it is not installed") from None
    if out.timed_out:
        raise PreflightError(f"{req.name}: git ls-remote {redact(repo)} gave no answer within {timeout:g} s",
                             hint="Check the network, or pin the requirement to a commit SHA.") from None
    if out.returncode != 0:
        err = (out.stderr or "").strip()
        why = redact(err.splitlines()[-1] if err else f"exit {out.returncode}")
        raise PreflightError(f"{req.name}: cannot read the git repository {redact(repo)}: {why}",
                             hint="Check the URL and the network, or pin the requirement to a commit SHA.")
    rows = [line.split("\t") for line in (out.output or "").splitlines() if "\t" in line]
    wanted = {ref, f"refs/heads/{ref}", f"refs/tags/{ref}", f"refs/tags/{ref}^{{}}"}
    shas = [sha for sha, name in rows if name in wanted]
    peeled = [sha for sha, name in rows if name.endswith("^{}")]
    if not shas:
        raise ConfigError(f"{req.name}: the git ref {ref!r} does not exist in {redact(repo)}",
                          hint="Use a branch, a tag, HEAD or a commit SHA that the repository has.")
    sha = peeled[0] if peeled else shas[0]
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f" ; {req.marker}" if req.marker else ""
    return f"{req.name}{extras} @ git+{repo}@{sha}{frag}{marker}"


# ----------------------------------------------------------------------------- pip-compile


def _tool_versions(python: Path) -> dict[str, str]:
    code = ("import json,sys,importlib.metadata as m\n"
            "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'pip': m.version('pip'),"
            " 'pip-tools': m.version('pip-tools')}))")
    out = run([str(python), "-c", code], capture=True, separate_stderr=True, timeout=60)
    if not out.ok:
        return {}
    import json

    data: dict[str, str] = json.loads(out.output or "")
    data["envbuild"] = __version__
    data["packaging"] = importlib_metadata.version("packaging")
    return data


def resolver_python(spec: StackSpec, override: str | None) -> Path:
    """An interpreter of the stack's Python version with pip-tools importable."""
    if override is None and f"{sys.version_info[0]}.{sys.version_info[1]}" == spec.python and _has_piptools(Path(sys.executable)):
        return Path(sys.executable)
    base = find_python(spec.python, override)
    if _has_piptools(base):
        return base
    venv = cache_dir() / "lock-venvs" / f"py{spec.python}"
    python = venv / "bin" / "python"
    if python.exists() and python_version_of(python) == spec.python and _has_piptools(python):
        return python
    piptools = importlib_metadata.version("pip-tools")
    events.emit("info", f"making a Python {spec.python} helper venv with pip-tools {piptools} at {venv}")
    log = venv.parent / f"py{spec.python}.log"
    for argv in ([str(base), "-m", "venv", "--clear", str(venv)],
                 [str(python), "-m", "pip", "install", "-q", f"pip-tools=={piptools}"]):
        res = run(argv, log_file=log, timeout=600)
        if not res.ok:
            raise PreflightError(f"could not make the pip-tools helper venv for Python {spec.python}:\n{res.tail}",
                                 hint=f"Full log: {log}. Or pass --python PATH to an interpreter with pip-tools.")
    return python


def _has_piptools(python: Path) -> bool:
    try:
        return run([str(python), "-c", "import piptools"], capture=True, timeout=60).ok
    except OSError:
        return False


def compile_step(step: Step, *, python: Path, source_args: list[str], constraints: list[str], work: Path,
                 log_file: Path) -> list[LockedReq]:
    """Run pip-compile for one step with dependencies; returns its pinned, hashed requirements."""
    work.mkdir(parents=True, exist_ok=True)
    cons = work / f"{step.name}.constraints.txt"
    cons.write_text("\n".join(constraints) + "\n")
    req_in = work / f"{step.name}.in"
    req_in.write_text(f"-c {cons.name}\n" + "\n".join(resolve_git(p) for p in step.packages) + "\n")
    out = work / f"{step.name}.txt"
    argv = [str(python), "-m", "piptools", "compile", "--generate-hashes", "--allow-unsafe", "--strip-extras",
            "--no-header", "--no-annotate", "--no-emit-index-url", "--no-emit-find-links", "--no-emit-trusted-host",
            "--no-emit-options", "--quiet", "--cache-dir", str(cache_dir() / "pip-tools"),
            "--pip-args", "--timeout 15 --retries 1", "-o", str(out), *source_args]
    if step.pre:
        argv.append("--pre")
    if step.no_build_isolation:
        argv.append("--no-build-isolation")
    argv.append(str(req_in))
    env = {**os.environ, **step.env}
    events.emit("debug", redact(format_argv(argv)))
    res = run(argv, log_file=log_file, env=env, cwd=work, timeout=1800)
    if not res.ok:
        raise LockError(f"pip-compile could not resolve step {step.name!r} (exit {res.returncode}):\n{redact(res.tail)}",
                        hint=f"Full log: {log_file}. A conflict with the baseline pins means the step needs "
                        "a torch the baseline does not have: pin another version, or make the step no_deps.")
    return parse_requirements_text(out.read_text(), str(out))


def pin_no_deps(step: Step, finder: ArtifactFinder) -> list[LockedReq]:
    """Exactly the named packages at an exact version, with every matching artifact's hash."""
    out = []
    for raw in step.packages:
        pinned = resolve_git(raw)
        req = Requirement(pinned)
        name = canonicalize_name(req.name)
        if req.url:
            out.append(LockedReq(name, f"{name} @ {req.url}", 0, None, (), req.url))
            continue
        files = [(a, pv[1]) for a in finder.files(name) if (pv := parse_filename(a.filename))]
        versions = sorted({Version(v) for _, v in files
                           if req.specifier.contains(v, prereleases=step.pre or None) or _exact(req, v)}, reverse=True)
        if not versions:
            raise LockError(f"step {step.name!r}: no artifact of {raw} in the step's sources "
                            f"({', '.join(redact(s) for s in (*finder.sources.index_urls, *finder.sources.find_links))})",
                            hint="Check the version and the step's index_url/find_links.")
        version = str(versions[0])
        hashes = [a.sha256 or "" for a in finder.matching_all(name, version)]
        out.append(LockedReq(name, f"{name}=={version}", 0, version, tuple(sorted(h for h in hashes if h))))
    return out


def _exact(req: Requirement, version: str) -> bool:
    return any(s.operator == "==" and same_version(s.version, version) for s in req.specifier)


# ----------------------------------------------------------------------------- the whole stack


def lock_stack(spec: StackSpec, opts: LockOptions | None = None) -> LockResult:
    opts = opts or LockOptions()
    t0 = time.monotonic()
    folder = opts.output or lock_dir(spec)
    try:  # before minutes of resolving: the lock must be writable where it goes
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise ConfigError(f"cannot write the lock to {folder}: {exc.strerror}",
                          hint="Choose a writable folder with --output.") from None
    unknown = [s for s in opts.skip if s not in [st.name for st in spec.steps]]
    if unknown:
        spec.step(unknown[0])  # raises with a did-you-mean
    digests = step_digests(spec)
    if digests is None:
        raise LockError(f"{spec.path} no longer holds the spec envbuild loaded (was it edited just now?)",
                        hint="Run `envbuild lock` again.")
    resolver = choose_resolver(spec, opts.resolver, opts.python)
    events.emit("info", f"resolving with {resolver.kind} ({resolver.why})")
    python = resolver_python(spec, opts.python) if resolver.kind == "pip-compile" else None
    plan = make_plan(spec)
    baseline_idx = spec.baseline_index if spec.baseline_index is not None else -1
    protected: set[str] = {spec.abi.package}
    baseline_pins: dict[str, str] = {}
    if spec.abi.adopt:
        baseline_pins[spec.abi.package] = spec.abi.version
    entries: list[dict[str, Any]] = []
    files: list[Path] = []
    baseline_sources = Sources()
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        work = Path(tmp)
        for i, (step, planned) in enumerate(zip(spec.steps, plan.steps, strict=True)):
            fname = step_filename(planned.number, step.name)
            entry: dict[str, Any] = {"name": step.name, "role": planned.role, "step_digest": digests[i],
                                     "flags": _flags(step)}
            if step.name in opts.skip:
                entry.update(locked=False, reason="left out with --skip-step when this lock was made")
                entries.append(entry)
                events.emit("warn", f"step {step.name!r}: not locked (--skip-step); it resolves from the spec")
                continue
            sources, source_args = step_sources(step, opts.wheelhouse)
            check_reachable(sources, step)
            resolve_from = sources
            if i == baseline_idx:
                baseline_sources = sources
            elif i > baseline_idx and baseline_idx >= 0 and not opts.wheelhouse:
                # the resolver must see the pinned torch: the baseline's sources as extras
                source_args = source_args + _extra_args(baseline_sources, step)
                resolve_from = Sources((*sources.index_urls, *baseline_sources.index_urls),
                                       (*sources.find_links, *baseline_sources.find_links))
            finder = ArtifactFinder(sources)
            events.emit("step", f"locking step {planned.number} ({step.name})", step=step.name)
            if step.no_deps:
                reqs = pin_no_deps(step, finder)
            else:
                # the baseline resolves under the earlier steps' pins; later steps under the baseline's
                cons = [] if i < baseline_idx else [f"{n}=={v}" for n, v in sorted(baseline_pins.items())]
                log = cache_dir() / "lock-logs" / spec.name / f"{step.name}.log"
                if python is None:
                    reqs = uv_compile_step(step, spec, requirements=[resolve_git(p) for p in step.packages],
                                           source_args=uv_source_args(resolve_from, step, opts.wheelhouse),
                                           constraints=cons, work=work, log_file=log)
                else:
                    reqs = compile_step(step, python=python, source_args=source_args, constraints=cons,
                                        work=work, log_file=log)
            requested = set(step.names)
            if i > baseline_idx:
                reqs = [r for r in reqs if r.name in requested or not (r.name in protected or baseline_pins.get(r.name) == r.version)]
            packages = [_package_entry(r, finder, requested) for r in sorted(reqs, key=lambda r: r.name)]
            if i == baseline_idx:
                protected |= _baseline_protected(spec, packages)
            if i <= baseline_idx:
                for p in packages:
                    if p["version"]:
                        baseline_pins[p["name"]] = p["version"]
            text = _file_header(spec, step, planned.role, fname, source_args) + "".join(
                format_requirement(p["name"], p["version"], p["hashes"], p["vcs"]["url"] if p["vcs"] else None)
                for p in packages)
            path = folder / fname
            atomic_write_text(path, text)
            files.append(path)
            entry.update(locked=True, file=fname, file_sha256=sha256_file(path),
                         sources=_recorded_sources(sources, source_args),
                         packages=packages)
            entries.append(entry)
    try:
        old = read_lock(folder)
    except LockError:  # a broken lock is replaced; its step files are left alone
        old = None
    manifest = {
        "lock_version": LOCK_VERSION,
        "stack": spec.name,
        "spec": spec.path.name if spec.path.parent.resolve() == folder.resolve() else str(spec.path),
        "spec_digest": spec.digest,
        "python": spec.python,
        "target": {"python": spec.python, "platform": spec.target.platform, "resolver": resolver.kind},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tools": _tool_versions(python) if python is not None else _uv_tools(spec),
        "abi": {"package": spec.abi.package, "version": spec.abi.version, "local": spec.abi.local,
                "protected": sorted(protected)},
        "steps": entries,
    }
    lock = Lock.from_dict(manifest, folder / MANIFEST)  # what is written reads back: the model's rules
    write_lock(lock)
    if old is not None:  # files of steps that no longer exist
        keep = {s.file for s in lock.steps}
        for s in old.steps:
            if s.file and s.file not in keep and (folder / s.file).is_file():
                (folder / s.file).unlink()
    if opts.export_pylock:
        from envbuild.lock.pylock import write_pylock

        files.append(write_pylock(lock))
    files.append(folder / MANIFEST)
    return LockResult(folder, files, [e["name"] for e in entries if not e.get("locked")], time.monotonic() - t0)


def _uv_tools(spec: StackSpec) -> dict[str, str]:
    return {"resolver": "uv", "uv": uv_version(), "python": spec.python, "platform": spec.target.platform,
            "host_python": ".".join(map(str, sys.version_info[:3])), "envbuild": __version__,
            "packaging": importlib_metadata.version("packaging")}


def _extra_args(base: Sources, step: Step) -> list[str]:
    """The baseline's own sources for a later step's resolver. Sources that come from the
    installer's configuration need no flag: pip-compile reads that configuration itself."""
    args: list[str] = []
    if not step.no_index:
        for u in base.index_urls[base.configured_indexes:]:
            if u not in (step.index_url, *step.extra_index_urls):
                args += ["--extra-index-url", u]
    for f in base.find_links[base.configured_links:]:
        if f not in step.find_links:
            args += ["--find-links", f]
    return args


def _recorded_sources(sources: Sources, source_args: list[str]) -> dict[str, Any]:
    """What the lock says a step resolved from: the spec's sources, redacted. The installer's
    configured sources (this machine's pip.conf) are named only as such: they are not the lock's."""
    configured = sources.configured_indexes > 0
    own_indexes = sources.index_urls[sources.configured_indexes:]
    if configured:
        index, extras = None, own_indexes
    else:
        index = own_indexes[0] if own_indexes and "--no-index" not in source_args else None
        extras = own_indexes[1:]
    return {"index_url": redact(index) if index else None,
            "extra_index_urls": [redact(u) for u in extras],
            "find_links": [redact(u) for u in sources.find_links[sources.configured_links:]],
            "installer_configured": configured}


def _flags(step: Step) -> dict[str, Any]:
    return {"no_deps": step.no_deps, "pre": step.pre, "no_build_isolation": step.no_build_isolation,
            "upgrade": step.upgrade, "upgrade_strategy": step.upgrade_strategy, "reinstall": step.reinstall,
            "no_index": step.no_index}


def _package_entry(r: LockedReq, finder: ArtifactFinder, requested: set[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": r.name, "version": r.version, "requested": r.name in requested,
                             "hashes": sorted(r.hashes), "artifacts": [], "requires_dist": None, "vcs": None}
    if r.url:
        entry["vcs"] = {"url": r.url, "commit": r.vcs_commit}
        return entry
    assert r.version is not None
    arts = finder.matching(r.name, r.version, r.hashes)
    entry["artifacts"] = [{"filename": a.filename, "url": redact(a.url), "sha256": a.sha256} for a in arts]
    if not arts:
        events.emit("warn", f"{r.name} {r.version}: no file with a locked hash found in the step's sources; "
                    "its URL and metadata are not recorded")
        return entry
    best = next((a for a in arts if a.is_wheel), arts[0])
    try:
        entry["requires_dist"] = requires_of(best)
    except (PreflightError, OSError, ValueError) as exc:
        events.emit("warn", f"{r.name} {r.version}: could not read its metadata ({exc})")
    return entry


def _baseline_protected(spec: StackSpec, packages: list[dict[str, Any]]) -> set[str]:
    """The ABI guard's frozen set (``abi.protected_set``) over the baseline's pins, torch's markers
    evaluated for the stack's target (``lock.report.marker_env``)."""
    torch = next((p for p in packages if p["name"] == spec.abi.package), None)
    requires = abi.active((torch or {}).get("requires_dist") or [], marker_env(spec))
    return abi.protected_set(spec.abi, {p["name"] for p in packages}, requires)


def _file_header(spec: StackSpec, step: Step, role: str, fname: str, source_args: list[str]) -> str:
    flags = ["--require-hashes"] + (["--no-deps"] if step.no_deps else []) + (["--pre"] if step.pre else [])
    srcs = " ".join(redact(a) for a in source_args)
    lines = [
        f"# envbuild lock: step {step.name!r} ({role}) of stack {spec.name!r}",
        "# Written by `envbuild lock`; do not edit (lock.json records this file's sha256).",
        "# Install by hand, after the earlier steps:",
        f"#   pip install {' '.join(flags)}{' ' + srcs if srcs else ''} -r {fname}",
    ]
    return "\n".join(lines) + "\n"
