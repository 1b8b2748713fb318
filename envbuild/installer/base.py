"""What every installer backend shares: the ``Installer`` protocol, running a step's commands,
and turning a failed run into one paragraph (resolver conflict on a protected package, hash
mismatch, disk full, network, a hang)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from envbuild import events
from envbuild.errors import ABIViolation, EnvbuildError, InstallError
from envbuild.index.net import redact
from envbuild.plan import Backend, InstallerSources, PlannedStep, progress_env, step_commands
from envbuild.run import RunResult, format_argv, run
from envbuild.spec import StackSpec

__all__ = ["Installer", "StepRun", "classify_failure", "run_step_commands"]


@dataclass(frozen=True)
class StepRun:
    result: RunResult
    argv: list[str]


class Installer(Protocol):
    """pip or uv: the one interface provision, prefetch and the lock tools use."""

    name: Backend

    def default_sources(self, wheelhouse: str | None) -> InstallerSources:
        """Sources a step without its own index is given (uv does not read pip.conf: pip's are
        passed)."""
        ...

    def venv_argv(
        self, python: Path, venv: Path, *, offline_wheelhouse: str | None = None, seed: bool = True
    ) -> list[str]:
        """The command that makes ``venv`` from ``python`` (with pip in it: lock tools and users
        need it; ``seed=False``: bare where the backend does not need pip itself, as ``uv sync``
        makes it).
        """
        ...

    def create_venv(
        self,
        python: Path,
        venv: Path,
        *,
        log_file: Path,
        offline_wheelhouse: str | None = None,
        pass_fds: Sequence[int] = (),
        seed: bool = True,
    ) -> None: ...

    def compiles_bytecode(self, option: str, *, adopted: bool = False) -> bool:
        """Whether ``--compile-bytecode``-style compilation is asked of this backend at install."""
        ...

    def install_env(
        self, env: Mapping[str, str], python: Path, *, compile_option: str, adopted: bool = False
    ) -> dict[str, str]:
        """``env`` as this backend's step runs want it (bytecode switch, progress reporting)."""
        ...

    def run_step(
        self,
        planned: PlannedStep,
        *,
        spec: StackSpec,
        python: Path,
        steps_dir: Path,
        constraints: Path | None,
        log_file: Path,
        env: Mapping[str, str],
        pass_fds: Sequence[int] = (),
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> StepRun: ...

    def download_argv(
        self,
        planned: PlannedStep,
        *,
        python: Path,
        scratch: Path,
        sources: Sequence[str],
        requirements: Sequence[str],
    ) -> list[str] | None:
        """A command that warms this backend's cache with ``requirements`` (exact pins), or None."""
        ...

    def dry_run_argv(
        self, python: Path, *, args: Sequence[str], requirements_file: Path, report: Path | None
    ) -> list[str]:
        """What would ``install`` do, without installing (pip also writes a JSON ``report``)."""
        ...


_FILE_LISTS = frozenset({"UV_BUILD_CONSTRAINT", "PIP_BUILD_CONSTRAINT"})  # space-separated files


def run_step_commands(
    installer: Installer,
    planned: PlannedStep,
    *,
    spec: StackSpec,
    python: Path,
    uv: str | None,
    steps_dir: Path,
    constraints: Path | None,
    log_file: Path,
    env: Mapping[str, str],
    pass_fds: Sequence[int] = (),
    timeout: float | None = None,
    on_line: Callable[[str], None] | None = None,
    pylock_pip: Sequence[str] | None = None,
) -> StepRun:
    """Run a step's commands (``plan.step_commands``: what ``plan --json`` shows) in order.
    ``on_line``: called with each line of their output too (provision's prefetch waits for the
    first step's ``Resolved`` line)."""
    step_env = dict(env)
    for key, value in planned.env.items():
        # a step's own build constraints join the baseline's (both installers take a list of files)
        joined = key in _FILE_LISTS and step_env.get(key) and value not in step_env[key].split()
        step_env[key] = f"{step_env[key]} {value}" if joined else value
    step_env["VIRTUAL_ENV"] = str(python.parent.parent)
    # byte progress for a live display, never in argv
    step_env.update(progress_env(installer.name, python))
    step_run = None
    for command in step_commands(
        planned,
        backend=installer.name,
        python=python,
        uv=uv,
        steps_dir=steps_dir,
        constraints=constraints,
        pylock_pip=pylock_pip,
    ):
        command.write()
        argv = list(command.argv)
        events.emit("debug", redact(format_argv(argv)))
        result = run(
            argv,
            log_file=log_file,
            env=step_env,
            pass_fds=pass_fds,
            timeout=timeout,
            on_line=lambda line: _tell(line, on_line),
        )
        if not result.ok:
            raise classify_failure(planned, spec, result)
        step_run = StepRun(result, argv)
    assert step_run is not None
    if planned.locked_file is not None:  # a wheel built from a git pin: that git install's record
        from envbuild.installer.records import record_git_builds

        for name in record_git_builds(planned.locked_file, python, installer.name):
            events.emit("debug", f"{name}: recorded as the git install of the lock's pin")
    return step_run


def _tell(line: str, on_line: Callable[[str], None] | None) -> None:
    events.emit("debug", redact(line))
    if on_line is not None:
        on_line(line)


_CONFLICT_PIP = re.compile(
    r"^\s*(?P<who>[A-Za-z0-9._-]+) (?P<ver>\S+) depends on (?P<req>.+)$", re.M
)
_CONFLICT_UV = re.compile(
    r"(?P<who>[A-Za-z0-9._-]+)(?:==| )(?P<ver>[0-9][^\s,]*) depends on (?P<req>[^,\n]+)"
)


@dataclass(frozen=True)
class _Failure:
    """A failed installer run as each reader below sees it: the step (``step``: how a message
    names it), the whole log of this attempt (``text``), its redacted tail and where the log
    is."""

    planned: PlannedStep
    spec: StackSpec
    result: RunResult
    step: str
    text: str
    tail: str
    where: str


def classify_failure(planned: PlannedStep, spec: StackSpec, result: RunResult) -> EnvbuildError:
    """Turn an installer failure into one paragraph: what broke, what to change, where the log
    is."""
    tail = redact(result.tail)
    where = f"Full log: {result.log_file}"
    step = f"step {planned.number} ({planned.name!r})"
    if result.timed_out:
        return InstallError(
            f"{step}: " + result.hung_message(f"the installer ({Path(result.argv[0]).name})"),
            hint=(
                "An installer that prints nothing for this long is usually stuck on a network "
                "read: check the step's index, or raise --step-timeout for a slow one."
            ),
        )
    failure = _Failure(planned, spec, result, step, _log_text(result), tail, where)
    for read in _READERS:
        found = read(failure)
        if found is not None:
            return found
    return InstallError(
        f"{step} failed (exit {result.returncode}):\n{tail}",
        hint=f"The venv is kept as it is for inspection. {where}",
    )


def _protected_conflict(f: _Failure) -> EnvbuildError | None:
    """The resolver would replace torch or a protected package (the baseline's constraint
    stopped it)."""
    abi = f.spec.abi
    culprits = []
    for rx in (_CONFLICT_PIP, _CONFLICT_UV):
        for m in rx.finditer(f.text):
            req = m.group("req").strip().rstrip(".")
            name = re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0]
            if abi.is_protected(name) and not abi.is_protected(m.group("who")):
                culprits.append(f"{m.group('who')} {m.group('ver')} requires {req}")
    if not culprits:
        return None
    return ABIViolation(
        f"{f.step} would replace {abi.package}: {'; '.join(dict.fromkeys(culprits))}, which the"
        f" installed baseline {abi.package} {abi.version} does not satisfy. The constraint"
        " pinning the baseline stopped the installer; nothing was changed.",
        hint=(
            "Fix the spec: install that package with no_deps = true in its own step, or pin a"
            f" version whose {abi.package} requirement the baseline satisfies. {f.where}"
        ),
    )


