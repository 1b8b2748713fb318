"""What ``uv sync --frozen`` installs for a selection, as uv itself says it.

The selection flags are uv sync's, flag for flag (``SyncFlags``): ``--extra``, ``--all-extras``,
``--no-extra``, ``--group``, ``--only-group``, ``--no-group``, ``--all-groups``,
``--no-default-groups``, ``--no-dev``, ``--only-dev``, ``--package``. Rather than a second reading
of uv's rules (default groups, extras switched on through other extras, workspace members and
their extras, conflicts), the locker answers: ``uv export --frozen --format pylock.toml`` with the
same flags lists every package the selection installs, each with the marker that says where and
the source uv takes it from (its index, URL, path, folder or git URL). The markers are evaluated
here for the target platform and Python, and what holds is the uv.lock entry of that name,
version and source (a name locked once per accelerator index is told apart by its index, as uv
tells it apart, never by the files two indexes share), so the stages keep the lock's edges,
sources and hashes. A selection uv refuses (conflicting extras,
an extra the project does not define) is refused with uv's own reason.

uv reads the project's ``pyproject.toml`` (and its workspace members') beside the lock; where it is
not there, ``export`` returns None and the caller says what can be selected without it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError
from envbuild.gate.lockfile import ProjectLock
from envbuild.gate.model import Entry, LockParseError, ParsedLock
from envbuild.gate.project import Project
from envbuild.installer.python import find_uv
from envbuild.run import run

__all__ = [
    "Exported",
    "SyncFlags",
    "export",
    "match_entries",
    "parse_pylock",
    "parse_requirements",
    "sync_refusal",
]


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
        for flag, values in (
            ("--extra", self.extras),
            ("--no-extra", self.no_extras),
            ("--group", self.groups),
            ("--only-group", self.only_groups),
            ("--no-group", self.no_groups),
            ("--package", self.packages),
        ):
            for v in values:
                argv += [flag, v]
        for flag, on in (
            ("--all-extras", self.all_extras),
            ("--all-groups", self.all_groups),
            ("--no-default-groups", self.no_default_groups),
            ("--no-dev", self.no_dev),
            ("--only-dev", self.only_dev),
            ("--all-packages", self.all_packages),
        ):
            if on:
                argv.append(flag)
        return argv

    def install_argv(self) -> list[str]:
        return [
            flag
            for flag, on in (
                ("--no-editable", self.no_editable),
                ("--no-install-project", self.no_install_project),
                ("--no-install-workspace", self.no_install_workspace),
            )
            if on
        ]

    def sync_command(self) -> str:
        """The ``uv sync`` command that installs the same selection (shell-quoted)."""
        return shlex.join(["uv", "sync", "--frozen", *self.selection_argv(), *self.install_argv()])

    @property
    def beyond_conflicts(self) -> list[str]:
        """The flags given that only uv can answer (all but ``--extra``/``--group``)."""
        argv = [
            a
            for a in self.selection_argv()
            if a.startswith("--") and a not in ("--extra", "--group")
        ]
        return list(dict.fromkeys(argv))


@dataclass(frozen=True)
class Exported:
    """One package of uv's pylock.toml export, as uv names it: name, version (None: a local
    folder), marker, and where it comes from: its index, its archive's URL or path, its folder,
    its VCS URL, the URLs (or paths) of its files. That is what tells an entry apart from another
    of the same name and version (one per accelerator index): uv says which one, nothing is
    matched back by hash."""

    name: str
    version: str | None
    marker: str | None
    index: str | None = None
    archive: str | None = None  # a direct URL or a path (relative to the lock's folder)
    directory: str | None = None  # a local folder (the project, a workspace member)
    vcs: str | None = None  # a git URL
    files: frozenset[str] = frozenset()  # its wheels' and sdist's URLs or paths
    hashes: frozenset[str] = frozenset()  # the requirements export: its files' sha256 (no source)


def export(lock: ProjectLock, flags: SyncFlags) -> list[Exported] | None:
    """uv's export of ``flags``' selection of ``lock`` (``uv export --frozen
    --format pylock.toml``); None where uv cannot say (no pyproject.toml beside the lock, a lock not
    named uv.lock, or no uv). ConfigError (exit 2): uv refuses the selection.

    uv's pylock export downloads every file the lock records no hash for, to write one: it runs
    offline, and where it cannot (a file from a find-links page that serves no hashes, not in uv's
    cache) the requirements export answers instead, which names no source: an entry is then told
    apart from another of its name and version by its files' hashes (``_same_place``)."""
    lock_path = lock.path
    if not lock.project.exists() or lock_path.name != "uv.lock":
        return None
    uv = find_uv()
    if uv is None:
        return None
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("UV_NO_CONFIG", "UV_LOCKED", "UV_FROZEN", "VIRTUAL_ENV")
    }
    env.update({"NO_COLOR": "1", "UV_OFFLINE": "1"})
    out = _uv_export(lock_path, uv, "pylock.toml", flags, env)
    if out.returncode == 0:
        return parse_pylock(out.stdout)
    plain = _uv_export(lock_path, uv, "requirements.txt", flags, env)
    if plain.returncode != 0:
        raise ConfigError(
            f"{lock_path}: uv refuses this selection ({flags.sync_command()}): "
            f"{_uv_reason(plain.stderr)}",
            hint=_flag_hint(lock.project),
        )
    return parse_requirements(plain.stdout)


