"""Which resolver locks a stack, and the cross-target one (``uv pip compile``).

A lock is for the stack's Python (``python``) on its target platform (``[target] platform``),
not for the machine that makes it. Two resolvers, each where it is the right tool:

- **pip-compile** (pip-tools) resolves for the interpreter it runs under: its markers, its
  ``Requires-Python``, its tags. It is used when that interpreter *is* the target: the
  running Python has the stack's major.minor on a Linux host of the target's CPU, or
  ``--python PATH`` names one (the operator's choice; a helper venv gets pip-tools).
- **uv pip compile** resolves for a target it does not run on (``--python-version 3.13
  --python-platform x86_64-manylinux_2_28``), so a laptop or a CI runner with Python 3.11
  locks the 3.13 stack of an H200 host. It is used for every other case.

Both run with ``--generate-hashes`` and write the same file format, and both list the hash of
*every* file of the chosen version (all wheels and the sdist, not only the ones this machine
would pick), so the file installs under ``--require-hashes`` wherever the target host's pip
or uv lands. uv does not read pip's configuration, so the sources pip is configured with
(pip.conf, ``PIP_*``) are passed to it as flags; ``--index-strategy unsafe-best-match`` makes
it choose across indexes as pip does (the best version on any of them), instead of stopping
at the first index that has the name: the PyTorch nightly index serves ``numpy`` and
``setuptools`` too, and must not shadow PyPI's versions in later steps.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from envbuild import events
from envbuild.errors import LockError, PreflightError
from envbuild.index.client import Sources, cache_dir
from envbuild.index.net import redact
from envbuild.installer import find_uv
from envbuild.run import format_argv, run
from envbuild.spec import StackSpec, Step
from envbuild.stacklock.model import LockedReq, parse_requirements_text

ResolverChoice = Literal["auto", "pip-compile", "uv"]
RESOLVERS: tuple[str, ...] = get_args(ResolverChoice)


@dataclass(frozen=True)
class Resolver:
    kind: Literal["pip-compile", "uv"]
    why: str  # one line for the log and lock.json


def host_matches_target(spec: StackSpec) -> bool:
    """The running interpreter resolves exactly as the target host would (version, OS, CPU)."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return (
        here == spec.python and sys.platform == "linux" and platform.machine() == spec.target.arch
    )


def choose_resolver(
    spec: StackSpec, requested: ResolverChoice, python_override: str | None
) -> Resolver:
    if requested == "uv":
        return Resolver("uv", "--resolver uv")
    if requested == "pip-compile":
        return Resolver("pip-compile", "--resolver pip-compile")
    if python_override:
        return Resolver(
            "pip-compile", f"--python {python_override}: pip-compile under that interpreter"
        )
    if host_matches_target(spec):
        return Resolver(
            "pip-compile",
            f"this interpreter is the target (Python {spec.python}, linux {spec.target.arch})",
        )
    here = (
        f"Python {sys.version_info[0]}.{sys.version_info[1]} on {sys.platform} {platform.machine()}"
    )
    return Resolver(
        "uv", f"cross-target: {here} resolving for Python {spec.python} on {spec.target.platform}"
    )


def uv_version() -> str:
    uv = find_uv()
    if uv is None:
        return ""
    out = run([uv, "--version"], capture=True, separate_stderr=True, timeout=60)
    parts = (out.output or "").split()
    return parts[1] if out.ok and len(parts) > 1 else ""


def uv_source_args(sources: Sources, step: Step, wheelhouse: str | None) -> list[str]:
    """Every source as a flag (uv reads no pip.conf): the index first, then extras, then
    find-links."""
    if wheelhouse:
        return ["--no-index", "--find-links", wheelhouse]
    args: list[str] = []
    if step.no_index or not sources.index_urls:
        args.append("--no-index")
    else:
        args += ["--index-url", sources.index_urls[0]]
        for u in dict.fromkeys(sources.index_urls[1:]):
            args += ["--extra-index-url", u]
    for f in dict.fromkeys(sources.find_links):
        args += ["--find-links", f]
    return args


def uv_compile_step(
    step: Step,
    spec: StackSpec,
    *,
    requirements: list[str],
    source_args: list[str],
    constraints: list[str],
    preferences: list[str],
    work: Path,
    log_file: Path,
) -> list[LockedReq]:
    """``uv pip compile`` one step (``requirements``: its packages, git refs resolved) for the
    spec's Python and target platform. ``preferences`` (``name==version`` lines) are its existing
    output file, whose pins uv keeps where they still satisfy the step and the constraints."""
    uv = find_uv()
    if uv is None:
        raise PreflightError(
            "locking for another Python or platform needs uv, and it is not installed",
            hint=(
                "pip install uv (a dependency of envbuild), or lock on a host with "
                f"Python {spec.python} (pip-compile: --python PATH)."
            ),
        )
    work.mkdir(parents=True, exist_ok=True)
    cons = work / f"{step.name}.constraints.txt"
    cons.write_text("\n".join(constraints) + "\n")
    req_in = work / f"{step.name}.in"
    req_in.write_text("\n".join(requirements) + "\n")
    out = work / f"{step.name}.txt"
    out.write_text("".join(f"{line}\n" for line in preferences))
    argv = [
        uv,
        "pip",
        "compile",
        "--python-version",
        spec.python,
        "--python-platform",
        spec.target.uv_platform,
        "--generate-hashes",
        "--no-header",
        "--no-annotate",
        "--quiet",
        "--no-config",
        "--no-python-downloads",
        "--index-strategy",
        "unsafe-best-match",
        "--cache-dir",
        str(cache_dir() / "uv"),
        "--constraint",
        str(cons),
        "-o",
        str(out),
        *source_args,
    ]
    if step.pre:
        argv += ["--prerelease", "allow"]
    if step.no_build_isolation:
        argv.append("--no-build-isolation")
    argv.append(str(req_in))
    env = {**_uv_env(), **step.env}
    events.emit("debug", redact(format_argv(argv)))
    res = run(argv, log_file=log_file, env=env, cwd=work, timeout=1800)
    if not res.ok:
        raise LockError(
            f"uv pip compile could not resolve step {step.name!r} for Python {spec.python} on "
            f"{spec.target.platform} (exit {res.returncode}):\n{redact(res.tail)}",
            hint=(
                f"Full log: {log_file}. A conflict with the baseline pins means the step needs "
                "a torch the baseline does not have: pin another version, or make the step no_deps."
            ),
        )
    return parse_requirements_text(out.read_text(), str(out))


def _uv_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    # pip's CA bundle setting, for a machine whose index needs it (uv reads SSL_CERT_FILE)
    cert = env.get("PIP_CERT")
    if cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert
    return env
