"""What a project lock must pass to be installed, before anything is made: its format (read once,
``read_project_lock``: provision installs from a uv.lock or a pylock.toml) and the gate's verdict on
the environment chosen of it (``refuse``, exit 8). The choosing and the judging are the gate's
(``gate.selection``).
"""

from __future__ import annotations

from pathlib import Path

from envbuild.errors import ConfigError, LockError
from envbuild.gate.findings import Finding
from envbuild.gate.formats import detect
from envbuild.gate.lockfile import LockText, ProjectLock, parse_lock_text, read_lockfile
from envbuild.gate.model import Format, LockParseError
from envbuild.gate.project import Project
from envbuild.gate.selection import Chosen

__all__ = ["SUPPORTED", "read_project_lock", "refuse"]

SUPPORTED: tuple[Format, ...] = ("uv.lock", "pylock")


def read_project_lock(path: Path, fmt: Format | None = None) -> ProjectLock:
    """The lock at ``path``, read and parsed once (ConfigError, exit 2: missing, unreadable, a
    format provision does not install from, or not a readable lock of its format)."""
    text = read_lockfile(path)
    try:
        kind = fmt or detect(path, text)
    except ConfigError as exc:  # name only the formats provision installs from
        raise ConfigError(
            f"{path}: cannot tell which kind of lock this is; provision --lock installs from a"
            " uv.lock or a pylock.toml",
            hint=(
                "Name it with --format uv.lock or --format pylock, or check any "
                "lockfile with `envbuild check-lock`."
            ),
        ) from exc
    if kind == "pixi.lock":
        raise ConfigError(_pixi_refusal(path))
    if kind not in SUPPORTED:
        raise ConfigError(
            f"{path}: provision --lock installs from uv.lock and pylock.toml; a {kind} file is not"
            " supported yet (its entries name no file URL to install and hash-check, or it records"
            " no dependency graph)",
            hint=(
                "Check it with `envbuild check-lock`, or export the environment to a pylock.toml "
                "(`uv export --format pylock.toml`, `pip lock`) and provision from that."
            ),
        )
    try:
        return parse_lock_text(LockText(path, text, kind, Project(path.parent)))
    except LockParseError as exc:
        raise ConfigError(f"{path}: not a readable {kind} file: {exc}") from exc
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"{path}: not a readable {kind} file: a table or value is not shaped as {kind} "
            f"writes it ({type(exc).__name__}: {exc})"
        ) from exc


def _pixi_refusal(path: Path) -> str:
    """Why a pixi.lock is not installed here, and what to do instead: one paragraph."""
    from envbuild.quoting import sh_word

    folder = sh_word(str(path.parent), "the lock's folder")
    return (
        f"{path}: a pixi.lock pins conda packages (and PyPI ones) for pixi's environments. "
        "envbuild's gate reads it: `envbuild check-lock "
        f"{sh_word(str(path), 'the lock')}` checks every environment and platform in it. "
        "But envbuild installs locks into a venv with uv or pip, PyPI files only, from a uv.lock "
        "or a pylock.toml, and it does not install conda packages: pixi installs a pixi.lock. "
        "Run the gate, then `pixi install --frozen` in "
        f"{folder} (add `-e ENV` for another environment than the default)."
    )


def refuse(
    chosen: Chosen, failing: list[Finding], accept: Path | None, *, rebuild: bool = False
) -> None:
    """Exit 8 before anything is made when the gate fails the chosen environment. ``rebuild``:
    ``--rebuild-mismatched`` was given (the extension-abi findings left have no sdist to build)."""
    if not failing:
        return
    lines = "; ".join(f"{f.package}: {f.reason} [{f.rule}]" for f in failing[:3])
    more = f" (and {len(failing) - 3} more)" if len(failing) > 3 else ""
    # a mismatched prebuilt extension alone: building it from its sdist against this torch answers
    # it
    mismatched = not rebuild and all(f.rule == "extension-abi" for f in failing)
    raise LockError(
        f"{chosen.path}: the lock fails envbuild's gate in {chosen.env.name}, so nothing was"
        f" installed: {lines}{more}",
        hint=(
            "`envbuild check-lock "
            + str(chosen.path)
            + "` shows every finding. Fix the lock"
            + (
                ", build the mismatched extension from its sdist against the lock's torch with "
                "--rebuild-mismatched"
                if mismatched
                else ""
            )
            + ", or name a reviewed exception file with --accept FILE ([[accept]] tables: rule,"
            " package, reason)"
            + (f" (the one given, {accept}, accepts none of these)" if accept else "")
            + "."
        ),
    )
