"""Read a committed lock and choose the one environment to install: this host's platform and
Python, and the selection of extras/groups the locker's own sync would take.

The environments come from the gate (``envbuild.gate.environments``): every valid selection of
the lock's conflicting extras/groups on each platform and Python. A provision installs exactly
one of them:

- no ``--extra``/``--group``: the locker's default selection (uv: the project and its default
  groups; labelled "default", or "no conflicting extra" where nothing is on by default);
- ``--extra``/``--group``: the selections that hold every requested item; among them the one
  that adds nothing beyond the requested items and the default ones, as ``uv sync --extra X``;
- more than one candidate left: a usage error (exit 2) that lists the choices.

The gate's rules then run on that environment alone (``gate``): the check is narrowed with a
PEP 508 marker that holds in the chosen selection only, so a broken extra the host does not
install does not refuse the one it does.
"""

from __future__ import annotations

import hashlib
import platform as host_platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError, LockError
from envbuild.fromlock.uvsync import Exported, SyncFlags, export, match_entries, sync_refusal
from envbuild.gate.check import FileReport, check_file, read_lockfile
from envbuild.gate.environments import NO_CHOICE, Narrow, enumerate_environments
from envbuild.gate.findings import Finding, Policy
from envbuild.gate.formats import detect, parse
from envbuild.gate.model import Entry, Environment, Format, LockParseError, Members, ParsedLock

__all__ = ["Chosen", "Request", "choose", "gate", "host_platform_key", "read_lock"]

SUPPORTED: tuple[Format, ...] = ("uv.lock", "pylock")
_DEFAULT_WORDS = "default"


@dataclass(frozen=True)
class Request:
    """What the command line asks: the extras/groups, platform or marker filters, the target
    Python."""

    python: str  # "3.11": the interpreter the environment is made with
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    # --environment: platforms or PEP 508 markers (default: this host)
    environment: tuple[str, ...] = ()
    fmt: Format | None = None
    # uv sync's flags (extras and groups included): what uv export selects
    sync: SyncFlags = SyncFlags()


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
    """The lock and the one environment of it a provision installs."""

    path: Path
    sha256: str
    lock: ParsedLock
    env: Environment
    members: Members
    # the ``uv sync --frozen ...`` command that installs the same (None: uv was not asked)
    sync: str | None = None
    flags: SyncFlags = SyncFlags()

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


def read_lock(path: Path, fmt: Format | None = None) -> tuple[ParsedLock, str]:
    """The lock at ``path`` and its sha256 (ConfigError, exit 2: missing, unreadable, a format
    provision does not install from, or not a readable lock of its format)."""
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
        lock = parse(path, text, kind)
    except LockParseError as exc:
        raise ConfigError(f"{path}: not a readable {kind} file: {exc}") from exc
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"{path}: not a readable {kind} file: a table or value is not shaped as {kind} "
            f"writes it ({type(exc).__name__}: {exc})"
        ) from exc
    return lock, hashlib.sha256(text.encode("utf-8")).hexdigest()


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


def _items(env: Environment) -> set[str]:
    """The conflicting items an environment chose, in the gate's words (``extra cu128``)."""
    label = env.selection[0] if env.selection else ""
    if label in (NO_CHOICE, _DEFAULT_WORDS, ""):
        return set()
    if label.startswith(_DEFAULT_WORDS + " ("):
        label = label[len(_DEFAULT_WORDS) + 2 : -1]
    return {w.strip() for w in label.split(" + ") if w.strip()}


def _is_default(env: Environment) -> bool:
    label = env.selection[0] if env.selection else ""
    return label == _DEFAULT_WORDS or label.startswith(_DEFAULT_WORDS + " (")


def _names(words: str) -> tuple[str, str]:
    """``extra cu128`` -> ("extra", "cu128"); ``extra trainer[cu128]`` -> ("extra", "cu128")."""
    kind, _, name = words.partition(" ")
    m = re.fullmatch(r".*\[(.+)\]", name)
    return kind, str(canonicalize_name(m.group(1) if m else name))


def _holds(env: Environment, want: tuple[str, str]) -> bool:
    kind, name = want
    return any(
        _names(w)[1] == name and (kind == "any" or _names(w)[0] == kind) for w in _items(env)
    )


