"""Interpreters: find the Python a venv is made with, and ask one what it is.

Every question is one subprocess through the runner, with a timeout: a broken pyenv shim or
an interpreter that hangs on start-up is a "does not run", never a hang.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild.errors import ConfigError, EnvbuildError, PreflightError
from envbuild.run import run

__all__ = [
    "Interpreter",
    "TargetPython",
    "find_interpreter",
    "find_python",
    "find_uv",
    "interpreter_of",
    "probe_python",
    "python_for",
    "python_version_of",
    "run_python_json",
    "unfit_reason",
    "UnfitInterpreter",
]


@dataclass(frozen=True)
class Interpreter:
    """What one run of an interpreter says about itself."""

    executable: Path  # sys.executable: the interpreter behind a launcher (pyenv shim, symlink)
    version: str  # major.minor
    marker_env: dict[str, str]  # PEP 508 marker variables: a venv made from it has the same
    releaselevel: str = "final"  # sys.version_info.releaselevel: alpha, beta, candidate, final
    # has sys.get_int_max_str_digits (torch._dynamo calls it on 3.11+)
    int_max_str_digits: bool = True

    @property
    def release(self) -> str:
        """The exact version, pre-release suffix included (``3.11.0rc1``)."""
        return self.marker_env.get("python_full_version") or self.version


# PEP 508 marker variables of the *target* interpreter (packaging's default_environment,
# without needing packaging inside the venv). MARKER_ENV_CODE defines `marker_env()`; the
# interpreter probe below runs it, so that one subprocess answers everything (the guard's
# `abi.active` evaluates requirements' markers with what it returns).
MARKER_ENV_CODE = """
import json, os, platform, sys
def fmt(info):
    v = "{0.major}.{0.minor}.{0.micro}".format(info)
    if info.releaselevel != "final":
        v += info.releaselevel[0] + str(info.serial)
    return v