def _hash_mismatch(f: _Failure) -> EnvbuildError | None:
    """A downloaded file's hash is not the lock's, or not the one its index lists."""
    if "do not match the hashes" not in f.text.lower() and "hash mismatch" not in f.text.lower():
        return None
    if f.planned.locked_file is not None:
        return InstallError(
            f"{f.step}: an artifact's hash does not match the lock (a download cut short, or a "
            f"tampered or re-uploaded file).\n{f.tail}",
            hint=(
                "Run provision again to retry the download; re-lock with `envbuild lock` if "
                f"the change is expected. {f.where}"
            ),
        )
    return InstallError(
        f"{f.step}: a downloaded file does not match the sha256 its index lists for it (a"
        f" download cut short, or a file changed on the index).\n{f.tail}",
        hint=f"Run provision again to retry the download. {f.where}",
    )


def _disk_full(f: _Failure) -> EnvbuildError | None:
    if "No space left on device" not in f.text and "Errno 28" not in f.text:
        return None
    return InstallError(
        f"{f.step}: the disk is full while installing.\n{f.tail}",
        hint=f"Free space on the data root or choose a larger one with --root. {f.where}",
    )


_CUT_SHORT = re.compile(
    r"(IncompleteRead|Connection broken|incomplete (body|read|message)|unexpected end of file|"
    r"connection closed before message completed|Failed to read from the distribution cache)",
    re.I,
)