def choose(lock: ParsedLock, sha256: str, request: Request) -> Chosen:
    """The one environment of ``lock`` to install for ``request`` (see the module docstring)."""
    envs = _environments(lock, request)
    path = lock.path
    exported = export(path, request.sync) if lock.format == "uv.lock" else None
    if exported is not None:
        return _as_uv_selects(lock, sha256, envs, exported, request.sync)
    if lock.format == "uv.lock":
        _warn_uv_cannot_select(path)
    if request.sync.beyond_conflicts:
        where = (
            "uv cannot say what they select here (see the warning above)"
            if lock.format == "uv.lock"
            else f"a {lock.format} file records no such selection"
        )
        raise ConfigError(
            f"{path}: {', '.join(request.sync.beyond_conflicts)}: {where}",
            hint=(
                "Keep the lock beside its pyproject.toml (and its workspace members'), or choose"
                " between the lock's conflicting extras/groups with --extra / --group alone."
            ),
        )
    env = _one_selection(lock, envs, request)
    return Chosen(path, sha256, lock, env, lock.members(env))


def _environments(lock: ParsedLock, request: Request) -> list[Environment]:
    """The lock's environments for the request's Python and platform (this host's unless
    ``--environment``); ConfigError for none, or for several platforms."""
    env_filter = request.environment or (host_platform_key(),)
    narrow = Narrow(environment=env_filter, python=(request.python,), default_python=request.python)
    narrow.validate()
    envs = enumerate_environments(lock, narrow)
    path = lock.path
    if not envs:
        raise ConfigError(
            f"{path}: the lock covers no environment for Python {request.python} on "
            f"{', '.join(env_filter)} (its requires-python: {lock.requires_python or 'any'}; "
            f"its environments: {'; '.join(lock.environments) or 'any'})",
            hint="Give the interpreter the lock is made for with --python, or --environment.",
        )
    platforms = sorted({e.platform for e in envs})
    if len(platforms) > 1:
        raise ConfigError(
            f"{path}: --environment matches several platforms ({', '.join(platforms)}); a provision"
            " installs one",
            hint="Name one platform, e.g. --environment linux-x86_64.",
        )
    return envs


def _warn_uv_cannot_select(path: Path) -> None:
    """A uv.lock uv cannot export here: said in a warning, with why."""
    from envbuild import events

    why = (
        "the project's pyproject.toml is not beside the lock"
        if not (path.parent / "pyproject.toml").is_file()
        else ("uv reads a lock named uv.lock" if path.name != "uv.lock" else "uv is not installed")
    )
    events.emit(
        "warn",
        f"{path}: {why}, so uv cannot say what a selection installs: envbuild chooses between"
        " the lock's conflicting extras/groups alone (--extra/--group), and installs every"
        " extra that conflicts with nothing; keep the lock beside its pyproject.toml for uv"
        " sync's own selection",
    )


def _one_selection(lock: ParsedLock, envs: list[Environment], request: Request) -> Environment:
    """The one environment whose selection holds the request's extras and groups (the default
    selection when it names none); ConfigError for none or several."""
    path = lock.path
    wanted = [("extra", str(canonicalize_name(x))) for x in request.extras] + [
        ("any", str(canonicalize_name(g))) for g in request.groups
    ]
    candidates = [e for e in envs if all(_holds(e, w) for w in wanted)]
    if not candidates:
        raise ConfigError(
            f"{path}: no selection of this lock holds {_asked(request)}", hint=_choices_hint(envs)
        )
    defaults = next((_items(e) for e in envs if _is_default(e)), set())
    if not wanted:
        best = [e for e in candidates if _is_default(e)] or [e for e in candidates if not _items(e)]
        if len(candidates) == 1:
            best = candidates
    else:
        asked = {w for e in candidates for w in _items(e) if any(_holds_word(w, x) for x in wanted)}
        fits = [e for e in candidates if _items(e) <= asked | defaults]
        most = max((len(_items(e) & defaults) for e in fits), default=0)
        best = [e for e in fits if len(_items(e) & defaults) == most]
    if len(best) != 1:
        shown = "; ".join(e.selection[0] if e.selection else NO_CHOICE for e in best or candidates)
        raise ConfigError(
            f"{path}: {_asked(request) if wanted else 'the default selection'} matches more than"
            f" one environment of this lock ({shown}); a provision installs one",
            hint=_choices_hint(envs),
        )
    return best[0]