@dataclass(frozen=True)
class _Exported:
    """What one ``uv export`` said: its exit status, its output (the export) and its stderr."""

    returncode: int
    stdout: str
    stderr: str


def _uv_export(
    lock_path: Path, uv: str, fmt: str, flags: SyncFlags, env: dict[str, str]
) -> _Exported:
    argv = [
        uv,
        "export",
        "--frozen",
        "--format",
        fmt,
        "--no-header",
        "--quiet",
        *flags.selection_argv(),
    ]
    if fmt == "requirements.txt":
        argv.append("--no-annotate")
    try:
        out = run(
            argv, cwd=lock_path.parent, env=env, capture=True, separate_stderr=True, timeout=120
        )
    except OSError as exc:
        raise ConfigError(
            f"{lock_path}: uv export could not run ({exc}), so the selection cannot be read"
        ) from exc
    if out.timed_out:
        raise ConfigError(
            f"{lock_path}: uv export did not finish in 120 s, so the selection cannot be read"
        )
    return _Exported(out.returncode, out.output or "", out.stderr or "")


def _norm(path: str) -> str:
    import posixpath

    return posixpath.normpath(path.removeprefix("file://"))


def parse_pylock(text: str) -> list[Exported]:
    """uv's pylock.toml export (read by the one PEP 751 reader, ``gate.formats.pylock``): each
    package with where uv takes it from."""
    from envbuild.gate.formats.pylock import read_pylock

    try:
        lock = read_pylock(text)
    except LockParseError as exc:
        raise ConfigError(f"uv export wrote a pylock.toml envbuild cannot read ({exc})") from exc
    out: list[Exported] = []
    for p in lock.packages:
        files = {w.url or w.path for w in p.wheels or ()}
        if p.sdist is not None:
            files.add(p.sdist.url or p.sdist.path)
        archive = p.archive.url or p.archive.path if p.archive is not None else None
        out.append(
            Exported(
                name=str(canonicalize_name(p.name)),
                version=str(p.version) if p.version is not None else None,
                marker=str(p.marker) if p.marker is not None else None,
                index=p.index,
                archive=archive,
                directory=_norm(p.directory.path) if p.directory is not None else None,
                vcs=p.vcs.url if p.vcs is not None else None,
                files=frozenset(f for f in files if f),
            )
        )
    return out


def parse_requirements(text: str) -> list[Exported]:
    """uv's requirements export: ``name==version ; marker`` (with ``--hash`` options), ``name @
    URL``, ``-e ./member`` and ``./folder`` lines (a local one named by its folder), continued with
    backslashes."""
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
            out.append(
                Exported(
                    name="",
                    version=None,
                    marker=marker.strip() or None,
                    directory=_norm(where.strip()),
                )
            )
            continue
        try:
            req = Requirement(body)
        except InvalidRequirement as exc:
            raise ConfigError(
                f"uv export wrote a line envbuild cannot read: {body!r} ({exc})"
            ) from exc
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        out.append(
            Exported(
                name=str(canonicalize_name(req.name)),
                version=pins[0] if pins else None,
                marker=str(req.marker) if req.marker else None,
                archive=req.url or None,
                hashes=hashes,
            )
        )
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


