"""One step of ``envbuild lock``: resolve it into hash-pinned requirements (``stacklock.make`` runs
the steps).

Steps with dependencies are resolved for the stack's Python and ``[target]`` platform, by
pip-tools (``pip-compile --generate-hashes``) where this interpreter is the target, else by
``uv pip compile --python-version X --python-platform P`` (``stacklock.resolver`` says which and
why). pip-compile runs under the current interpreter, or ``--python PATH`` (a helper venv of
that version under the envbuild cache gets the same pip-tools when it has none). A step is
compiled with every earlier step's pins as constraints (``stacklock.make``), and its last pins as
the resolver's existing output file, which both resolvers keep where they still satisfy the
input (``stacklock.relock``). ``no_deps`` steps pin exactly the named packages: their artifacts and
hashes come straight from the step's sources (``envbuild.index.client``), nothing transitive.

Sources are the step's own (index URL, extra indexes, find-links, ``no_index``); a step without
an index uses what pip is configured with. ``wheelhouse`` replaces every source with one
find-links folder (offline). Every HTTP source is probed first with a short timeout, so an
unreachable index fails in seconds. git requirements resolve to a commit (``stacklock.git``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from envbuild import __version__, events, guard
from envbuild.errors import LockError, PreflightError
from envbuild.index import PYPI
from envbuild.index.client import (
    ArtifactFinder,
    Sources,
    cache_dir,
    parse_filename,
    requires_of,
    same_version,
)
from envbuild.index.net import redact, unreachable
from envbuild.installer import find_python, pip_config_sources, python_version_of
from envbuild.run import format_argv, run
from envbuild.spec import StackSpec, Step
from envbuild.stacklock.git import git_ref
from envbuild.stacklock.model import LockedReq, VcsPin, parse_requirements_text
from envbuild.stacklock.resolver import uv_version


def marker_env(spec: StackSpec) -> dict[str, str]:
    """The PEP 508 environment the lock is for: the stack's CPython on Linux, on the CPU of its
    ``[target]`` platform (x86_64, or aarch64 for GH200/GB200/GB10 hosts), whatever machine locks.
    """
    return {
        "python_version": spec.python,
        "python_full_version": spec.python + ".0",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": spec.target.arch,
        "platform_python_implementation": "CPython",
        "implementation_name": "cpython",
        "implementation_version": spec.python + ".0",
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }


# ----------------------------------------------------------------------------- sources


def step_sources(step: Step, wheelhouse: str | None) -> tuple[Sources, list[str]]:
    """The sources a step resolves from, and the matching pip/pip-compile arguments."""
    if wheelhouse:
        return Sources((), (wheelhouse,)), ["--no-index", "--find-links", wheelhouse]
    args: list[str] = []
    if step.no_index:
        args.append("--no-index")
        return Sources((), step.find_links), args + [
            a for f in step.find_links for a in ("--find-links", f)
        ]
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
            hint=unreachable_hint(step),
        )


def unreachable_hint(step: Step) -> str:
    """What to do when a step's sources do not answer at lock time: the variable they came from
    (set to a mirror, or to nothing for pip's configured sources), a wheelhouse, or --skip-step."""
    ways = []
    if step.source_vars:
        var = step.source_vars[0]
        ways.append(
            f"set {var} (the step's sources come from ${{{var}}}) to a mirror's URL, or to nothing"
            f" for the sources pip is configured with: `{var}= envbuild lock ...`"
        )
    else:
        ways.append("check the network and the step's index_url/find_links")
    ways.append("lock offline from a wheelhouse (`envbuild lock --wheelhouse DIR`)")
    ways.append(f"leave the step out of this lock (`--skip-step {step.name}`)")
    text = "; ".join(ways[:-1]) + "; or " + ways[-1] + "."
    return text[0].upper() + text[1:]


# ----------------------------------------------------------------------------- pip-compile


def tool_versions(python: Path) -> dict[str, str]:
    code = (
        "import json,sys,importlib.metadata as m\n"
        "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'pip': m.version('pip'),"
        " 'pip-tools': m.version('pip-tools')}))"
    )
    out = run([str(python), "-c", code], capture=True, separate_stderr=True, timeout=60)
    if not out.ok:
        return {}
    data: dict[str, str] = json.loads(out.output or "")
    data["envbuild"] = __version__
    data["packaging"] = importlib_metadata.version("packaging")
    return data


def resolver_python(spec: StackSpec, override: str | None) -> Path:
    """An interpreter of the stack's Python version with pip-tools importable."""
    if (
        override is None
        and f"{sys.version_info[0]}.{sys.version_info[1]}" == spec.python
        and _has_piptools(Path(sys.executable))
    ):
        return Path(sys.executable)
    base = find_python(spec.python, override)
    if _has_piptools(base):
        return base
    venv = cache_dir() / "lock-venvs" / f"py{spec.python}"
    python = venv / "bin" / "python"
    if python.exists() and python_version_of(python) == spec.python and _has_piptools(python):
        return python
    piptools = importlib_metadata.version("pip-tools")
    events.emit(
        "info", f"making a Python {spec.python} helper venv with pip-tools {piptools} at {venv}"
    )
    log = venv.parent / f"py{spec.python}.log"
    for argv in (
        [str(base), "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", f"pip-tools=={piptools}"],
    ):
        res = run(argv, log_file=log, timeout=600)
        if not res.ok:
            raise PreflightError(
                f"could not make the pip-tools helper venv for Python {spec.python}:\n{res.tail}",
                hint=f"Full log: {log}. Or pass --python PATH to an interpreter with pip-tools.",
            )
    return python


def _has_piptools(python: Path) -> bool:
    try:
        return run([str(python), "-c", "import piptools"], capture=True, timeout=60).ok
    except OSError:
        return False


def compile_step(
    step: Step,
    *,
    python: Path,
    requirements: list[str],
    source_args: list[str],
    constraints: list[str],
    preferences: list[str],
    work: Path,
    log_file: Path,
) -> list[LockedReq]:
    """Run pip-compile for one step with dependencies; returns its pinned, hashed requirements.
    ``preferences`` (``name==version`` lines) are its existing output file: pins it keeps where
    they still satisfy the step and the constraints."""
    work.mkdir(parents=True, exist_ok=True)
    cons = work / f"{step.name}.constraints.txt"
    cons.write_text("\n".join(constraints) + "\n")
    req_in = work / f"{step.name}.in"
    req_in.write_text(f"-c {cons.name}\n" + "\n".join(requirements) + "\n")
    out = work / f"{step.name}.txt"
    out.write_text("".join(f"{line}\n" for line in preferences))
    argv = [
        str(python),
        "-m",
        "piptools",
        "compile",
        "--generate-hashes",
        "--allow-unsafe",
        "--strip-extras",
        "--no-header",
        "--no-annotate",
        "--no-emit-index-url",
        "--no-emit-find-links",
        "--no-emit-trusted-host",
        "--no-emit-options",
        "--quiet",
        "--cache-dir",
        str(cache_dir() / "pip-tools"),
        "--pip-args",
        "--timeout 15 --retries 1",
        "-o",
        str(out),
        *source_args,
    ]
    if step.pre:
        argv.append("--pre")
    if step.no_build_isolation:
        argv.append("--no-build-isolation")
    argv.append(str(req_in))
    env = {**os.environ, **step.env}
    events.emit("debug", redact(format_argv(argv)))
    res = run(argv, log_file=log_file, env=env, cwd=work, timeout=1800)
    if not res.ok:
        raise LockError(
            f"pip-compile could not resolve step {step.name!r} (exit"
            f" {res.returncode}):\n{redact(res.tail)}",
            hint=(
                f"Full log: {log_file}. A conflict with the baseline pins means the step needs "
                "a torch the baseline does not have: pin another version, or make the step no_deps."
            ),
        )
    return parse_requirements_text(out.read_text(), str(out))


def pin_no_deps(
    step: Step,
    finder: ArtifactFinder,
    *,
    requirements: list[str],
    earlier: Mapping[str, tuple[str, str]],
    last: Mapping[str, str],
    forced: Mapping[str, str],
    move: set[str] | None,
) -> list[LockedReq]:
    """Exactly the named packages at an exact version, with every matching artifact's hash.

    The version: ``forced`` (``--upgrade-package NAME==VERSION``), else the one an earlier step
    pinned (``earlier``: name -> (version, step); a no_deps step must agree with it unless it
    ``replaces`` it), else its ``last`` pin while it still matches and no upgrade asked for it
    (``move``: names to move; None: every name), else the newest that matches.
    """
    out = []
    for raw in requirements:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        if req.url:
            out.append(
                LockedReq(name, f"{name} @ {req.url}", 0, None, _url_hashes(req.url), req.url)
            )
            continue
        files = [(a, pv[1]) for a in finder.files(name) if (pv := parse_filename(a.filename))]
        versions = sorted(
            {
                Version(v)
                for _, v in files
                if req.specifier.contains(v, prereleases=step.pre or None) or _exact(req, v)
            },
            reverse=True,
        )
        if not versions:
            urls = (*finder.sources.index_urls, *finder.sources.find_links)
            raise LockError(
                f"step {step.name!r}: no artifact of {raw} in the step's sources "
                f"({', '.join(redact(s) for s in urls)})",
                hint="Check the version and the step's index_url/find_links.",
            )

        def have(v: str | None, versions: list[Version] = versions) -> str | None:
            return next(
                (str(x) for x in versions if v is not None and same_version(str(x), v)), None
            )

        version = str(versions[0])
        prior = earlier.get(name) if name not in step.replaces else None
        if name in forced:
            if have(forced[name]) is None:
                raise LockError(
                    f"--upgrade-package {name}=={forced[name]}: step {step.name!r} asks for {raw},"
                    " which that version does not satisfy (or no file of it is in the step's"
                    " sources)"
                )
            version = have(forced[name]) or version
        elif prior is not None:
            if have(prior[0]) is None:
                raise LockError(
                    f"step {step.name!r} does not agree with the steps before it: it asks for"
                    f" {raw}, and step {prior[1]!r} pinned {name} {prior[0]}",
                    hint=(
                        f"Make the two steps agree on {name}, or let step {step.name!r} replace"
                        " it: "
                        f'replaces = ["{name}"] in its [[step]] table.'
                    ),
                )
            version = have(prior[0]) or version
        elif (move is not None and name not in move) and have(last.get(name)) is not None:
            version = have(last.get(name)) or version
        hashes = [a.sha256 or "" for a in finder.matching_all(name, version)]
        out.append(
            LockedReq(name, f"{name}=={version}", 0, version, tuple(sorted(h for h in hashes if h)))
        )
    return out


def _url_hashes(url: str) -> tuple[str, ...]:
    """A direct-URL archive is pinned by its sha256 (``#sha256=`` where the URL states it, else the
    download's); a git URL has none (it is pinned by its commit)."""
    if url.startswith("git+"):
        return ()
    frag = url.split("#", 1)[1] if "#" in url else ""
    if frag.startswith("sha256=") and len(frag) == 71:
        return (frag[7:],)
    import hashlib

    from envbuild.index.client import read_bytes

    return (hashlib.sha256(read_bytes(url.split("#", 1)[0])).hexdigest(),)


def _exact(req: Requirement, version: str) -> bool:
    return any(s.operator == "==" and same_version(s.version, version) for s in req.specifier)


# ----------------------------------------------------------------------------- what a step records


def uv_tools(spec: StackSpec) -> dict[str, str]:
    return {
        "resolver": "uv",
        "uv": uv_version(),
        "python": spec.python,
        "platform": spec.target.platform,
        "host_python": ".".join(map(str, sys.version_info[:3])),
        "envbuild": __version__,
        "packaging": importlib_metadata.version("packaging"),
    }


def extra_args(base: Sources, step: Step) -> list[str]:
    """The baseline's own sources for a later step's resolver. Sources that come from the
    installer's configuration need no flag: pip-compile reads that configuration itself."""
    args: list[str] = []
    if not step.no_index:
        for u in base.index_urls[base.configured_indexes :]:
            if u not in (step.index_url, *step.extra_index_urls):
                args += ["--extra-index-url", u]
    for f in base.find_links[base.configured_links :]:
        if f not in step.find_links:
            args += ["--find-links", f]
    return args


def recorded_sources(sources: Sources, source_args: list[str]) -> dict[str, Any]:
    """What the lock says a step resolved from: the spec's sources, redacted. The installer's
    configured sources (this machine's pip.conf) are named only as such: they are not the lock's."""
    configured = sources.configured_indexes > 0
    own_indexes = sources.index_urls[sources.configured_indexes :]
    if configured:
        index, extras = None, own_indexes
    else:
        index = own_indexes[0] if own_indexes and "--no-index" not in source_args else None
        extras = own_indexes[1:]
    return {
        "index_url": redact(index) if index else None,
        "extra_index_urls": [redact(u) for u in extras],
        "find_links": [redact(u) for u in sources.find_links[sources.configured_links :]],
        "installer_configured": configured,
    }


def step_flags(step: Step) -> dict[str, Any]:
    return {
        "no_deps": step.no_deps,
        "pre": step.pre,
        "no_build_isolation": step.no_build_isolation,
        "upgrade": step.upgrade,
        "upgrade_strategy": step.upgrade_strategy,
        "reinstall": step.reinstall,
        "no_index": step.no_index,
    }


def package_entry(
    r: LockedReq,
    finder: ArtifactFinder,
    requested: set[str],
    refs: Mapping[str, str],
    last: Mapping[str, VcsPin],
) -> dict[str, Any]:
    """One ``packages[]`` entry of ``lock.json``. A git pin records the ref the spec asked for
    (``refs``) and keeps the wheel ``wheelhouse mirror`` built from the same commit (``last``)."""
    entry: dict[str, Any] = {
        "name": r.name,
        "version": r.version,
        "requested": r.name in requested,
        "hashes": sorted(r.hashes),
        "artifacts": [],
        "requires_dist": None,
        "vcs": None,
    }
    if r.url:
        vcs: dict[str, Any] = {"url": r.url, "commit": r.vcs_commit}
        if r.name in refs:
            vcs["ref"] = refs[r.name]
        old = last.get(r.name)
        if old is not None and old.wheel is not None and old.url == r.url:
            vcs["wheel"] = old.wheel.to_dict()
        entry["vcs"] = vcs
        return entry
    assert r.version is not None
    arts = finder.matching(r.name, r.version, r.hashes)
    entry["artifacts"] = [
        {"filename": a.filename, "url": redact(a.url), "sha256": a.sha256} for a in arts
    ]
    if not arts:
        events.emit(
            "warn",
            f"{r.name} {r.version}: no file with a locked hash found in the step's sources; "
            "its URL and metadata are not recorded",
        )
        return entry
    best = next((a for a in arts if a.is_wheel), arts[0])
    try:
        entry["requires_dist"] = requires_of(best)
    except (PreflightError, OSError, ValueError) as exc:
        events.emit("warn", f"{r.name} {r.version}: could not read its metadata ({exc})")
    return entry


def git_refs(requirements: list[str]) -> dict[str, str]:
    """{name: the git ref the spec asked for} of a step's git requirements."""
    out: dict[str, str] = {}
    for raw in requirements:
        ref = git_ref(raw)
        if ref is not None:
            out[canonicalize_name(Requirement(raw).name)] = ref.ref
    return out


def baseline_protected(spec: StackSpec, packages: list[dict[str, Any]]) -> set[str]:
    """The ABI guard's frozen set (``guard.protected_set``) over the baseline's pins, torch's
    markers evaluated for the stack's target (``marker_env``)."""
    torch = next((p for p in packages if p["name"] == spec.abi.package), None)
    requires = guard.active((torch or {}).get("requires_dist") or [], marker_env(spec))
    return guard.protected_set(spec.abi, {p["name"] for p in packages}, requires)


def file_header(spec: StackSpec, step: Step, role: str, fname: str, source_args: list[str]) -> str:
    flags = (
        ["--require-hashes"]
        + (["--no-deps"] if step.no_deps else [])
        + (["--pre"] if step.pre else [])
    )
    srcs = " ".join(redact(a) for a in source_args)
    lines = [
        f"# envbuild lock: step {step.name!r} ({role}) of stack {spec.name!r}",
        "# Written by `envbuild lock`; do not edit (lock.json records this file's sha256).",
        "# Install by hand, after the earlier steps:",
        f"#   pip install {' '.join(flags)}{' ' + srcs if srcs else ''} -r {fname}",
    ]
    return "\n".join(lines) + "\n"
