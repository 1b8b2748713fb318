"""The one environment of a project lock an install takes, and the gate's verdict on exactly what
it installs: one question, one answer (``judge_selection``), for ``provision --lock`` and the other
``--lock`` front ends.

The platforms, Pythons and selections are the gate's (``environments``): every valid selection of
the lock's conflicting extras/groups on each platform and Python. An install takes exactly one:

- a uv.lock beside its project: what ``uv export`` of uv sync's flags lists is what the
  environment installs (``uvsync``), and the environment is the selection of the lock's
  conflicting items those flags switch on (``_flag_selection``: each item by its typed name, kind
  and whether the locker's default takes it);
- otherwise, no ``--extra``/``--group``: the locker's default selection (labelled "default", or
  "no conflicting extra" where nothing is on by default);
- ``--extra``/``--group``: the selections that hold every requested item; among them the one
  that adds nothing beyond the requested items and the default ones, as ``uv sync --extra X``;
- more than one candidate left: a usage error (exit 2) that lists the choices.

The gate's rules then judge that environment, exactly what it installs (``judge``:
``check.judge_environment``), so a broken extra the host does not install does not refuse the one
it does.
"""

from __future__ import annotations

import platform as host_platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError, LockError, PreflightError
from envbuild.gate.environments import NO_CHOICE, Narrow, Space, make_space
from envbuild.gate.findings import FileReport, Finding, Policy
from envbuild.gate.formats import detect
from envbuild.gate.formats.uvlock import sources_of
from envbuild.gate.lockfile import LockText, ProjectLock, parse_lock_text, read_lockfile
from envbuild.gate.model import (
    Entry,
    Environment,
    Format,
    Item,
    LockParseError,
    Members,
    ParsedLock,
)
from envbuild.gate.project import Project
from envbuild.gate.uvsync import Exported, SyncFlags, export, match_entries, sync_refusal

if TYPE_CHECKING:
    from envbuild.installer.python import TargetPython

__all__ = [
    "INSTALLS",
    "Chosen",
    "Judged",
    "Selection",
    "choose",
    "host_platform_key",
    "judge",
    "judge_selection",
    "python_for_lock",
    "read_project_lock",
    "refuse",
    "target_python",
]


class _ChosenJSON(TypedDict):
    lock_file: str  # the lock file
    lock_sha256: str  # its sha256
    lock_format: Format  # its format
    environment: str  # the environment chosen of it, by name
    platform: str  # its platform (`linux x86_64`)
    python: str  # its Python (`3.12`)
    selection: str  # the conflicting extras or groups chosen, in words, or that there was no choice


class ChosenJSON(_ChosenJSON, total=False):
    """The lock and the environment chosen of it (``Chosen.to_json``)."""

    uv_sync: str  # the `uv sync --frozen ...` command that installs the same, when uv was asked


@dataclass
class Chosen:
    """The lock (read once) and the one environment of it a provision installs: what it installs
    (``members``: uv's export where uv was asked)."""

    source: ProjectLock
    env: Environment
    members: Members
    # the ``uv sync --frozen ...`` command that installs the same (None: uv was not asked)
    sync: str | None = None
    flags: SyncFlags = SyncFlags()
    # uv.lock: each entry's ``source`` table (editable / virtual / git / path ...) by entry key, as
    # the typed reader read it (``formats.uvlock.sources_of``); {} for another format
    sources: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    # the lock's conflicting extras/groups in words (``extra cu128``), as the gate's space holds
    # them (``environments.choices``): what a usage error offers to choose between
    choices: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def sha256(self) -> str:
        return self.source.sha256

    @property
    def lock(self) -> ParsedLock:
        return self.source.parsed

    @property
    def selection(self) -> str:
        return self.env.selection[0] if self.env.selection else NO_CHOICE

    def to_json(self) -> ChosenJSON:
        """What a receipt and ``plan --lock --json`` record of it."""
        out: ChosenJSON = {
            "lock_file": str(self.path.absolute()),  # found from any directory (verify, receipt)
            "lock_sha256": self.sha256,
            "lock_format": self.lock.format,
            "environment": self.env.name,
            "platform": self.env.platform,
            "python": self.env.python,
            "selection": self.selection,
        }
        if self.sync:
            out["uv_sync"] = self.sync
        return out


def host_platform_key() -> str:
    """This machine as a gate platform key (``linux-x86_64``)."""
    machine = host_platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if sys.platform.startswith("linux"):
        return f"linux-{machine}"
    if sys.platform == "darwin":
        return f"macos-{'arm64' if machine in ('arm64', 'aarch64') else 'x86_64'}"
    return "windows-amd64"