def marker_env():
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": fmt(sys.implementation.version),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }
"""

_PROBE_SCRIPT = (
    MARKER_ENV_CODE
    + "print(json.dumps({'executable': sys.executable, 'version': '%d.%d' % sys.version_info[:2],"
    " 'releaselevel': sys.version_info.releaselevel, 'int_max_str_digits': hasattr(sys,"
    " 'get_int_max_str_digits'), 'marker_env': marker_env()}))\n"
)
_LEVELS = {"alpha": "an alpha", "beta": "a beta", "candidate": "a release candidate"}
_FIX = (
    "Pass --python PATH to a final release of Python {v}: deadsnakes' python{v} (Ubuntu:"
    " `add-apt-repository ppa:deadsnakes/ppa && apt install python{v} python{v}-venv"
    ' python{v}-dev`) or `uv python install {v}` (then --python "$(uv python find {v})").'
)


def unfit_reason(info: Interpreter, package: str = "torch") -> str | None:
    """Why ``package`` (the stack's torch) cannot run on this interpreter, or None. The words
    follow "X is Python 3.11.0rc1, ".

    A pre-release is refused whatever it lacks: torch is built and tested against final CPython
    releases only. The one known case, Ubuntu 22.04's own python3.11 (3.11.0rc1), also lacks
    ``sys.get_int_max_str_digits`` (added in 3.11.0rc2), which ``torch._dynamo`` calls at import
    on 3.11+: torch itself imports, so provision and verify would pass and only ``torch.compile``
    and torchrun's ranks fail, long after the venv was made.
    """
    lacks = (
        tuple(int(x) for x in info.version.split(".")[:2]) >= (3, 11)
        and not info.int_max_str_digits
    )
    dynamo = (
        f"{package}._dynamo calls sys.get_int_max_str_digits at import, which this interpreter"
        " lacks (CPython added it in 3.11.0rc2), so torch.compile and every torchrun rank fail"
        " with AttributeError"
    )
    if info.releaselevel != "final":
        kind = _LEVELS.get(info.releaselevel, f"a {info.releaselevel}")
        why = f"{kind}, a pre-release: {package} supports final CPython releases only"
        return f"{why}; and {dynamo}" if lacks else why
    if lacks:
        return f"on which {package} cannot run: {dynamo}"
    return None


class UnfitInterpreter(PreflightError):
    """The interpreter found or given cannot run the stack's torch (``unfit_reason``); exit 3."""


def _refuse(info: Interpreter, subject: str, reason: str, version: str) -> PreflightError:
    return UnfitInterpreter(
        f"{subject} is Python {info.release}, {reason}. Nothing was made (no data root, no venv).",
        hint=_FIX.format(v=version),
    )


def probe_python(python: str | Path) -> Interpreter | None:
    """One subprocess: version, real executable and marker environment; None if it does not run.

    ``-I -S``: no user site, no ``PYTHON*`` variables, no site import (a third of the start-up);
    none of what is asked depends on them.
    """
    try:
        out = run(
            [str(python), "-I", "-S", "-c", _PROBE_SCRIPT],
            capture=True,
            separate_stderr=True,
            timeout=20,
        )
        data = json.loads((out.output or "").strip().splitlines()[-1]) if out.ok else None
    except (OSError, ValueError, IndexError):
        return None
    if not isinstance(data, dict) or not data.get("executable"):
        return None
    return Interpreter(
        executable=Path(data["executable"]),
        version=str(data["version"]),
        marker_env={k: str(v) for k, v in data["marker_env"].items()},
        releaselevel=str(data.get("releaselevel", "final")),
        int_max_str_digits=bool(data.get("int_max_str_digits", True)),
    )


def python_version_of(python: str | Path) -> str | None:
    """``major.minor`` of an interpreter, or None if it does not run (e.g. a broken pyenv shim)."""
    info = probe_python(python)
    return info.version if info else None


def find_python(version: str, override: str | None = None) -> Path:
    """An interpreter of ``version`` to resolve with (``lock``): ``--python`` or the first
    python<version> that runs. A final release is preferred; a pre-release is taken when it is
    the only one, since resolving never runs torch."""
    return find_interpreter(version, override, require_fit=False).executable


def _candidates(version: str) -> Iterator[str]:
    if w := shutil.which(f"python{version}"):
        yield w
    yield from (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}")
    # pyenv's own variable, else its default
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    yield from sorted(
        glob.glob(os.path.join(pyenv, "versions", f"{version}.*", "bin", f"python{version}")),
        reverse=True,
    )
    yield from sorted(glob.glob(f"/opt/python/cp{version.replace('.', '')}*/bin/python{version}"))
    if w := shutil.which("python3"):
        yield w


def find_interpreter(
    version: str, override: str | None = None, package: str = "torch", *, require_fit: bool = True
) -> Interpreter:
    """Like ``find_python``, with what the probe learnt (one subprocess per candidate tried).

    An interpreter ``package`` cannot run on (``unfit_reason``: a pre-release, or one that lacks
    what torch calls) is refused with exit 3; among the candidates found by looking, a fit one
    is taken over an unfit one wherever it comes in the search order. ``require_fit=False``
    (resolving only, which never runs torch) takes an unfit one where no fit one is found.
    """
    if override is not None:
        return _given_interpreter(version, override, package, require_fit)
    search = _Search(version, package)
    found = search.look()
    if found is not None:
        return found
    if search.unfit is not None and not require_fit:
        return search.unfit[0]
    if search.unfit is not None:
        info, where, reason = search.unfit
        raise _refuse(
            info, f"{info.executable} ({where}), the only Python {version} here,", reason, version
        )
    raise PreflightError(
        f"Python {version}, which the stack asks for, was not found (looked for python{version} on"
        " PATH, in /usr/bin, /usr/local/bin and ~/.pyenv, and asked uv)",
        hint=(
            f"Install it (Ubuntu: the deadsnakes PPA, `apt install python{version}"
            f" python{version}-venv`; or `uv python install {version}`), or pass --python PATH."
        ),
    )


def _given_interpreter(version: str, override: str, package: str, require_fit: bool) -> Interpreter:
    """``--python``: it must run (PreflightError), a version other than the stack's is a warning,
    and one ``package`` cannot run on is refused unless ``require_fit`` is False."""
    if not override.strip():
        raise PreflightError(
            "--python is empty (an unset shell variable?); give the path of an interpreter"
        )
    found = shutil.which(override) or (override if Path(override).exists() else None)
    if found is None:
        raise PreflightError(f"--python {override}: no such interpreter")
    info = probe_python(found)
    if info is None:
        raise PreflightError(f"--python {override}: the interpreter does not run")
    if info.version != version:
        events.emit(
            "warn",
            f"--python {override} is Python {info.version}; the stack asks for {version}",
        )
    if require_fit and (reason := unfit_reason(info, package)) is not None:
        raise _refuse(
            info,
            f"--python {override}"
            + (f" ({info.executable})" if str(info.executable) != override else ""),
            reason,
            info.version,
        )
    return info


@dataclass
class _Search:
    """Looking for a Python ``version`` that ``package`` runs on: the candidates in order, then
    uv's; the first one found that cannot run it is kept (``unfit``: it, where it was found, and
    why)."""

    version: str
    package: str
    unfit: tuple[Interpreter, str, str] | None = None

    def look(self) -> Interpreter | None:
        """The first fit interpreter found, or None."""
        seen: set[str] = set()
        for c in _candidates(self.version):
            real = os.path.realpath(c)
            if real in seen or not os.path.exists(real):
                continue
            seen.add(real)
            info = probe_python(c)
            if info is not None and self.fit(info, f"found as {c}"):
                return info
        uv = find_uv()
        if uv:
            out = run(
                [uv, "python", "find", self.version],
                capture=True,
                separate_stderr=True,
                timeout=30,
            )
            found = (out.output or "").strip()
            if out.ok and found:
                info = probe_python(found)
                if info is not None and self.fit(info, "uv's"):
                    return info
        return None

    def fit(self, info: Interpreter, where: str) -> bool:
        """Whether ``info`` is the version asked for and can run ``package`` (an unfit one is
        kept, said at debug level)."""
        if info.version != self.version:
            return False
        reason = unfit_reason(info, self.package)
        if reason is not None:
            events.emit("debug", f"skipping {info.executable} ({where}): {reason}")
            self.unfit = self.unfit or (info, where, reason)
            return False
        return True


def find_uv() -> str | None:
    """The uv envbuild runs: the ``uv`` package's binary, else ``uv`` on PATH; None when there is
    none. A uv older than envbuild's floor (``UV_FLOOR``) is refused here, naming the version
    needed (an old uv fails later with a usage error about a flag, which reads as the input's
    fault)."""
    uv: str | None
    try:
        from uv import find_uv_bin

        uv = str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        uv = shutil.which("uv")
    if uv is not None:
        _check_uv(uv)
    return uv


# The oldest uv envbuild works with: the floor of its ``uv`` requirement in pyproject.toml (a test
# holds the two equal; read here without importlib.metadata, which every run would pay for).
UV_FLOOR = "0.6.15"


@functools.cache
def _check_uv(uv: str) -> None:
    from packaging.version import InvalidVersion, Version

    floor = UV_FLOOR
    out = run([uv, "--version"], capture=True, separate_stderr=True, timeout=60)
    words = (out.output or "").split()
    try:
        version = Version(words[1]) if out.ok and len(words) > 1 else None
    except InvalidVersion:
        version = None
    if version is not None and version < Version(floor):
        raise ConfigError(
            f"uv {version} ({uv}) is older than envbuild needs: uv {floor} or newer (older ones"
            " lack `uv export --format pylock.toml` and `--format requirements.txt`)",
            hint=f"Upgrade it where envbuild runs: {sys.executable} -m pip install 'uv>={floor}'",
        )


def run_python_json(
    python: Path,
    code: str,
    timeout: float = 120,
    what: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``code`` with ``python`` and parse the JSON object its last stdout line prints.

    Raises ``TimeoutError`` (naming ``what`` and the timeout) when it hangs, ``RuntimeError``
    with its last error line when it fails.
    """
    out = run(
        [str(python), "-c", code], capture=True, separate_stderr=True, timeout=timeout, env=env
    )
    if out.timed_out:
        raise TimeoutError(out.hung_message(what or f"{python} -c ..."))
    if not out.ok:
        err = (out.stderr or "").strip()
        raise RuntimeError(err.splitlines()[-1] if err else out.describe(what or str(python)))
    data = json.loads((out.output or "").strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


@dataclass(frozen=True)
class TargetPython:
    """The Python an install is for: its minor, and the interpreter of it found here (None where
    the minor was named, by a ``.python-version`` or a caller, and no interpreter of it is here)."""

    minor: str  # major.minor
    executable: Path | None


def interpreter_of(minor: str) -> TargetPython:
    """``minor``, with the interpreter of it found here (``find_interpreter``; a pre-release is
    taken where it is the only one, since nothing is run on it but a resolver); None where none
    is."""
    try:
        exe: Path | None = find_interpreter(minor, require_fit=False).executable
    except EnvbuildError:
        exe = None
    return TargetPython(minor, exe)


def _pinned_minor(pinned: Path) -> str | None:
    """The minor a ``.python-version`` names (its first word, as uv reads it), None where it names
    none (no file, an empty one, an implementation's name)."""
    try:
        text = pinned.read_text(encoding="utf-8").split()[0] if pinned.is_file() else ""
    except (OSError, IndexError):
        text = ""
    return ".".join(text.split(".")[:2]) if text and text[:1].isdigit() else None


def python_for(requires: str | None, what: str, pinned: Path | None = None) -> TargetPython:
    """The Python to install for, as uv chooses, with its interpreter: the minor ``pinned`` (a
    project's ``.python-version``) names, where given; else for ``requires`` (a
    ``requires-python``) this interpreter's when it fits, else the newest that does among the
    interpreters found (``_candidates``), then ``uv python find``. PreflightError (exit 3) naming
    ``requires`` and what was looked at when none fits; ``what``: whose requirement it is (a lock
    file)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    named = _pinned_minor(pinned) if pinned is not None else None
    if named is not None:
        return interpreter_of(named)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        spec = SpecifierSet(requires) if requires else None
    except InvalidSpecifier:
        spec = None
    if spec is None or spec.contains(f"{here}.{sys.version_info[2]}", prereleases=True):
        return TargetPython(here, Path(sys.executable))
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
                events.emit(
                    "info",
                    f"the lock requires Python {requires}, and this interpreter "
                    f"is {here}: installing for Python {version} ({info.executable}); "
                    "--python chooses another",
                )
                return TargetPython(version, info.executable)
            looked.append(f"{exe} ({got})")
    found = _uv_python_find(requires or "")
    if found is not None:
        events.emit(
            "info",
            f"the lock requires Python {requires}: installing for Python "
            f"{found.minor} ({found.executable}, found by uv python find)",
        )
        return found
    raise PreflightError(
        f"{what}: the lock requires Python {requires}, and no interpreter here "
        f"fits it (looked at: {', '.join(dict.fromkeys(looked))}, and uv python "
        "find)",
        hint=(
            "Install a Python the lock allows (e.g. `uv python "
            "install`), or name one with --python."
        ),
    )


def _uv_python_find(requires: str) -> TargetPython | None:
    """``uv python find REQUIRES``: an interpreter uv knows, else None."""
    uv = find_uv()
    if uv is None or not requires:
        return None
    try:
        out = run(
            [uv, "python", "find", "--no-python-downloads", requires],
            capture=True,
            separate_stderr=True,
            timeout=30,
        )
    except OSError:
        return None
    exe = (out.output or "").strip().splitlines()[-1] if out.ok and out.output else ""
    info = probe_python(exe) if exe else None
    if info is None:
        return None
    return TargetPython(".".join(info.version.split(".")[:2]), info.executable)