def _cut_short(f: _Failure) -> EnvbuildError | None:
    if not _CUT_SHORT.search(f.text):
        return None
    return InstallError(
        f"{f.step}: a download was cut short (the index closed the connection mid-file).\n{f.tail}",
        hint=(
            "Run provision again: the step is retried from the start. If it keeps happening, "
            f"check the index or a proxy between. {f.where}"
        ),
    )


_BUILD_REQUIREMENTS = re.compile(
    r"(requirements from `build-system\.requires`|install build dependencies did not run)"
)


def _build_requirements(f: _Failure) -> EnvbuildError | None:
    """A package built from source could not get its build backend."""
    if not _BUILD_REQUIREMENTS.search(f.text):
        return None
    return InstallError(
        f"{f.step}: a package built from source could not get its build requirements (its "
        f"build-system.requires: the build backend).\n{f.tail}",
        hint=(
            "An isolated build resolves them from the project's indexes ([[tool.uv.index]] in"
            " the pyproject.toml beside the lock), else from uv's and pip's configured ones"
            " (uv.toml, pip.conf, UV_*/PIP_*), as uv sync does: make the backend available"
            " there, or pin it to one that is with --build-constraints FILE or [tool.uv]"
            " build-constraint-dependencies. Offline, `envbuild wheelhouse mirror --lock LOCK`"
            f" carries them. {f.where}"
        ),
    )


_UNRESOLVABLE = re.compile(
    r"(No matching distribution|not found in the package registry|No solution found|"
    r"ResolutionImpossible|Could not find a version)"
)


def _unresolvable(f: _Failure) -> EnvbuildError | None:
    if not _UNRESOLVABLE.search(f.text):
        return None
    return InstallError(
        f"{f.step}: the installer could not find or resolve a package.\n{f.tail}",
        hint=(
            f"Check the package names and versions and the step's index_url/find_links. {f.where}"
        ),
    )


_UNREACHABLE = re.compile(
    r"(Failed to establish a new connection|NewConnectionError|Temporary failure in name"
    r" resolution|Connection refused|timed out|dns error|error sending request)",
    re.I,
)


def _unreachable(f: _Failure) -> EnvbuildError | None:
    if not _UNREACHABLE.search(f.text):
        return None
    return InstallError(
        f"{f.step}: a package index could not be reached.\n{f.tail}",
        hint=f"Check the network or use --offline --wheelhouse DIR. {f.where}",
    )


def _killed(f: _Failure) -> EnvbuildError | None:
    """The installer ended by a signal."""
    if f.result.returncode >= 0:
        return None
    return InstallError(
        f"{f.step}: {f.result.describe('the installer')}.\n{f.tail}",
        hint=f"Run provision again to resume; the step is run again. {f.where}",
    )


# in this order: the first that recognises the log says what broke
_READERS: tuple[Callable[[_Failure], EnvbuildError | None], ...] = (
    _protected_conflict,
    _hash_mismatch,
    _disk_full,
    _cut_short,
    _build_requirements,
    _unresolvable,
    _unreachable,
    _killed,
)


def _log_text(result: RunResult) -> str:
    if result.log_file and result.log_file.exists():
        data = result.log_file.read_text(errors="replace")
        # only this attempt: the log is appended across attempts
        return data[data.rfind("\n$ ") + 1 :] if "\n$ " in data else data
    return result.tail


def create_venv_with(argv: list[str], venv: Path, log_file: Path, pass_fds: Sequence[int]) -> None:
    events.emit("info", f"creating the venv: {redact(format_argv(argv))}")
    result = run(argv, log_file=log_file, pass_fds=pass_fds, timeout=600)
    if not result.ok:
        raise InstallError(
            f"creating the venv at {venv}: {result.describe('the venv command')}:\n{result.tail}",
            hint=f"Full log: {log_file}",
        )