INSTALLS: tuple[Format, ...] = ("uv.lock", "pylock")  # the formats an install takes


@dataclass(frozen=True, kw_only=True)
class Selection:
    """What chooses the one environment of a project lock an install takes: the lock (``fmt``: its
    format, where given), the Python (``python``: an interpreter, ``venv``: an environment, else
    the lock's own), the platforms (``environment``: default this host), uv sync's ``flags``, and
    the reviewed exceptions the gate applies (``accept``)."""

    lock: Path
    fmt: Format | None = None
    python: str | None = None
    venv: Path | None = None
    environment: tuple[str, ...] = ()
    flags: SyncFlags = SyncFlags()
    accept: Path | None = None


@dataclass(frozen=True)
class Judged:
    """The environment an install takes (``chosen``), the gate's report on it and the findings
    that refuse it."""

    chosen: Chosen
    report: FileReport
    failing: list[Finding]


def judge_selection(sel: Selection, python: str | None = None) -> Judged:
    """The one question of every ``--lock`` front end, answered here: the lock read once
    (``read_project_lock``), its Python and the interpreter of it (``python``, a minor the caller
    chose, else ``target_python``), the one environment of it ``sel`` chooses (``choose``) and the
    gate's verdict on what that environment installs (``judge``)."""
    from envbuild.installer.python import interpreter_of

    lock = read_project_lock(sel.lock, sel.fmt)
    target = interpreter_of(python) if python else target_python(lock, sel.python, sel.venv)
    chosen = choose(lock, target, sel.flags, sel.environment)
    report, failing = judge(chosen, sel.accept)
    return Judged(chosen, report, failing)


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
    if kind not in INSTALLS:
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


def target_python(lock: ProjectLock, python: str | None, venv: Path | None) -> TargetPython:
    """The Python the environment is for, with its interpreter: the --venv's, the --python's, else
    as uv chooses for the lock (``installer.python.python_for``: the lock folder's
    ``.python-version``, else its ``requires-python``)."""
    from envbuild.installer.python import TargetPython, probe_python, python_for

    exe: str | Path | None = None
    if venv is not None:
        exe = venv.expanduser() / "bin" / "python"
        if not Path(exe).exists():
            raise PreflightError(f"--venv {venv}: no environment there (no {exe})")
    elif python is not None:
        import shutil

        exe = shutil.which(python) or (python if Path(python).exists() else None)
        if exe is None:
            raise PreflightError(f"--python {python}: no such interpreter")
    if exe is not None:
        probed = probe_python(exe)
        if probed is None:
            raise PreflightError(f"{exe}: the interpreter does not run")
        return TargetPython(".".join(probed.version.split(".")[:2]), probed.executable)
    pinned = lock.path.parent / ".python-version"
    return python_for(lock.parsed.requires_python, str(lock.path), pinned)


def python_for_lock(lock: ProjectLock | Path) -> str:
    """The Python minor a lock is installed with, as uv chooses (``installer.python.python_for``
    of the lock's ``requires-python``; a lock at a path is read for it, and one that cannot be read
    says none)."""
    from envbuild.installer.python import python_for

    if isinstance(lock, Path):
        path = lock
        try:
            requires = read_project_lock(lock).parsed.requires_python
        except ConfigError:
            requires = None
    else:
        path, requires = lock.path, lock.parsed.requires_python
    return python_for(requires, str(path)).minor


def choose(
    lock: ProjectLock, target: TargetPython, flags: SyncFlags, environment: tuple[str, ...] = ()
) -> Chosen:
    """The one environment of ``lock`` to install for uv sync's ``flags`` on ``target`` (its minor;
    its interpreter is the one uv sync is asked with) and ``environment`` (default: this host; see
    the module docstring)."""
    parsed = lock.parsed
    python = target.minor
    env_filter = environment or (host_platform_key(),)
    narrow = Narrow(environment=env_filter, python=(python,), default_python=python)
    narrow.validate()
    space = make_space(parsed, narrow)
    found = list(space.bits(space.active))
    if not found:
        raise ConfigError(
            f"{lock.path}: the lock covers no environment for Python {python} on "
            f"{', '.join(env_filter)} (its requires-python: {parsed.requires_python or 'any'}; "
            f"its environments: {'; '.join(parsed.environments) or 'any'})",
            hint="Give the interpreter the lock is made for with --python, or --environment.",
        )
    platforms = sorted({space.env(j).platform for j in found})
    if len(platforms) > 1:
        raise ConfigError(
            f"{lock.path}: --environment matches several platforms ({', '.join(platforms)}); a"
            " provision installs one",
            hint="Name one platform, e.g. --environment linux-x86_64.",
        )
    exported = export(lock, flags) if parsed.format == "uv.lock" else None
    if exported is not None:
        return _as_uv_exports(
            lock, space, found, exported, flags, sources_of(parsed), target.executable
        )
    if parsed.format == "uv.lock":
        _say_without_uv(lock)
    if flags.beyond_conflicts:
        where = (
            "uv cannot say what they select here (see the warning above)"
            if parsed.format == "uv.lock"
            else f"a {parsed.format} file records no such selection"
        )
        raise ConfigError(
            f"{lock.path}: {', '.join(flags.beyond_conflicts)}: {where}",
            hint=(
                "Keep the lock beside its pyproject.toml (and its workspace members'), or choose"
                " between the lock's conflicting extras/groups with --extra / --group alone."
            ),
        )
    j = _by_request(lock, space, found, flags)
    env = space.env(j)
    return Chosen(
        lock,
        env,
        parsed.members(env),
        sources=sources_of(parsed),
        choices=tuple(it.words for it in space.items),
    )