def _as_uv_selects(
    lock: ParsedLock,
    sha256: str,
    envs: list[Environment],
    exported: list[Exported],
    flags: SyncFlags,
) -> Chosen:
    """The environment uv's export of ``flags`` installs here: its packages are the lock's entries
    whose exported marker holds on this platform and Python. The gate's environment is the
    selection of the lock's conflicting items that installs the same torch and most of the same
    packages: the gate's rules run on it, and it names the choice in the receipt."""
    entries = match_entries(lock, exported, envs[0].values)
    names = [e.name for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    # the export holds two forks at once: extras that conflict, switched on through others
    if twice:
        reason = sync_refusal(lock.path, flags, envs[0].python)
        if reason is not None:
            raise ConfigError(
                f"{lock.path}: uv refuses this selection ({flags.sync_command()}): {reason}",
                hint="Choose one of the conflicting extras/groups.",
            )
    keys = {e.key for e in entries}
    torch = {e.key for e in entries if e.name == "torch"}
    best: tuple[tuple[int, int, int], Environment, Members] | None = None
    for env in envs:
        members = lock.members(env)
        have = {e.key for e in members.entries}
        score = (len(torch & have), len(keys & have), -len(have - keys))
        if best is None or score > best[0]:
            best = (score, env, members)
    assert best is not None  # envs is not empty
    _, env, members = best
    virtual = _virtual_roots(lock, members, keys)
    chosen_members = Members(entries=[*entries, *virtual], roots=members.roots)
    return Chosen(
        lock.path, sha256, lock, env, chosen_members, sync=flags.sync_command(), flags=flags
    )


def _virtual_roots(lock: ParsedLock, members: Members, keys: set[int]) -> list[Entry]:
    """The project's own entries uv's export leaves out because they are virtual (``package =
    false``): kept, so the plan says why the project is not installed."""
    from envbuild.gate.formats.uvlock import sources_of

    sources = sources_of(lock)
    return [
        e
        for e in members.entries
        if e.key in members.roots and e.key not in keys and "virtual" in sources.get(e.key, {})
    ]


def _holds_word(words: str, want: tuple[str, str]) -> bool:
    kind, name = _names(words)
    return name == want[1] and (want[0] == "any" or kind == want[0])


def _asked(request: Request) -> str:
    parts = [f"--extra {x}" for x in request.extras] + [f"--group {g}" for g in request.groups]
    return " ".join(parts)


def _choices_hint(envs: list[Environment]) -> str:
    words = sorted({w for e in envs for w in _items(e)})
    flags = [
        f"--{_names(w)[0] if _names(w)[0] in ('extra', 'group') else 'group'} {_names(w)[1]}"
        for w in words
    ]
    labels = sorted({e.selection[0] for e in envs if e.selection})
    if not flags:
        return "This lock has no conflicting extras or groups to choose between."
    return (
        f"Choose with {', '.join(dict.fromkeys(flags))}. Its selections here: {'; '.join(labels)}."
    )


def selection_marker(lock: ParsedLock, env: Environment) -> str | None:
    """A PEP 508 marker that holds in ``env``'s selection and in no other (None: nothing to
    choose)."""
    atoms: list[str] = []
    for conflict in lock.conflicts:
        for item in conflict:
            for tag in sorted(item.extras):
                atoms.append(f"extra {'==' if tag in env.extras else '!='} '{tag}'")
            for g in sorted(item.groups - item.extras):
                atoms.append(f"'{g}' {'in' if g in env.groups else 'not in'} dependency_groups")
    return " and ".join(dict.fromkeys(atoms)) or None


def gate(chosen: Chosen, request: Request, accept: Path | None) -> tuple[FileReport, list[Finding]]:
    """The gate's rules on the chosen environment alone: (the report, the findings that refuse it).
    A finding about a package this selection does not install (a mismatched wheel in an extra
    that is not asked for) refuses only the selections that install it (``installed_by``)."""
    env = chosen.env
    where = [request.environment[0] if request.environment else host_platform_key()]
    marker = selection_marker(chosen.lock, env)
    if marker:
        where.append(marker)
    narrow = Narrow(environment=tuple(where), python=(env.python,), default_python=env.python)
    try:
        report = check_file(
            chosen.path,
            Policy(python=env.python),
            fmt=chosen.lock.format,
            offline=True,
            narrow=narrow,
            accept_file=accept,
        )
    # the narrowing matched nothing: judge every environment of the platform
    except ConfigError as exc:
        if "nothing would be judged" not in exc.message:
            raise
        report = check_file(
            chosen.path,
            Policy(python=env.python),
            fmt=chosen.lock.format,
            offline=True,
            narrow=Narrow(
                environment=tuple(where[:1]), python=(env.python,), default_python=env.python
            ),
            accept_file=accept,
        )
    return report, installed_by(chosen, report.failing)


def installed_by(chosen: Chosen, findings: list[Finding]) -> list[Finding]:
    """The findings about what ``chosen`` installs: a finding on a locked entry (by its line in
    the lock, else by its name) counts where the selection installs that entry; one about no
    entry (the lock as a whole) always counts."""
    keys = {e.key for e in chosen.members.entries}
    names = {e.name for e in chosen.members.entries}
    at_line = {e.line: e for e in chosen.lock.entries if e.line is not None}
    locked = {e.name for e in chosen.lock.entries}
    out = []
    for f in findings:
        entry = at_line.get(f.line) if f.line is not None else None
        name = str(canonicalize_name(f.package.split()[0])) if f.package.strip() else ""
        if entry is not None and entry.name == name:
            if entry.key in keys:
                out.append(f)
        elif name not in locked or name in names:
            out.append(f)
    return out


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
