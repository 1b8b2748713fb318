"""The installer: interpreters, venvs, and one step run through pip or uv as a subprocess.

pip is driven as ``<venv>/bin/python -m pip`` and uv as ``uv pip install --python <venv>``;
requirements and constraints are passed as files. A failed step is classified (resolver
conflict on a protected package, hash mismatch, disk full, network) into one clear paragraph.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from envbuild import abi, events
from envbuild.errors import ABIViolation, InstallError, PreflightError
from envbuild.net import redact
from envbuild.plan import Backend, InstallerSources, PlannedStep, progress_env, step_commands
from envbuild.run import RunResult, format_argv, run
from envbuild.spec import StackSpec

# ----------------------------------------------------------------------------- interpreters


@dataclass(frozen=True)
class Interpreter:
    """What one run of an interpreter says about itself."""

    executable: Path  # sys.executable: the interpreter behind a launcher (pyenv shim, symlink)
    version: str  # major.minor
    marker_env: dict[str, str]  # PEP 508 marker variables: a venv made from it has the same


_PROBE_SCRIPT = abi.MARKER_ENV_CODE + (
    "print(json.dumps({'executable': sys.executable, 'version': '%d.%d' % sys.version_info[:2], "
    "'marker_env': marker_env()}))\n"
)


def probe_python(python: str | Path) -> Interpreter | None:
    """One subprocess: version, real executable and marker environment; None if it does not run.

    ``-I -S``: no user site, no ``PYTHON*`` variables, no site import (a third of the start-up);
    none of what is asked depends on them.
    """
    try:
        out = run([str(python), "-I", "-S", "-c", _PROBE_SCRIPT], capture=True, separate_stderr=True, timeout=20)
        data = json.loads((out.output or "").strip().splitlines()[-1]) if out.ok else None
    except (OSError, ValueError, IndexError):
        return None
    if not isinstance(data, dict) or not data.get("executable"):
        return None
    return Interpreter(executable=Path(data["executable"]), version=str(data["version"]),
                       marker_env={k: str(v) for k, v in data["marker_env"].items()})


def python_version_of(python: str | Path) -> str | None:
    """``major.minor`` of an interpreter, or None if it does not run (e.g. a broken pyenv shim)."""
    info = probe_python(python)
    return info.version if info else None


def find_python(version: str, override: str | None = None) -> Path:
    """The interpreter a venv is made with: ``--python`` or the first python<version> that runs."""
    return find_interpreter(version, override).executable


def _candidates(version: str) -> Iterator[str]:
    if w := shutil.which(f"python{version}"):
        yield w
    yield from (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}")
    yield from sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")), reverse=True)
    yield from sorted(glob.glob(f"/opt/python/cp{version.replace('.', '')}*/bin/python{version}"))
    if w := shutil.which("python3"):
        yield w


def find_interpreter(version: str, override: str | None = None) -> Interpreter:
    """Like ``find_python``, with what the probe learnt (one subprocess per candidate tried)."""
    if override:
        found = shutil.which(override) or (override if Path(override).exists() else None)
        if found is None:
            raise PreflightError(f"--python {override}: no such interpreter")
        info = probe_python(found)
        if info is None:
            raise PreflightError(f"--python {override}: the interpreter does not run")
        if info.version != version:
            events.emit("warn", f"--python {override} is Python {info.version}; the stack asks for {version}")
        return info
    seen: set[str] = set()
    for c in _candidates(version):
        real = os.path.realpath(c)
        if real in seen or not os.path.exists(real):
            continue
        seen.add(real)
        info = probe_python(c)
        if info is not None and info.version == version:
            return info
    uv = find_uv()
    if uv:
        out = run([uv, "python", "find", version], capture=True, separate_stderr=True, timeout=30)
        found = (out.output or "").strip()
        if out.ok and found:
            info = probe_python(found)
            if info is not None and info.version == version:
                return info
    raise PreflightError(
        f"Python {version}, which the stack asks for, was not found (looked for python{version} on PATH, "
        "in /usr/bin, /usr/local/bin and ~/.pyenv, and asked uv)",
        hint=f"Install it (Ubuntu: the deadsnakes PPA, `apt install python{version} python{version}-venv`; "
        f"or `uv python install {version}`), or pass --python PATH.",
    )


def find_uv() -> str | None:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def pick_backend(requested: str | None) -> Backend:
    if requested == "pip":
        return "pip"
    if requested == "uv":
        if find_uv() is None:
            raise PreflightError("--backend uv: no uv executable found (pip install uv, or use --backend pip)")
        return "uv"
    return "uv" if find_uv() else "pip"


def pip_config_sources(env: Mapping[str, str] | None = None) -> InstallerSources:
    """The index, extra indexes and find-links pip is configured with (pip.conf and PIP_*)."""
    out = run([sys.executable, "-m", "pip", "config", "list"], capture=True, separate_stderr=True, timeout=30, env=env)
    values: dict[str, list[str]] = {}
    for line in (out.output or "").splitlines():
        m = re.match(r"^[^.]*\.(index-url|extra-index-url|find-links)='(.*)'$", line.strip())
        if m:
            key, raw = m.groups()
            # later sources (env) win over files for the same key, as pip does
            values[key] = raw.split()
    index = values.get("index-url", [None])[0]
    return InstallerSources(
        index_url=index,
        extra_index_urls=tuple(values.get("extra-index-url", [])),
        find_links=tuple(values.get("find-links", [])),
    )


def create_venv(python: Path, venv: Path, backend: Backend, log_file: Path,
                seed_sources: tuple[str, ...] = (), pass_fds: tuple[int, ...] = ()) -> None:
    """``seed_sources``: where ``uv venv --seed`` gets pip (e.g. ``--no-index --find-links WH`` offline;
    without them uv asks its default index, which an offline host cannot reach)."""
    if backend == "uv":
        uv = find_uv()
        assert uv is not None
        argv = [uv, "venv", "--seed", *seed_sources, "--python", str(python), str(venv)]
    else:
        argv = [str(python), "-m", "venv", str(venv)]
    events.emit("info", f"creating the venv: {format_argv(argv)}")
    result = run(argv, log_file=log_file, pass_fds=pass_fds)
    if not result.ok:
        raise InstallError(f"creating the venv at {venv} failed (exit {result.returncode}):\n{result.tail}",
                           hint=f"Full log: {log_file}")


# ----------------------------------------------------------------------------- one step


@dataclass(frozen=True)
class StepRun:
    result: RunResult
    argv: list[str]


def run_step(
    planned: PlannedStep,
    *,
    spec: StackSpec,
    backend: Backend,
    python: Path,
    state_dir: Path,
    constraints: Path | None,
    log_file: Path,
    base_env: Mapping[str, str],
    pass_fds: tuple[int, ...] = (),
) -> StepRun:
    env = dict(base_env)
    env.update(planned.env)
    env["VIRTUAL_ENV"] = str(python.parent.parent)
    env.update(progress_env(backend, python))  # byte progress for a live display, never in argv
    step_run = None
    # the same commands `envbuild plan --json` shows (plan.step_commands is the one code path)
    for command in step_commands(planned, backend=backend, python=python, uv=find_uv() if backend == "uv" else None,
                                 steps_dir=state_dir / "steps", constraints=constraints):
        command.write()
        argv = list(command.argv)
        events.emit("debug", redact(format_argv(argv)))
        result = run(argv, log_file=log_file, env=env, pass_fds=pass_fds,
                     on_line=lambda line: events.emit("debug", redact(line)))
        if not result.ok:
            raise classify_failure(planned, spec, result)
        step_run = StepRun(result, argv)
    assert step_run is not None
    return step_run


_CONFLICT_PIP = re.compile(r"^\s*(?P<who>[A-Za-z0-9._-]+) (?P<ver>\S+) depends on (?P<req>.+)$", re.M)
_CONFLICT_UV = re.compile(r"(?P<who>[A-Za-z0-9._-]+)(?:==| )(?P<ver>[0-9][^\s,]*) depends on (?P<req>[^,\n]+)")


def classify_failure(planned: PlannedStep, spec: StackSpec, result: RunResult) -> Exception:
    """Turn an installer failure into one paragraph: what broke, what to change, where the log is."""
    tail = redact(result.tail)
    where = f"Full log: {result.log_file}"
    step = f"step {planned.number} ({planned.name!r})"
    abi = spec.abi
    text = _log_text(result)
    culprits = []
    for rx in (_CONFLICT_PIP, _CONFLICT_UV):
        for m in rx.finditer(text):
            req = m.group("req").strip().rstrip(".")
            name = re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0]
            if abi.is_protected(name) and not abi.is_protected(m.group("who")):
                culprits.append(f"{m.group('who')} {m.group('ver')} requires {req}")
    if culprits:
        return ABIViolation(
            f"{step} would replace {abi.package}: {'; '.join(dict.fromkeys(culprits))}, which the installed "
            f"baseline {abi.package} {abi.version} does not satisfy. The constraint pinning the baseline stopped "
            "the installer; nothing was changed.",
            hint=f"Fix the spec: install that package with no_deps = true in its own step, or pin a version "
            f"whose {abi.package} requirement the baseline satisfies. {where}",
        )
    if "do not match the hashes" in text.lower() or "hash mismatch" in text.lower():
        return InstallError(f"{step}: an artifact's hash does not match the lock (tampered or re-uploaded file)."
                            f"\n{tail}", hint=f"Re-lock with `envbuild lock` if the change is expected. {where}")
    if "No space left on device" in text or "Errno 28" in text:
        return InstallError(f"{step}: the disk is full while installing.\n{tail}",
                            hint=f"Free space on the data root or choose a larger one with --root. {where}")
    if re.search(r"(No matching distribution|not found in the package registry|No solution found|"
                 r"ResolutionImpossible|Could not find a version)", text):
        return InstallError(f"{step}: the installer could not find or resolve a package.\n{tail}",
                            hint=f"Check the package names and versions and the step's index_url/find_links. {where}")
    if re.search(r"(Failed to establish a new connection|NewConnectionError|Temporary failure in name resolution|"
                 r"Connection refused|timed out|dns error|error sending request)", text, re.I):
        return InstallError(f"{step}: a package index could not be reached.\n{tail}",
                            hint=f"Check the network or use --offline --wheelhouse DIR. {where}")
    return InstallError(f"{step} failed (exit {result.returncode}):\n{tail}",
                        hint=f"The venv is kept as it is for inspection. {where}")


def _log_text(result: RunResult) -> str:
    if result.log_file and result.log_file.exists():
        data = result.log_file.read_text(errors="replace")
        # only this attempt: the log is appended across attempts
        return data[data.rfind("\n$ ") + 1:] if "\n$ " in data else data
    return result.tail


def run_python_json(python: Path, code: str, timeout: float = 120) -> dict[str, object]:
    out = run([str(python), "-c", code], capture=True, separate_stderr=True, timeout=timeout)
    if not out.ok:
        err = (out.stderr or "").strip()
        raise RuntimeError(out.describe(f"{python} -c ...") if out.timed_out or not err else err.splitlines()[-1])
    data = json.loads((out.output or "").strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data