def _flag_hint(project_file: Project) -> str:
    """The extras and groups the project beside the lock defines (what --extra / --group can
    name)."""
    data = project_file.data
    project = project_file.table("project")
    extras = (
        sorted(project.get("optional-dependencies") or {})
        if isinstance(project.get("optional-dependencies"), dict)
        else []
    )
    groups = (
        sorted(data["dependency-groups"]) if isinstance(data.get("dependency-groups"), dict) else []
    )
    parts = []
    if extras:
        parts.append("its extras: " + ", ".join(extras))
    if groups:
        parts.append("its dependency groups: " + ", ".join(groups))
    return (
        ("The project defines " + "; ".join(parts) + ".")
        if parts
        else "The project defines no extras or groups."
    )


def sync_refusal(lock_path: Path, flags: SyncFlags, python: Path | None) -> str | None:
    """uv sync's own reason for refusing ``flags`` (``uv sync --frozen --dry-run`` with ``python``,
    the target's interpreter, into a venv that is never made, offline), or None when it accepts
    them or cannot be asked (no uv, or ``python`` None: no interpreter of the target's Python here).
    uv export does not check conflicts that extras switch on through other extras (a root extra
    enabling two conflicting extras of a workspace member); uv sync does."""
    import tempfile

    selection = flags.selection_argv()
    uv = find_uv()
    if uv is None or python is None:
        return None
    argv = [uv, "sync", "--frozen", "--dry-run", "--python", str(python), *selection]
    with tempfile.TemporaryDirectory(prefix="envbuild-uv-dry-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("UV_NO_CONFIG", "VIRTUAL_ENV")}
        env.update(
            {"UV_PROJECT_ENVIRONMENT": str(Path(tmp) / "venv"), "UV_OFFLINE": "1", "NO_COLOR": "1"}
        )
        try:
            out = run(
                argv,
                cwd=lock_path.parent,
                env=env,
                capture=True,
                separate_stderr=True,
                timeout=120,
            )
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
        raise ConfigError(
            f"uv export wrote a marker envbuild cannot read: {marker!r} ({exc})"
        ) from exc


def _same_place(p: Exported, e: Entry, source: Mapping[str, str]) -> bool:
    """Whether the entry ``e`` (its uv.lock ``source``) is where uv's export takes ``p`` from."""
    if p.directory is not None:
        return any(
            _norm(source[k]) == p.directory
            for k in ("editable", "directory", "virtual", "path")
            if k in source
        )
    if p.vcs is not None:
        return "git" in source and source["git"].split("#")[0].split("?")[0] == p.vcs.split("#")[0]
    if p.archive is not None:
        return p.archive in (source.get("url"), source.get("path")) or (
            "path" in source and _norm(source["path"]) == _norm(p.archive)
        )
    if p.index is not None and "registry" in source:
        return (
            source["registry"].rstrip("/") == p.index.rstrip("/")
            or bool(p.files)
            and p.files <= {f for f, _ in e.files}
        )
    if p.hashes:  # the requirements export: the entry whose files are exactly those
        return p.hashes == set(e.hashes)
    return bool(p.files) and p.files <= {f for f, _ in e.files}


def match_entries(
    lock: ParsedLock,
    exported: list[Exported],
    values: dict[str, str],
    sources: Mapping[int, Mapping[str, str]],
) -> list[Entry]:
    """The lock's entries of the exported packages whose marker holds for ``values`` (a target
    platform and Python): the entry of that name, version and source uv names (``sources``: the
    uv.lock's ``source`` tables, ``formats.uvlock.sources_of``). ConfigError: an exported package
    the lock has no entry for, or several it cannot tell apart."""
    by_name: dict[str, list[Entry]] = {}
    for e in lock.entries:
        by_name.setdefault(e.name, []).append(e)
    out: list[Entry] = []
    for p in exported:
        if not holds(p.marker, values):
            continue
        named = by_name.get(p.name, []) if p.name else lock.entries  # "": a local folder, by path
        same = [e for e in named if p.version is None or e.version == p.version]
        if len(same) > 1 or p.directory is not None:
            same = [e for e in same if _same_place(p, e, sources.get(e.key, {}))]
        if len(same) != 1:
            what = "no entry" if not same else f"{len(same)} entries it cannot tell apart"
            raise ConfigError(
                f"{lock.path}: uv export lists {p.name} {p.version or ''} from "
                f"{p.index or p.archive or p.directory or p.vcs or 'somewhere'}, "
                f"which the lock has {what} for (a lock older than its "
                "pyproject.toml?)",
                hint=(
                    "Re-lock with `uv lock` (an index that serves no hashes: uv "
                    "names the entry only where it can hash its files)."
                    if same
                    else "Re-lock with `uv lock`."
                ),
            )
        out.append(same[0])
    return out