def _say_without_uv(lock: ProjectLock) -> None:
    """The warning of a uv.lock that uv cannot be asked about: why, and what is chosen instead."""
    from envbuild import events

    path = lock.path
    why = (
        "the project's pyproject.toml is not beside the lock"
        if not lock.project.exists()
        else ("uv reads a lock named uv.lock" if path.name != "uv.lock" else "uv is not installed")
    )
    events.emit(
        "warn",
        f"{path}: {why}, so uv cannot say what a selection installs: envbuild chooses between"
        " the lock's conflicting extras/groups alone (--extra/--group), and installs every"
        " extra that conflicts with nothing; keep the lock beside its pyproject.toml for uv"
        " sync's own selection",
    )


Want = tuple[str, str]  # ("extra" | "any", canonical name): an item --extra / --group asks for


def _asks(item: Item, want: Want) -> bool:
    return item.name == want[1] and (want[0] == "any" or item.kind == want[0])


def _holds(space: Space, chosen: int, want: Want) -> bool:
    return any(chosen >> i & 1 and _asks(it, want) for i, it in enumerate(space.items))


def _by_request(lock: ProjectLock, space: Space, found: list[int], flags: SyncFlags) -> int:
    """The environment of ``found`` that ``--extra``/``--group`` choose (the lock's typed items:
    their names and kinds), as the module docstring says; ConfigError (exit 2) where none or
    several."""
    wanted: list[Want] = [("extra", str(canonicalize_name(x))) for x in flags.extras] + [
        ("any", str(canonicalize_name(g))) for g in flags.groups
    ]
    sel = {j: space.located(j)[1] for j in found}
    candidates = [j for j in found if all(_holds(space, sel[j], w) for w in wanted)]
    if not candidates:
        raise ConfigError(
            f"{lock.path}: no selection of this lock holds {_asked(flags)}",
            hint=_choices_hint(space, found),
        )
    default = space.default
    defaults = default if default is not None and default in sel.values() else 0
    if not wanted:
        best = [j for j in candidates if sel[j] == default] or [j for j in candidates if not sel[j]]
        if len(candidates) == 1:
            best = candidates
    else:
        asked = 0
        for j in candidates:
            for i, it in enumerate(space.items):
                if sel[j] >> i & 1 and any(_asks(it, w) for w in wanted):
                    asked |= 1 << i
        fits = [j for j in candidates if not sel[j] & ~(asked | defaults)]
        most = max(((sel[j] & defaults).bit_count() for j in fits), default=0)
        best = [j for j in fits if (sel[j] & defaults).bit_count() == most]
    if len(best) != 1:
        shown = "; ".join(
            space.env(j).selection[0] if space.env(j).selection else NO_CHOICE
            for j in best or candidates
        )
        raise ConfigError(
            f"{lock.path}: {_asked(flags) if wanted else 'the default selection'} matches more"
            f" than one environment of this lock ({shown}); a provision installs one",
            hint=_choices_hint(space, found),
        )
    return best[0]


