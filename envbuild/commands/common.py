"""Arguments shared by several commands, and how they find the environment.

Every check of an argument happens while argparse reads the command line (a ``type=`` here), so
a bad argument is exit 2 before anything looks at the host (exit 3) or the disk.

Every handler takes a frozen dataclass of exactly the options its parser defines (``PlanArgs``,
``ProvisionArgs``, ...; ``tests/test_command_args.py`` keeps the two equal), built from
argparse's namespace at the edge (``typed``; ``Handler`` wires it to ``set_defaults(func=...)``).
An option group added by a helper has its base class beside it: ``StackArgs``, ``JsonArgs`` and
``RootArgs`` here; ``SelectionArgs``, ``LockArgs`` and the ``--lock`` commands' own in
``commands/selection.py``. The helpers that read a group take its base class.

The environment is found (``find_environment``): the commands that work on a provisioned
environment (``smoke``, ``dist-step``, ``verify``, ``receipt``) take its data root from, in this
order, ``--root``, ``$ENVBUILD_ROOT``, or the active venv (``$VIRTUAL_ENV``) when envbuild made it,
and say in one line which root they use and why. ``provision`` leaves a record in the venv it
made (``envbuild-environment.json``: the data root, the venv and the stack spec it came from), so
that activating the venv is enough; the stack found with the root is used unless ``--profile`` or
``--stack`` names another.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from envbuild import events
from envbuild._io import atomic_write_json
from envbuild.errors import ConfigError
from envbuild.layout import Paths, paths_for
from envbuild.quoting import sh_word
from envbuild.spec import StackSpec, resolve_spec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# What `cli.py` hands every command's ``register``: argparse's sub-command table.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

A = TypeVar("A", bound="DataclassInstance")


def typed(cls: type[A], ns: argparse.Namespace) -> A:
    """The ``cls`` (a command's frozen dataclass of options) of the parsed ``ns``: each field is
    the namespace's attribute of that name, as argparse made it (its ``type=`` already applied)."""
    return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Handler(Generic[A]):
    """A command's ``func`` (``p.set_defaults(func=Handler(run, PlanArgs))``): ``cli.main`` calls it
    with argparse's namespace, and ``run`` gets its typed options (``typed``)."""

    run: Callable[[A], int]
    args: type[A]

    def __call__(self, ns: argparse.Namespace) -> int:
        return self.run(typed(self.args, ns))


ROOT_ENV = "ENVBUILD_ROOT"
ENVIRONMENT_RECORD = "envbuild-environment.json"  # in a venv envbuild made: where it belongs
RECORD_SCHEMA = "envbuild.environment/1"


def path_arg(text: str) -> Path:
    """``type=`` of every path option: an empty value (``--root "$UNSET"``) is refused, where
    ``Path("")`` would quietly mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty path (an unset shell variable?); give a path, or leave the option out"
        )
    return Path(text)


def nonempty_arg(text: str) -> str:
    """``type=`` of a path-or-URL option kept as text (``--python``, ``--wheelhouse``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty value (an unset shell variable?); give one, or leave the option out"
        )
    return text


def wheelhouse_arg(text: str) -> str:
    """``type=`` of ``--wheelhouse DIR|URL``: a wheelhouse is read at its root (its files, or its
    find-links page ``index.html``); the address of its PEP 503 pages, which ``wheelhouse index``
    prints (``…/simple/``), names the same wheelhouse and is read at its root."""
    text = nonempty_arg(text)
    head, sep, tail = text.rstrip("/").rpartition("/")
    if not (sep and tail == "simple" and head):
        return text
    return head + "/" if "://" in head else head


WEEK = 7 * 24 * 3600.0  # the longest duration any option takes: beyond it a number is a typo


def seconds_arg(*, maximum: float = WEEK, zero: bool = False) -> Callable[[str], float]:
    """``type=`` of a duration in seconds: a finite number above 0 (or 0 with ``zero``) and at most
    ``maximum``; ``nan``, ``inf``, negative and absurd values are usage errors."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from exc
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
        low_ok = value >= 0 if zero else value > 0
        if not low_ok or value > maximum:
            low = "0" if zero else "above 0"
            raise argparse.ArgumentTypeError(
                f"{text} seconds is out of range: give {low}, at most {maximum:g}"
            )
        return value

    parse.__name__ = "seconds"
    return parse


def count_arg(minimum: int, maximum: int, *, special: tuple[int, ...] = ()) -> Callable[[str], int]:
    """``type=`` of a whole number from ``minimum`` to ``maximum`` (or one of ``special``, such as
    ``0`` for "choose for me"): anything else is a usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from exc
        if value not in special and not minimum <= value <= maximum:
            also = f" (or {', '.join(map(str, special))})" if special else ""
            raise argparse.ArgumentTypeError(
                f"{value} is out of range: give {minimum} to {maximum}{also}"
            )
        return value

    parse.__name__ = "count"
    return parse


def amount_arg(
    minimum: float, maximum: float, *, special: tuple[float, ...] = ()
) -> Callable[[str], float]:
    """``type=`` of a finite number from ``minimum`` to ``maximum`` (or one of ``special``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
        if not math.isfinite(value) or (value not in special and not minimum <= value <= maximum):
            also = f" (or {', '.join(f'{v:g}' for v in special)})" if special else ""
            raise argparse.ArgumentTypeError(
                f"{text} is out of range: give {minimum:g} to {maximum:g}{also}"
            )
        return value

    parse.__name__ = "number"
    return parse


@dataclass(frozen=True)
class StackArgs:
    """``add_stack_args``: the stack spec a command reads (neither: the ``cpu`` profile)."""

    profile: str | None
    stack: Path | None


@dataclass(frozen=True)
class JsonArgs:
    """``add_json_arg`` (or a ``--json`` of the command's own help): a JSON document on stdout."""

    json: bool


@dataclass(frozen=True)
class RootArgs:
    """``add_root_arg`` (or a ``--root`` of the command's own help, a path): the data root."""

    root: Path | None


def add_stack_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--profile", metavar="NAME", help="a profile: lockfiles/NAME/stack.toml (default: cpu)"
    )
    group.add_argument("--stack", metavar="FILE", type=path_arg, help="any stack spec file")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")


def add_build_cache_arg(parser: argparse.ArgumentParser) -> None:
    """``--build-cache DIR|URL``: the fleet's shared build cache (``wheelhouse.sharedcache``)."""
    parser.add_argument(
        "--build-cache",
        metavar="DIR|URL",
        type=nonempty_arg,
        help=(
            "the fleet's shared build cache: a folder on a filesystem the hosts share (read and"
            " written: each build compiled by one host, the others wait for it) or an http(s) URL"
            " (read only); default $ENVBUILD_BUILD_CACHE"
        ),
    )


def load_stack(args: StackArgs) -> StackSpec:
    return resolve_spec(args.profile, args.stack)


# ----------------------------------------------------------------------------- the environment


@dataclass(frozen=True)
class Found:
    """The environment a command works on: its stack, data root and venv, and why this one."""

    spec: StackSpec
    paths: Paths
    venv: Path  # the venv the root's provision recorded (default: <root>/<layout.venv>)
    why: str  # "from --root", "from ENVBUILD_ROOT", "from the active venv ...", or the default


def add_root_arg(
    parser: argparse.ArgumentParser, what: str = "data root holding the venv, receipts and logs"
) -> None:
    parser.add_argument(
        "--root",
        type=path_arg,
        help=(
            f"{what} (default: ${ROOT_ENV}, else the active venv's if envbuild made it, "
            "else the stack's layout.root)"
        ),
    )


def find_environment(args: RootArgs, environ: Mapping[str, str] | None = None) -> Found:
    """The stack, root and venv ``args`` and the environment point at; says which root and why.
    A command without ``--profile``/``--stack`` (not a ``StackArgs``: ``receipt``) names no stack.
    """
    env = os.environ if environ is None else environ
    root, why, record = _find_root(args.root, env)
    stack = args if isinstance(args, StackArgs) else StackArgs(profile=None, stack=None)
    named = stack.profile or stack.stack
    spec = load_stack(stack) if named or record is None else _recorded_spec(record, root)
    paths = paths_for(spec, root)
    venv = Path(record["venv"]) if record and isinstance(record.get("venv"), str) else paths.venv
    if record is not None and not named:
        why += f"; stack {spec.name}, as provisioned there"
    events.emit("info", f"root {paths.root} ({why})")
    return Found(spec=spec, paths=paths, venv=venv, why=why)


def _find_root(
    explicit: Path | None, env: Mapping[str, str]
) -> tuple[Path | None, str, dict[str, Any] | None]:
    if explicit is not None:
        return explicit, "from --root", _root_record(explicit)
    if ROOT_ENV in env:
        value = env[ROOT_ENV]
        if not value.strip():
            raise ConfigError(
                f"{ROOT_ENV} is set but empty (an unset shell variable?)",
                hint="Set it to the data root provision used, unset it, or pass --root.",
            )
        root = Path(value).expanduser()
        return root, f"from {ROOT_ENV}", _root_record(root)
    active = env.get("VIRTUAL_ENV")
    if active:
        venv = Path(active)
        record = _venv_record(venv)
        if record is not None:
            return Path(record["root"]), f"from the active venv {venv}", record
    return (
        None,
        "the stack's layout.root: no --root, no ENVBUILD_ROOT, no active venv made by envbuild",
        None,
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def lock_recorded(venv: Path) -> bool:
    """Whether ``venv``'s record has a ``lock`` section (``provision --lock`` made it): a look at
    the file, without importing ``envbuild.projectlock`` (which ``projectlock.record`` reads it
    with)."""
    doc = _read_json(venv / ENVIRONMENT_RECORD)
    return doc is not None and isinstance(doc.get("lock"), dict)


def _venv_record(venv: Path) -> dict[str, Any] | None:
    """What provision recorded in ``venv``; for a venv made before the record, the root is the
    venv's parent when that root's manifest names this venv."""
    doc = _read_json(venv / ENVIRONMENT_RECORD)
    if doc is not None and doc.get("schema") == RECORD_SCHEMA and isinstance(doc.get("root"), str):
        return doc
    manifest = _read_json(Paths(root=venv.parent).manifest)
    if manifest is not None and manifest.get("venv") == str(venv):
        return {"root": str(venv.parent), "venv": str(venv), "stack_name": manifest.get("stack")}
    return None


def _root_record(root: Path) -> dict[str, Any] | None:
    """What the root's provision recorded: its manifest names the venv, the venv's record the
    stack. None where nothing was provisioned there."""
    manifest = _read_json(Paths(root=root.expanduser()).manifest)
    if manifest is None or not isinstance(manifest.get("venv"), str) or not manifest["venv"]:
        return None
    record = _venv_record(Path(manifest["venv"])) or {"stack_name": manifest.get("stack")}
    return {**record, "root": str(root), "venv": manifest["venv"]}


def _recorded_spec(record: dict[str, Any], root: Path | None) -> StackSpec:
    if isinstance(record.get("lock"), dict):  # provision --lock: the record keeps the stack it ran
        from envbuild.projectlock.record import spec_from_record

        return spec_from_record(record["lock"])
    stack = record.get("stack")
    if isinstance(stack, str) and Path(stack).is_file():
        return resolve_spec(None, Path(stack))
    name = record.get("stack_name")
    if isinstance(name, str) and name:
        try:
            return resolve_spec(name, None)
        except ConfigError:
            pass
    raise ConfigError(
        f"the environment at {root} was provisioned from {stack or name or 'a stack'}, "
        "which is not there any more",
        hint="Name its stack with --profile NAME or --stack FILE.",
    )


def record_environment(spec: StackSpec, paths: Paths) -> list[str]:
    """After a provision: write ``envbuild-environment.json`` into the venv it made (a venv only,
    never a system or image interpreter's prefix), so the venv, once activated, is found. Returns
    the lines that tell the user how the next commands find the environment."""
    manifest = _read_json(paths.manifest) or {}
    venv = (
        Path(manifest["venv"])
        if isinstance(manifest.get("venv"), str) and manifest["venv"]
        else paths.venv
    )
    export = f"export {ROOT_ENV}={sh_word(str(paths.root), '--root')}"
    later = "then smoke, dist-step, verify and receipt find this environment without --root"
    if not (venv / "pyvenv.cfg").is_file():
        return [f"next: {export}", f"  {later}"]
    doc = {
        "schema": RECORD_SCHEMA,
        "root": str(paths.root.absolute()),
        "venv": str(venv),
        "stack": str(spec.path.absolute()),
        "stack_name": spec.name,
    }
    if _read_json(venv / ENVIRONMENT_RECORD) != doc:
        try:
            atomic_write_json(venv / ENVIRONMENT_RECORD, doc)
        except OSError:
            return [f"next: {export}", f"  {later}"]  # found through the root, not the venv
    activate = f". {sh_word(str(venv / 'bin' / 'activate'), '--venv')}"
    return [f"next: {activate}  (or: {export})", f"  {later}"]
