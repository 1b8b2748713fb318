"""Every command's handler takes a frozen dataclass of exactly the options its parser defines
(``envbuild.commands.common.typed`` / ``Handler``): the fields are the parser's dests, each typed as
the parser makes its value, so the two cannot drift; and a few real parses give the values and
types the handlers read."""

from __future__ import annotations

import argparse
import dataclasses
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import pytest

from envbuild import cli
from envbuild.commands.check_lock import CheckLockArgs
from envbuild.commands.common import Handler, typed
from envbuild.commands.plan import PlanArgs
from envbuild.commands.selection import ProvisionArgs, WheelhouseMirrorArgs, sync_flags

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

A = TypeVar("A", bound="DataclassInstance")

_NOT_DESTS = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


def _dests(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if not isinstance(a, _NOT_DESTS)}


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = (), above: frozenset[str] = frozenset()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser, frozenset[str]]]:
    """(command path, its parser, the dests of the parsers above it) of every command that runs."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(path, parser, above)]
    here = above | set(_dests(parser)) | {a.dest for a in subs}
    return [
        leaf
        for sub in subs
        for name, child in sub.choices.items()
        for leaf in _leaves(child, (*path, name), here)
    ]


LEAVES = _leaves(cli.build_parser())


def _expected_hint(action: argparse.Action) -> object:
    """The type of the value argparse makes for ``action``."""
    if isinstance(action, argparse._StoreTrueAction):
        return bool
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+")
    if action.choices is not None and not many:
        element: Any = Literal[tuple(action.choices)]
    elif action.type is None:
        element = str
    elif isinstance(action.type, type):
        element = action.type
    else:
        element = get_type_hints(action.type)["return"]
    hint: Any = types.GenericAlias(list, element) if many else element
    maybe_none = (
        action.default is None
        and not action.required
        and (action.option_strings or action.nargs == "?")
    )
    return hint | None if maybe_none else hint


def _conforms(value: object, hint: object) -> bool:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, h) for h in get_args(hint))
    if origin is Literal:
        return value in get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, get_args(hint)[0]) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, float)
    assert isinstance(hint, type), hint
    return isinstance(value, hint)


def _built(argv: list[str], cls: type[A]) -> A:
    ns = cli.build_parser().parse_args(argv)
    handler = ns.func
    assert isinstance(handler, Handler) and handler.args is cls
    args = typed(cls, ns)
    hints = get_type_hints(cls)
    for field in dataclasses.fields(cls):
        value = getattr(args, field.name)
        assert _conforms(value, hints[field.name]), (field.name, value, hints[field.name])
    return args


def test_every_command_is_found() -> None:
    names = {" ".join(path) for path, _, _ in LEAVES}
    assert {
        "plan",
        "provision",
        "verify",
        "smoke",
        "dist-step",
        "preflight",
        "docker",
        "modal",
        "lock",
        "check-lock",
        "ansible-vars",
        "receipt show",
        "receipt list",
        "receipt diff",
        "wheelhouse build",
        "wheelhouse mirror",
        "wheelhouse index",
    } <= names
    assert len(names) == len(LEAVES)


@pytest.mark.parametrize(
    ("path", "parser", "above"), LEAVES, ids=[" ".join(p) for p, _, _ in LEAVES]
)
def test_the_handler_takes_exactly_the_parsers_options(
    path: tuple[str, ...], parser: argparse.ArgumentParser, above: frozenset[str]
) -> None:
    handler = parser.get_default("func")
    assert isinstance(handler, Handler), (
        f"{' '.join(path)}: set_defaults(func=Handler(run, ...Args))"
    )
    cls = handler.args
    assert dataclasses.is_dataclass(cls) and vars(cls)["__dataclass_params__"].frozen
    fields = {f.name for f in dataclasses.fields(cls)}
    dests = _dests(parser)
    # the parsers above (-v/-q, the command words) only where the handler reads them
    assert fields == set(dests) | (fields & above), (
        f"{cls.__name__} and the parser of {' '.join(path)} differ"
    )
    run_takes = next(iter(get_type_hints(handler.run).values()))
    assert isinstance(run_takes, type) and issubclass(cls, run_takes)


@pytest.mark.parametrize(
    ("path", "parser", "above"), LEAVES, ids=[" ".join(p) for p, _, _ in LEAVES]
)
def test_each_field_is_typed_as_argparse_makes_it(
    path: tuple[str, ...], parser: argparse.ArgumentParser, above: frozenset[str]
) -> None:
    cls = parser.get_default("func").args
    hints = get_type_hints(cls)
    for dest, action in _dests(parser).items():
        assert hints[dest] == _expected_hint(action), (
            f"{cls.__name__}.{dest}: {hints[dest]} != {_expected_hint(action)}"
        )


def test_the_options_are_frozen() -> None:
    args = _built(["plan"], PlanArgs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.json = True  # type: ignore[misc]  # the assignment a frozen dataclass refuses


def test_handler_hands_run_the_typed_options() -> None:
    seen: list[PlanArgs] = []

    def run(a: PlanArgs) -> int:
        seen.append(a)
        return 3

    ns = cli.build_parser("plan").parse_args(["plan", "--profile", "cpu"])
    assert Handler(run, PlanArgs)(ns) == 3
    assert seen == [typed(PlanArgs, ns)] and isinstance(seen[0], PlanArgs)


def test_plan() -> None:
    args = _built(
        [
            "plan",
            "--profile",
            "cpu",
            "--backend",
            "uv",
            "--root",
            "/data",
            "--venv",
            "/v",
            "--json",
            "--offline",
            "--wheelhouse",
            "/wh",
            "--python",
            "/usr/bin/python3",
        ],
        PlanArgs,
    )
    assert args == PlanArgs(
        profile="cpu",
        stack=None,
        json=True,
        root=Path("/data"),
        venv=Path("/v"),
        python="/usr/bin/python3",
        backend="uv",
        offline=True,
        wheelhouse="/wh",
        no_lock=False,
        lock=None,
        lock_format=None,
        extra=[],
        group=[],
        environment=[],
        accept=None,
        rebuild_mismatched=False,
        no_project=False,
        all_extras=False,
        no_extra=[],
        only_group=[],
        no_group=[],
        all_groups=False,
        no_default_groups=False,
        no_dev=False,
        only_dev=False,
        package=[],
        all_packages=False,
        no_editable=False,
        no_install_project=False,
        require_hashes=False,
        no_install_workspace=False,
        build_constraints=[],
    )


def test_provision_lock() -> None:
    args = _built(
        [
            "provision",
            "--lock",
            "proj/uv.lock",
            "--extra",
            "cu128",
            "--extra",
            "train",
            "--no-dev",
            "--format",
            "uv.lock",
            "--replace-torch",
            "--venv",
            "/opt/venv",
            "--step-timeout",
            "90",
            "--compile-bytecode",
            "yes",
            "--no-project",
            "--accept",
            "ok.toml",
        ],
        ProvisionArgs,
    )
    assert isinstance(args, ProvisionArgs)
    assert args.lock == Path("proj/uv.lock") and args.lock_format == "uv.lock"
    assert (
        args.extra == ["cu128", "train"] and args.no_dev and args.no_project and args.replace_torch
    )
    assert args.accept == Path("ok.toml") and args.venv == Path("/opt/venv") and args.root is None
    assert args.step_timeout == 90.0 and isinstance(args.step_timeout, float)
    assert (
        args.import_timeout == 300.0 and args.compile_bytecode == "yes" and args.prefetch == "auto"
    )
    assert args.step is None and args.profile is None and args.stack is None and not args.json
    flags = sync_flags(args)
    assert (
        flags.extras == ("cu128", "train")
        and flags.no_dev
        and flags.no_install_project
        and not flags.all_extras
    )


def test_check_lock() -> None:
    args = _built(
        [
            "check-lock",
            "uv.lock",
            "reqs/requirements.txt",
            "--format",
            "uv.lock",
            "--protect",
            "numpy",
            "--python",
            "3.12",
            "--environment",
            "linux-x86_64",
            "--profile",
            "cpu",
            "--stack",
            "s.toml",
            "--annotations",
            "github",
            "--markdown-file",
            "report.md",
            "--offline",
        ],
        CheckLockArgs,
    )
    assert isinstance(args, CheckLockArgs)
    assert (
        args.files == [Path("uv.lock"), Path("reqs/requirements.txt")] and args.format == "uv.lock"
    )
    assert (
        args.protect == ["numpy"]
        and args.python == ["3.12"]
        and args.environment == ["linux-x86_64"]
    )
    assert (
        args.profile == ["cpu"] and args.stack == [Path("s.toml")] and args.annotations == "github"
    )
    assert (
        args.markdown_file == Path("report.md")
        and args.offline
        and not args.online
        and not args.json
    )
    assert args.index_url == [] and args.accept is None and args.torch_min is None
    bare = _built(["check-lock"], CheckLockArgs)
    assert (
        isinstance(bare, CheckLockArgs)
        and bare.files == []
        and bare.profile == []
        and bare.annotations is None
    )


def test_wheelhouse_mirror() -> None:
    args = _built(
        [
            "wheelhouse",
            "mirror",
            "--lock",
            "uv.lock",
            "--out",
            "wh",
            "-j",
            "8",
            "--deadline",
            "5",
            "--group",
            "docs",
            "--have",
            "freeze.txt",
            "--all-extras",
        ],
        WheelhouseMirrorArgs,
    )
    assert isinstance(args, WheelhouseMirrorArgs)
    assert (
        args.lock == Path("uv.lock") and args.out == Path("wh") and args.have == Path("freeze.txt")
    )
    assert args.jobs == 8 and args.deadline == 5 and args.group == ["docs"] and args.all_extras
    assert (
        args.requirements is None
        and args.index_url == []
        and args.python is None
        and args.profile is None
    )
    stack = _built(["wheelhouse", "mirror", "-r", "a.txt", "-r", "b.txt"], WheelhouseMirrorArgs)
    assert isinstance(stack, WheelhouseMirrorArgs)
    assert stack.requirements == [Path("a.txt"), Path("b.txt")] and stack.out == Path("wheelhouse")
    assert stack.jobs == 4 and stack.lock is None
