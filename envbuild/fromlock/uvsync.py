"""What ``uv sync --frozen`` installs for a selection, as uv itself says it.

The selection flags are uv sync's, flag for flag (``SyncFlags``): ``--extra``, ``--all-extras``,
``--no-extra``, ``--group``, ``--only-group``, ``--no-group``, ``--all-groups``,
``--no-default-groups``, ``--no-dev``, ``--only-dev``, ``--package``. Rather than a second reading
of uv's rules (default groups, extras switched on through other extras, workspace members and
their extras, conflicts), the locker answers: ``uv export --frozen`` (requirements format) with the
same flags lists every package the selection installs, each with the marker that says where. The
markers are evaluated here for the target platform and Python, and what holds is matched to the
uv.lock's own entries (name, version, and the file hashes where a name has several entries), so
the stages keep the lock's edges, sources and hashes. A selection uv refuses (conflicting extras,
an extra the project does not define) is refused with uv's own reason.

uv reads the project's ``pyproject.toml`` (and its workspace members') beside the lock; where it is
not there, ``export`` returns None and the caller says what can be selected without it.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError
from envbuild.gate.formats._common import toml_loads
from envbuild.gate.model import Entry, LockParseError, ParsedLock
from envbuild.installer.python import find_uv
from envbuild.run import run

__all__ = ["Exported", "SyncFlags", "export", "match_entries", "sync_refusal"]


@dataclass(frozen=True)
class SyncFlags:
    """uv sync's selection and install flags (``--no-editable``, ``--no-install-*`` shape how the
    project and its workspace members install, not what is selected)."""

    extras: tuple[str, ...] = ()
    all_extras: bool = False
    no_extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    only_groups: tuple[str, ...] = ()
    no_groups: tuple[str, ...] = ()
    all_groups: bool = False
    no_default_groups: bool = False
    no_dev: bool = False
    only_dev: bool = False
    packages: tuple[str, ...] = ()
    all_packages: bool = False
    no_editable: bool = False
    no_install_project: bool = False
    no_install_workspace: bool = False

    def selection_argv(self) -> list[str]:
        """The flags that choose what is installed, as uv spells them."""
        argv: list[str] = []
        for flag, values in (("--extra", self.extras), ("--no-extra", self.no_extras), ("--group", self.groups),
                             ("--only-group", self.only_groups), ("--no-group", self.no_groups),
                             ("--package", self.packages)):
            for v in values:
                argv += [flag, v]
        for flag, on in (("--all-extras", self.all_extras), ("--all-groups", self.all_groups),
                         ("--no-default-groups", self.no_default_groups), ("--no-dev", self.no_dev),
                         ("--only-dev", self.only_dev), ("--all-packages", self.all_packages)):
            if on:
                argv.append(flag)
        return argv

    def install_argv(self) -> list[str]:
        return [flag for flag, on in (("--no-editable", self.no_editable),
                                      ("--no-install-project", self.no_install_project),
                                      ("--no-install-workspace", self.no_install_workspace)) if on]

    def sync_command(self) -> str:
        """The ``uv sync`` command that installs the same selection (shell-quoted)."""
        return shlex.join(["uv", "sync", "--frozen", *self.selection_argv(), *self.install_argv()])

    @property
    def beyond_conflicts(self) -> list[str]:
        """The flags given that only uv can answer (all but ``--extra``/``--group``)."""
        argv = [a for a in self.selection_argv() if a.startswith("--") and a not in ("--extra", "--group")]
        return list(dict.fromkeys(argv))



@dataclass(frozen=True)
class Exported:
    """One package of uv's export: name, version (None: a local folder), marker, the sha256 of its
    files (how an entry is told apart from another of the same name and version)."""

    name: str
    version: str | None
    marker: str | None
    hashes: frozenset[str]


def export(lock_path: Path, flags: SyncFlags) -> list[Exported] | None:
    """uv's export of ``flags``' selection of the lock at ``lock_path``; None where uv cannot say
    (no pyproject.toml beside the lock, a lock not named uv.lock, or no uv). ConfigError (exit 2):
    uv refuses the selection.

    The requirements format, not pylock.toml: uv's pylock export downloads every file the lock
    records no hash for (to write one), so it needs the network where the install itself may not
    (a wheel from a host this machine cannot reach, for another platform)."""
    folder = lock_path.parent
    if not (folder / "pyproject.toml").is_file() or lock_path.name != "uv.lock":
        return None
    uv = find_uv()
    if uv is None:
        return None
    argv = [uv, "export", "--frozen", "--format", "requirements.txt", "--no-header", "--no-annotate", "--quiet",
            *flags.selection_argv()]
    env = {k: v for k, v in os.environ.items() if k not in ("UV_NO_CONFIG", "UV_LOCKED", "UV_FROZEN", "VIRTUAL_ENV")}
    env["NO_COLOR"] = "1"
    try:
        out = run(argv, cwd=folder, env=env, capture=True, separate_stderr=True, timeout=120)
    except OSError as exc:
        raise ConfigError(f"{lock_path}: uv export could not run ({exc}), so the selection cannot be read") from exc
    if out.timed_out:
        raise ConfigError(f"{lock_path}: uv export did not finish in 120 s, so the selection cannot be read")
    if out.returncode != 0:
        reason = _uv_reason(out.stderr or "")
        raise ConfigError(f"{lock_path}: uv refuses this selection ({flags.sync_command()}): {reason}",
                          hint=_flag_hint(folder))
    return parse_requirements(out.output or "", _local_names(lock_path))


def _local_names(lock_path: Path) -> dict[str, str]:
    """{a local package's folder, normalised: its name} of the lock's editable/directory/virtual/path sources."""
    try:
        data = toml_loads(lock_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, LockParseError):
        return {}
    out: dict[str, str] = {}
    for p in data.get("package", []) or []:
        source = p.get("source") if isinstance(p, dict) else None
        if not isinstance(source, dict) or not isinstance(p.get("name"), str):
            continue
        for key in ("editable", "directory", "virtual", "path"):
            if isinstance(source.get(key), str):
                out[_norm(source[key])] = str(canonicalize_name(p["name"]))
    return out


def _norm(path: str) -> str:
    import posixpath

    return posixpath.normpath(path.removeprefix("file://"))


def parse_requirements(text: str, local: dict[str, str]) -> list[Exported]:
    """uv's requirements export: ``name==version ; marker`` (with ``--hash`` options), ``name @ URL``,
    ``-e ./member`` and ``./folder`` lines, continued with backslashes."""
    from packaging.requirements import InvalidRequirement, Requirement

    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        current = f"{current} {line}".strip()
        if current.endswith("\\"):
            current = current[:-1].strip()
            continue
        logical.append(current)
        current = ""
    if current:
        logical.append(current)
    out: list[Exported] = []
    for line in logical:
        parts = line.split()
        hashes = frozenset(p.split(":", 1)[1] for p in parts if p.startswith("--hash=sha256:"))
        body = " ".join(p for p in parts if not p.startswith("--hash="))
        editable = body.startswith("-e ")
        body = body.removeprefix("-e ").strip()
        where, _, marker = body.partition(" ; ")
        if editable or where.startswith((".", "/", "file:")):
            name = local.get(_norm(where.strip()))
            if name is None:
                raise ConfigError(f"uv export lists the local package {where.strip()}, which the lock names no package "
                                  "at (a lock older than its pyproject.toml?)", hint="Re-lock with `uv lock`.")
            out.append(Exported(name=name, version=None, marker=marker.strip() or None, hashes=hashes))
            continue
        try:
            req = Requirement(body)
        except InvalidRequirement as exc:
            raise ConfigError(f"uv export wrote a line envbuild cannot read: {body!r} ({exc})") from exc
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        out.append(Exported(name=str(canonicalize_name(req.name)), version=pins[0] if pins else None,
                            marker=str(req.marker) if req.marker else None, hashes=hashes))
    return out


def _uv_reason(stderr: str) -> str:
    """uv's error, from its ``error:`` line through the lines it folded the message onto (to the
    terminal's width), as one line; its hints and warnings left out."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.startswith("error:")), 0)
    kept = []
    for ln in lines[start:]:
        if ln.startswith(("hint:", "warning:", "Usage:", "For more information")):
            break
        kept.append(ln.removeprefix("error:").strip())
    return " ".join(" ".join(kept).split()) or "uv failed with no message"


def _flag_hint(folder: Path) -> str:
    """The extras and groups the project beside the lock defines (what --extra / --group can name)."""
    try:
        data = toml_loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, LockParseError):
        return "Check the project's pyproject.toml beside the lock."
    project: dict[str, Any] = data["project"] if isinstance(data.get("project"), dict) else {}
    extras = sorted(project.get("optional-dependencies") or {}) if isinstance(project.get("optional-dependencies"), dict) else []
    groups = sorted(data["dependency-groups"]) if isinstance(data.get("dependency-groups"), dict) else []
    parts = []
    if extras:
        parts.append("its extras: " + ", ".join(extras))
    if groups:
        parts.append("its dependency groups: " + ", ".join(groups))
    return ("The project defines " + "; ".join(parts) + ".") if parts else "The project defines no extras or groups."


