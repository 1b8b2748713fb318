"""Every fatal condition envbuild knows, with its documented exit code.

Library code raises these; only ``envbuild.cli.main`` turns them into an exit status.
The table below is the contract; the documentation's exit-code reference (docs, generated) is made
from it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1  # a bug in envbuild: please report it with the traceback
    CONFIG = 2  # bad command line, stack spec, profile, lock or wheelhouse spec
    # the host cannot run this: python missing, disk, unreachable index, GPUs, unwritable paths
    PREFLIGHT = 3
    LAYOUT = 4  # data root / $HOME links conflict with something of the user's
    INSTALL = 5  # an installer step failed (pip/uv error, hash mismatch, disk full)
    ABI = 6  # the ABI guard found torch or the protected set changed
    VERIFY = 7  # smoke test or distributed step failed; verify: import hung, provision unfinished
    LOCK = 8  # check-lock findings, stale lock, missing hash
    WHEELHOUSE = 9  # wheel build, repack or mirror failed
    DRIFT = 10  # receipt diff found differences
    INTERRUPTED = 130  # Ctrl-C / SIGTERM


class EnvbuildError(Exception):
    """Base class: a user-facing failure with one clear paragraph and an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n{self.hint}"
        return self.message


class ConfigError(EnvbuildError):
    exit_code = ExitCode.CONFIG


class PreflightError(EnvbuildError):
    exit_code = ExitCode.PREFLIGHT


class LayoutError(EnvbuildError):
    exit_code = ExitCode.LAYOUT


class InstallError(EnvbuildError):
    exit_code = ExitCode.INSTALL


class ABIViolation(EnvbuildError):
    exit_code = ExitCode.ABI


class VerifyError(EnvbuildError):
    exit_code = ExitCode.VERIFY


class LockError(EnvbuildError):
    exit_code = ExitCode.LOCK


class WheelhouseError(EnvbuildError):
    exit_code = ExitCode.WHEELHOUSE


class Interrupted(EnvbuildError):
    exit_code = ExitCode.INTERRUPTED


EXIT_CODE_DOCS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.INTERNAL: "internal error (a bug in envbuild; the traceback is printed)",
    ExitCode.CONFIG: (
        "usage or configuration error: command line, stack spec, profile, lock file, wheelhouse"
        " spec"
    ),
    ExitCode.PREFLIGHT: (
        "host preflight failed: interpreter missing, data root or output folder not writable or"
        " full, index unreachable, GPU/driver/topology checks"
    ),
    ExitCode.LAYOUT: (
        "data layout conflict: a real file or folder of the user's is where a link or folder"
        " must go"
    ),
    ExitCode.INSTALL: (
        "an install step failed (installer error, resolution conflict, hash mismatch, disk full);"
        " its log is kept"
    ),
    ExitCode.ABI: (
        "ABI violation: torch or a protected package was replaced, reinstalled or shadowed"
    ),
    ExitCode.VERIFY: (
        "smoke test or distributed step failed; verify: the import hung, or the last provision "
        "of the environment stopped short"
    ),
    ExitCode.LOCK: "check-lock findings, stale lock or missing/broken hash",
    ExitCode.WHEELHOUSE: "wheelhouse build, repack or mirror failed",
    ExitCode.DRIFT: "receipt diff found differences",
    ExitCode.INTERRUPTED: (
        "interrupted (Ctrl-C or SIGTERM); provision resumes where it stopped when run again"
    ),
}