def _flag_selection(space: Space, flags: SyncFlags) -> int:
    """The lock's conflicting items uv sync's ``flags`` switch on (a mask over ``space.items``),
    each by its typed name, kind and whether the locker's default takes it (``Item.default``: the
    project's own dependencies, its ``default-groups``): an extra by ``--extra`` or
    ``--all-extras`` (less ``--no-extra``); a group by ``--group``, ``--all-groups`` or the default
    (less ``--no-default-groups``, ``--no-group``, ``--no-dev``), or by ``--only-group`` /
    ``--only-dev`` alone."""

    def names(values: tuple[str, ...]) -> set[str]:
        return {str(canonicalize_name(v)) for v in values}

    extras, no_extras = names(flags.extras), names(flags.no_extras)
    groups, no_groups, only = names(flags.groups), names(flags.no_groups), names(flags.only_groups)
    if flags.only_dev:
        only.add("dev")
    if flags.no_dev:
        no_groups.add("dev")
    chosen = 0
    for i, it in enumerate(space.items):
        if it.kind == "extra":
            on = it.name in extras or (flags.all_extras and it.name not in no_extras)
        elif it.kind == "group":
            on = (
                it.name in only
                if only
                else it.name not in no_groups
                and (
                    it.name in groups
                    or flags.all_groups
                    or (it.default and not flags.no_default_groups)
                )
            )
        else:  # a package's own dependencies: on wherever it is installed
            on = it.default
        if on:
            chosen |= 1 << i
    return chosen


def _as_uv_exports(
    lock: ProjectLock,
    space: Space,
    found: list[int],
    exported: list[Exported],
    flags: SyncFlags,
    sources: Mapping[int, Mapping[str, str]],
    interpreter: Path | None,
) -> Chosen:
    """The environment uv's export of ``flags`` installs here: its packages are the lock's entries
    whose exported marker holds on this platform and Python (``uvsync.match_entries``), and the
    selection is the lock's conflicting items the flags switch on (``_flag_selection``). What the
    walk of that selection adds: which entry each edge of it names (the rules' ``torch_for``), and
    the project's virtual entries uv leaves out. ``interpreter``: the target's, which uv sync is
    asked with where the export holds two forks at once (None: none here)."""
    parsed = lock.parsed
    block = space.located(found[0])[0]
    values = space.env(found[0]).values
    entries = match_entries(parsed, exported, values, sources)
    names = [e.name for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    # the export holds two forks at once: extras that conflict, switched on through others
    if twice:
        reason = sync_refusal(lock.path, flags, interpreter)
        if reason is not None:
            raise ConfigError(
                f"{lock.path}: uv refuses this selection ({flags.sync_command()}): {reason}",
                hint="Choose one of the conflicting extras/groups.",
            )
    wanted = _flag_selection(space, flags)
    chosen = space.closed(wanted)
    env = space.env_of(block, wanted if chosen is None else chosen)
    walked = parsed.members(env)
    keys = {e.key for e in entries}
    virtual = _virtual_roots(walked, keys, sources)
    members = Members(
        entries=[*entries, *virtual],
        roots=walked.roots,
        edge_masks=walked.edge_masks,
        bit=walked.bit,
    )
    return Chosen(
        lock,
        env,
        members,
        sync=flags.sync_command(),
        flags=flags,
        sources=sources,
        choices=tuple(it.words for it in space.items),
    )


def _virtual_roots(
    members: Members, keys: set[int], sources: Mapping[int, Mapping[str, str]]
) -> list[Entry]:
    """The project's own entries uv's export leaves out because they are virtual (``package =
    false``): kept, so the plan says why the project is not installed."""
    return [
        e
        for e in members.entries
        if e.key in members.roots and e.key not in keys and "virtual" in sources.get(e.key, {})
    ]


def _asked(flags: SyncFlags) -> str:
    parts = [f"--extra {x}" for x in flags.extras] + [f"--group {g}" for g in flags.groups]
    return " ".join(parts)


def _choices_hint(space: Space, found: list[int]) -> str:
    on = 0
    for j in found:
        on |= space.located(j)[1]
    items = sorted((it for i, it in enumerate(space.items) if on >> i & 1), key=lambda it: it.words)
    flags = [f"--{it.kind if it.kind in ('extra', 'group') else 'group'} {it.name}" for it in items]
    labels = sorted({space.env(j).selection[0] for j in found if space.env(j).selection})
    if not flags:
        return "This lock has no conflicting extras or groups to choose between."
    return (
        f"Choose with {', '.join(dict.fromkeys(flags))}. Its selections here: {'; '.join(labels)}."
    )


def judge(chosen: Chosen, accept: Path | None) -> tuple[FileReport, list[Finding]]:
    """The gate's rules on the chosen environment, exactly what it installs
    (``check.judge_environment``, offline): (the report, the findings that refuse it)."""
    from envbuild.gate.accept import load_for
    from envbuild.gate.check import judge_environment  # the rules: not a re-run's imports

    report = FileReport(str(chosen.path), chosen.lock.format)
    exceptions = load_for(chosen.path, accept, chosen.source.project)
    policy = Policy(python=chosen.env.python)
    judge_environment(chosen.source, chosen.env, chosen.members, report, policy, exceptions)
    return report, report.failing


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