def sync_refusal(lock_path: Path, flags: SyncFlags, python: str) -> str | None:
    """uv sync's own reason for refusing ``flags`` (``uv sync --frozen --dry-run`` into a venv that is
    never made, offline), or None when it accepts them or cannot be asked (no interpreter of
    ``python`` here). uv export does not check conflicts that extras switch on through other extras
    (a root extra enabling two conflicting extras of a workspace member); uv sync does."""
    import tempfile

    from envbuild.errors import EnvbuildError
    from envbuild.installer.python import find_interpreter

    uv = find_uv()
    try:
        exe = find_interpreter(python, require_fit=False).executable
    except EnvbuildError:
        return None
    if uv is None:
        return None
    with tempfile.TemporaryDirectory(prefix="envbuild-uv-dry-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("UV_NO_CONFIG", "VIRTUAL_ENV")}
        env.update({"UV_PROJECT_ENVIRONMENT": str(Path(tmp) / "venv"), "UV_OFFLINE": "1", "NO_COLOR": "1"})
        try:
            out = run([uv, "sync", "--frozen", "--dry-run", "--python", str(exe), *flags.selection_argv()],
                      cwd=lock_path.parent, env=env, capture=True, separate_stderr=True, timeout=120)
        except OSError:
            return None
    if out.returncode == 0 or out.timed_out:
        return None
    err = out.stderr or ""
    return _uv_reason(err) if "error:" in err else None


def holds(marker: str | None, values: dict[str, str]) -> bool:
    """Whether an exported package's marker holds for the target (no extras or groups: uv's export
    has already chosen them)."""
    if not marker:
        return True
    from packaging.markers import InvalidMarker, Marker

    try:
        return Marker(marker).evaluate({**values, "extra": ""})
    except InvalidMarker as exc:
        raise ConfigError(f"uv export wrote a marker envbuild cannot read: {marker!r} ({exc})") from exc


def match_entries(lock: ParsedLock, exported: list[Exported], values: dict[str, str]) -> list[Entry]:
    """The lock's entries of the exported packages whose marker holds for ``values`` (a target
    platform and Python). ConfigError: an exported package the lock has no entry for."""
    by_name: dict[str, list[Entry]] = {}
    for e in lock.entries:
        by_name.setdefault(e.name, []).append(e)
    out: list[Entry] = []
    for p in exported:
        if not holds(p.marker, values):
            continue
        named = by_name.get(p.name, [])
        same = [e for e in named if p.version is None or e.version == p.version] or named
        if len(same) > 1 and p.hashes:
            same = [e for e in same if p.hashes & set(e.hashes)] or same
        if not same:
            raise ConfigError(f"{lock.path}: uv export lists {p.name} {p.version or ''}, which the lock has no entry "
                              "for (a lock older than its pyproject.toml?)", hint="Re-lock with `uv lock`.")
        if same[0] not in out:
            out.append(same[0])
    return out
