"""The reference pages, generated from envbuild's own code and committed under ``docs/reference/``.

    make docs-reference                             # writes them (python docs/hooks/reference.py
    --write) .venv/bin/python docs/hooks/reference.py --check  # exit 1 and the stale pages' names
    when one differs

Committed files, not pages that exist only in a site build: the documentation reads the same on
a code host, offline and in ``mkdocs serve``, and every link to them resolves as a file. The
price is a copy that can go stale, so it is checked twice: ``tests/test_docs.py`` fails when a
committed page differs from what the code makes now (and names the command above), and this file,
registered in ``mkdocs.yml`` as a hook, warns at every build (``mkdocs build --strict`` fails).
The pages use HTML anchors (``<a id="..."></a>``), which MkDocs and a code host's Markdown both
honour, never ``{#id}`` (MkDocs only), and include no file (``--8<--``): what they show is in them.

The same command refreshes the include blocks of every page under ``docs/``: a repository file
shown in a page (a workflow, a profile, ``ansible/README.md``) is a copy between
``<!-- include PATH [as LANG] ... -->`` and ``<!-- end include -->``, checked like the pages above,
so the page reads whole as a file too (a ``--8<--`` line shows as itself on a code host). So is
the stage table of ``architecture.md``, from ``stages.py`` (``STAGES_DOC``,
``STAGE_OF``).

- ``reference/cli.md``: every command and option, from the argparse parsers
  (``envbuild.cli.build_parser()``), help text, choices and defaults as ``--help`` shows them.
- ``reference/stack-spec.md``: every key of ``stack.toml``, from the key lists the loader accepts
  (``envbuild/spec/stack.py``'s ``_*_KEYS``, what ``check_keys`` holds a file to), with the type and
  default of the frozen dataclass field behind each key and the comment written beside it.
- ``reference/exit-codes.md``: ``envbuild.errors.ExitCode``, ``EXIT_CODE_DOCS`` and the error
  classes that carry each code.
- ``reference/check-lock.md``: the gate's rules (``envbuild.gate.findings.RULES``), its JSON
  schema (``envbuild/gate/output.py``'s docstring), and the rules of envbuild's own locks
  (``envbuild.gate.findings.OWN_RULES``) with how they run (``envbuild/gate/rules/ownlock``'s
  docstring).
- ``reference/json.md``: every ``--json`` document, from the ``TypedDict`` classes that type it
  (``envbuild.commands.documents.DOCUMENTS``): each field's type, whether it is required, and the
  comment written beside it.

Words that exist nowhere in the code (what a spec key without a field comment means, which spec
tables are required) are in ``_SPEC_HELP`` and ``_REQUIRED_TABLES`` below; see the note there.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import inspect
import io
import logging
import re
import sys
import tokenize
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `--write` runs without MkDocs
    from mkdocs.config.defaults import MkDocsConfig

log = logging.getLogger("mkdocs.hooks.reference")

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "make docs-reference"  # the same as: python docs/hooks/reference.py --write
GENERATED = (
    "<!-- Generated from the code by `make docs-reference` (docs/hooks/reference.py): edit"
    " {source}, not this file. -->"
)


def pages() -> dict[str, Callable[[], str]]:
    """{path under docs/: the function that makes the page}."""
    return {
        "reference/cli.md": cli_page,
        "reference/stack-spec.md": spec_page,
        "reference/exit-codes.md": exit_codes_page,
        "reference/check-lock.md": check_lock_page,
        "reference/json.md": json_page,
    }


# A copy of a repository file inside a page, between these two comments; `make docs-reference`
# refreshes it. `as LANG` fences it as code; without, the file is Markdown and goes in as it is.
INCLUDE = re.compile(
    r"(?P<open><!-- include (?P<path>[\w./-]+)(?: as (?P<lang>\w+))? [^>]*-->\n)"
    r"(?P<body>.*?)(?P<close><!-- end include -->)",
    re.S,
)


def _included(m: re.Match[str]) -> str:
    text = (ROOT / m["path"]).read_text(encoding="utf-8").rstrip("\n") + "\n"
    if m["lang"]:
        fence = "````" if "```" in text else "```"
        text = f"{fence}{m['lang']}\n{text}{fence}\n"
    # blank lines: the comments stay HTML blocks of their own
    return m["open"] + "\n" + text + "\n" + m["close"]


def refresh_includes(text: str) -> str:
    """``text`` with every include block holding the file it names, as that file is now."""
    return INCLUDE.sub(_included, text)


# The stage list of docs/hooks/stages.py (what tests/test_layers.py holds the imports to), shown in
# docs/architecture.md between these two comments; `make docs-reference` refreshes it.
STAGES_OPEN = "<!-- stages: generated from docs/hooks/stages.py by `make docs-reference` -->\n"
STAGES_CLOSE = "<!-- end stages -->"


def stage_table() -> str:
    """``stages.py``'s ``stage_table()``: the stages in order and their modules."""
    spec = importlib.util.spec_from_file_location(
        "envbuild_docs_stages", Path(__file__).with_name("stages.py")
    )
    assert spec is not None and spec.loader is not None
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    return str(layers.stage_table())


def refresh_stages(text: str) -> str:
    """``text`` with its stage table (if it has one) as docs/hooks/stages.py makes it now."""
    if STAGES_OPEN not in text:
        return text
    head, rest = text.split(STAGES_OPEN, 1)
    _, tail = rest.split(STAGES_CLOSE, 1)
    return head + STAGES_OPEN + stage_table() + STAGES_CLOSE + tail


def refresh_architecture(text: str) -> str:
    """``text`` with docs/architecture.md's file table and "who prints" rule (where it has them) as
    ``docs/hooks/architecture.py`` makes them now, from envbuild's docstrings, ``OWNS`` and a scan.
    """
    spec = importlib.util.spec_from_file_location(
        "envbuild_docs_architecture", Path(__file__).with_name("architecture.py")
    )
    assert spec is not None and spec.loader is not None
    architecture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(architecture)
    return str(architecture.refresh(text))


def stale_pages() -> dict[str, str]:
    """{path under docs/: the page as it should be now} for every page that differs: a generated
    reference page, or a page whose include block no longer holds its file or whose stage table
    (docs/architecture.md) no longer shows docs/hooks/stages.py's stages."""
    _fresh_envbuild()
    out = {}
    for path, make in pages().items():
        text = make()
        file = ROOT / "docs" / path
        if not file.is_file() or file.read_text(encoding="utf-8") != text:
            out[path] = text
    for file in sorted((ROOT / "docs").rglob("*.md")):
        path = file.relative_to(ROOT / "docs").as_posix()
        text = file.read_text(encoding="utf-8")
        if (
            path not in out
            and (fresh := refresh_architecture(refresh_stages(refresh_includes(text)))) != text
        ):
            out[path] = fresh
    return out


def on_pre_build(config: MkDocsConfig) -> None:
    """MkDocs hook: warn (fail a --strict build) when a committed reference page is stale."""
    stale = stale_pages()
    if stale:
        log.warning(
            "generated reference pages differ from the code: %s; run `%s`",
            ", ".join(f"docs/{p}" for p in stale),
            REGENERATE,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(
            "Write or check the generated reference pages under docs/reference/ "
            "and the include blocks of every page under docs/."
        )
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the pages that differ")
    mode.add_argument(
        "--check", action="store_true", help="exit 1, naming them, when a page differs"
    )
    args = parser.parse_args(argv)
    stale = stale_pages()
    for path, text in stale.items():
        if args.write:
            (ROOT / "docs" / path).write_text(text, encoding="utf-8")
            print(f"wrote docs/{path}")
        else:
            print(f"stale: docs/{path}", file=sys.stderr)
    if args.check and stale:
        print(f"run `{REGENERATE}` and commit the pages", file=sys.stderr)
        return 1
    if not stale:
        print(f"the {len(pages())} reference pages and every include block are current")
    return 0


def _fresh_envbuild() -> None:
    """Forget envbuild's modules, so that ``mkdocs serve`` (which watches ``envbuild/``) shows the
    code as it is now, not as it was when the server started."""
    for name in [n for n in sys.modules if n == "envbuild" or n.startswith("envbuild.")]:
        del sys.modules[name]


# ----------------------------------------------------------------------------- Markdown helpers


def _text(s: str | None) -> str:
    """Help text as Markdown on one line: `code spans` kept, the rest escaped (``<root>``,
    ``*.txt``, ``|`` in a table cell, ``{...}``)."""
    if not s:
        return ""
    s = " ".join(s.split())
    parts = s.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: no code spans at all
        parts = [s.replace("`", "'")]
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"`{part}`")
        else:
            part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            out.append(re.sub(r"([\\*_\[\]{}|#])", r"\\\1", part))
    return "".join(out)


def _code(s: str) -> str:
    """A code span that holds any text (backticks included)."""
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _anchor(name: str) -> str:
    """A link target as HTML: MkDocs and a code host's Markdown both honour it (``{#id}`` is MkDocs'
    only)."""
    return f'<a id="{name}"></a>'


def _heading(level: int, name: str, text: str) -> str:
    return f"{'#' * level} {_anchor(name)}{text}"


def _rst(doc: str) -> str:
    """A docstring's ````code```` as Markdown's `code`."""
    return re.sub(r"``(.+?)``", r"`\1`", doc)


def _docstring(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


# ----------------------------------------------------------------------------- the command line


def cli_page() -> str:
    from envbuild.cli import build_parser

    parser = build_parser()
    out = [
        "# Command line",
        "",
        GENERATED.format(source="the parsers in `envbuild/commands/*.py`"),
        "",
        (
            "Every command takes `-h`/`--help`. `--profile NAME` reads `lockfiles/NAME/stack.toml`"
            " (looked up in `$ENVBUILD_LOCKFILES`, `./lockfiles`, the checkout envbuild runs from,"
            " then the copy inside the installed package); `--stack FILE` takes any spec file; with"
            " neither, the `cpu` profile is used. Exit codes: [Exit codes](exit-codes.md)."
        ),
        "",
    ]
    out += ["## Commands", "", "| command | what it does |", "|---|---|"]
    for path, _, summary in _commands(parser, ("envbuild",)):
        out.append(f"| [{_code(' '.join(path))}](#{'-'.join(path[1:])}) | {_text(summary)} |")
    out += [
        "",
        _heading(2, "global", "envbuild"),
        "",
        *_usage(parser),
        *_options(parser, include_help=True),
    ]
    for path, sub, summary in _commands(parser, ("envbuild",)):
        out += [
            "",
            _heading(min(len(path), 4), "-".join(path[1:]), " ".join(path)),
            "",
            _text(summary),
            "",
        ]
        if sub.description:
            out += [_text(sub.description), ""]
        out += _usage(sub)
        out += _options(sub, include_help=False)
        if sub.epilog:
            out += ["", "```text", sub.epilog.strip("\n"), "```"]
    return "\n".join(out) + "\n"


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """(command path, its parser, its one-line help) for every subcommand, depth first."""
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action.choices.items():
            found.append(((*path, name), sub, helps.get(name, "")))
            found += _commands(sub, (*path, name))
    return found


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    formatter = argparse.HelpFormatter(prog=parser.prog, width=96)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return ["```text", formatter.format_help().strip("\n"), "```", ""]


def documented_actions(
    parser: argparse.ArgumentParser, include_help: bool
) -> list[argparse.Action]:
    """The arguments the reference lists for ``parser`` (tests/test_docs.py checks them all)."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction)
        and a.help != argparse.SUPPRESS
        and (include_help or not isinstance(a, argparse._HelpAction))
    ]


def _options(parser: argparse.ArgumentParser, *, include_help: bool) -> list[str]:
    actions = documented_actions(parser, include_help)
    if not actions:
        return []
    formatter = argparse.HelpFormatter(prog=parser.prog, width=96)
    rows = ["| argument | meaning |", "|---|---|"]
    for a in actions:
        invocation = formatter._format_action_invocation(a)
        anchor = "-".join(
            [
                *parser.prog.split()[1:],
                a.dest if not a.option_strings else a.option_strings[-1].lstrip("-"),
            ]
        )
        meaning = _text(formatter._expand_help(a) if a.help else "")
        notes = []
        if a.choices and "{" not in invocation:
            notes.append("one of " + ", ".join(_code(str(c)) for c in a.choices))
        if isinstance(a, argparse._AppendAction):
            notes.append("repeatable")
        if a.required and a.option_strings:
            notes.append("required")
        if _shows_default(a):
            notes.append(f"default {_code(str(a.default))}")
        if notes:
            meaning = (meaning + " " if meaning else "") + "(" + "; ".join(notes) + ")"
        rows.append(f"| {_anchor(anchor)}{_code(invocation)} | {meaning} |")
    return [*rows, ""]


def _shows_default(a: argparse.Action) -> bool:
    if a.default in (None, False, [], argparse.SUPPRESS) or not a.option_strings:
        return False
    if isinstance(a, (argparse._StoreTrueAction, argparse._VersionAction, argparse._HelpAction)):
        return False
    return "default" not in (a.help or "").lower()


# ----------------------------------------------------------------------------- the stack spec

# (table, the loader's key list in envbuild/spec/stack.py, the dataclass its values become, heading)
SPEC_SECTIONS = (
    ("", "_TOP_KEYS", "StackSpec", "Top level"),
    ("target", "_TARGET_KEYS", "Target", "[target]"),
    ("layout", "_LAYOUT_KEYS", "Layout", "[layout]"),
    ("abi", "_ABI_KEYS", "ABI", "[abi]"),
    ("abi.overlap", "_OVERLAP_KEYS", "Overlap", "[[abi.overlap]]"),
    ("host", "_HOST_KEYS", "Host", "[host]"),
    ("step", "_STEP_KEYS", "Step", "[[step]]"),
)
# What the code does not say in one place yet. A schema table in spec.py (one row per key: type,
# default, required, one line of help, what is refused), read by both ``check_keys`` and this
# page, would replace these two: the loader states which tables are required only in its checks
# (parse_spec, _parse_abi), and most fields carry no comment.
_REQUIRED_TABLES = {"abi": "required", "step": "required: at least one"}
_SPEC_HELP = {
    "schema": "the spec's format; this envbuild reads schema 1",
    "name": (
        "the stack's name: letters, digits, `.`, `_`, `-`; it names files, folders and image tags"
    ),
    "description": "one line for people",
    "python": 'major.minor of the venv\'s interpreter, such as `"3.13"`',
    "target": "what `envbuild lock` resolves for",
    "layout": "the data root, the venv in it and the `$HOME` links",
    "abi": "the ABI baseline (torch) and what is frozen with it",
    "host": "what `envbuild preflight` expects of the machine",
    "env": (
        "variables added to the env overlay (`<root>/.envbuild/envbuild-env.sh`, sourced by the"
        ' venv\'s `activate`): `NAME = "value"`, or `NAME = { from_env = "NAME" }` to pass the'
        " provisioning process's own value on without writing it anywhere"
    ),
    "step": "the install steps, in order",
    "target.platform": (
        "the wheel platform tag of the hosts, `manylinux_2_<17..40>_<x86_64|aarch64>`"
    ),
    "layout.root": "the data root (`--root` overrides)",
    "abi.package": "the ABI baseline package",
    "abi.version": "its exact version once installed (`import torch; torch.__version__`)",
    "abi.local": "a local tag that must appear in `abi.version`, such as `cu132`",
    "abi.cuda": "`torch.version.cuda`, for a build with CUDA (major.minor)",
    "abi.overlap": "files two distributions may both own, and whose copy must be on disk",
    "abi.overlap.packages": "the distributions (two or more)",
    "abi.overlap.winner": "the one whose files must be on disk (install it last)",
    "host.driver_min": "lowest NVIDIA driver version",
    "host.gpu_count": "number of GPUs",
    "host.gpu_name": "text the GPUs' name must contain, such as `H200`",
    "host.cuda_toolkit": "CUDA toolkit version (`nvcc`), for builds",
    "host.gcc": "lowest gcc version",
    "host.root_min_free_gb": "free space `/` must have",
    "host.data_min_free_gb": "free space the data root must have",
    "step.name": "letters, digits, `.`, `_`, `-`; unique in the spec",
    "step.packages": "PEP 508 requirements (`name @ git+URL@ref` too)",
    "step.extra_index_urls": "more indexes",
    "step.find_links": "folders or pages of wheels",
    "step.pre": "allow pre-releases (`--pre`; uv: `--prerelease allow`)",
    "step.no_deps": (
        "install only the named packages (`--no-deps`); what they declare is left unmet, a warning "
        "(an error with `provision --strict`)"
    ),
    "step.no_build_isolation": "build sdists against the venv (`--no-build-isolation`)",
    "step.upgrade": "`--upgrade`",
    "step.upgrade_strategy": "pip's `--upgrade-strategy`",
    "step.reinstall": "`--force-reinstall` (uv: `--reinstall`)",
    "step.no_index": "only `find_links` (`--no-index`)",
    "step.env": (
        "environment for this step's installer, as `[env]` (a value or `{ from_env = NAME }`)"
    ),
}


def spec_page() -> str:
    spec = importlib.import_module("envbuild.spec.stack")
    comments = _field_comments(Path(inspect.getfile(spec)))
    out = [
        "# Stack spec (`stack.toml`)",
        "",
        GENERATED.format(source="`envbuild/spec/stack.py`: its key lists and dataclasses"),
        "",
        (
            "A stack spec is a TOML file, `lockfiles/<profile>/stack.toml` for `--profile`, any"
            " file for `--stack`. Every key below is one the loader accepts; any other key is"
            ' refused with a "did you mean". Every error names the file and the key path as shown'
            " here (`step[3].no_deps`: the third `[[step]]`, counting from 1)."
        ),
        "",
        _heading(2, "checked", "Checked at load"),
        "",
        _rst(_docstring(spec)),
        "",
    ]
    for table, keys_name, class_name, heading in SPEC_SECTIONS:
        keys: tuple[str, ...] = getattr(spec, keys_name)
        cls = getattr(spec, class_name)
        out += [_heading(2, f"section-{table or 'top'}", heading), ""]
        doc = (
            _docstring(cls)
            if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}(")
            else ""
        )
        if doc:
            out += [_rst(doc), ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        out += [_spec_row(spec, table, key, cls, comments) for key in keys]
        out.append("")
    env_from = spec.EnvFrom
    out += [
        _heading(2, "section-env", "Values from the environment"),
        "",
        _rst(_docstring(env_from)),
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for f in dataclasses.fields(env_from):
        key = "from_env" if f.name == "name" else f.name
        what = (
            "the variable's own name (envbuild passes it on, never copies it)"
            if key == "from_env"
            else "refuse to provision when the variable is unset or empty"
        )
        out.append(
            f"| {_anchor(f'key-env.{key}')}{_code(key)} | {_type(_hints(env_from)[f.name])} | "
            f"{_default(f)} | {_text(what)} |"
        )
    example = (ROOT / "lockfiles" / "cpu" / "stack.toml").read_text(encoding="utf-8").rstrip("\n")
    out += [
        "",
        _heading(2, "example", "An example: the `cpu` profile"),
        "",
        "`lockfiles/cpu/stack.toml`, as committed:",
        "",
        "```toml",
        example,
        "```",
        "",
    ]
    return "\n".join(out)


def spec_keys() -> list[str]:
    """Every key path the loader accepts (``step.no_deps``); tests/test_docs.py checks each is
    documented."""
    spec = importlib.import_module("envbuild.spec.stack")
    out = []
    for table, keys_name, _, _ in SPEC_SECTIONS:
        out += [f"{table}.{k}" if table else k for k in getattr(spec, keys_name)]
    return out


def _spec_row(
    spec: types.ModuleType, table: str, key: str, cls: type, comments: Mapping[tuple[str, str], str]
) -> str:
    path = f"{table}.{key}" if table else key
    hints = _hints(cls)
    field = next((f for f in dataclasses.fields(cls) if f.name in (key, key + "s")), None)
    if key == "schema":
        kind, default = "integer", f"**required**: `{spec.SCHEMA_VERSION}`"
    elif field is None:
        log.warning(
            "stack spec key %r has no field in %s: add one, or teach docs/hooks/reference.py",
            path,
            cls.__name__,
        )
        kind, default = "?", "?"
    else:
        hint = hints[field.name]
        kind = _type(hint)
        if _is_table(hint):
            sub = _section_of(path)
            kind = f"[{kind}](#section-{sub})" if sub else kind
            default = f"**{_REQUIRED_TABLES[path]}**" if path in _REQUIRED_TABLES else "empty"
        else:
            default = _default(field)
    meaning = comments.get((cls.__name__, field.name if field else key)) or ""
    meaning = re.sub(r"^None: ", "not set: ", meaning)  # the code's None is the file's "key absent"
    helptext = _SPEC_HELP.get(path, "")
    words = "; ".join(w for w in (_text(helptext), _text(meaning)) if w)
    if not words:
        log.info("stack spec key %s: no comment in spec.py and no help in the hook", path)
    return f"| {_anchor(f'key-{path}')}{_code(key)} | {kind} | {default} | {words} |"


def _section_of(path: str) -> str | None:
    known = {t for t, *_ in SPEC_SECTIONS if t}
    if path in known:
        return path
    return "env" if path.split(".")[-1] == "env" else None


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def _is_table(hint: Any) -> bool:
    hint = _unoptional(hint)
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint) or origin in (dict, Mapping) or hint in (dict,):
        return True
    if origin is tuple:
        args = typing.get_args(hint)
        return bool(args) and dataclasses.is_dataclass(args[0])
    return False


def _unoptional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _type(hint: Any) -> str:
    hint = _unoptional(hint)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(_code(f'"{v}"') for v in typing.get_args(hint))
    if origin is tuple:
        item, *_ = typing.get_args(hint) or (str,)
        return "array of tables" if dataclasses.is_dataclass(item) else f"array of {_type(item)}s"
    if origin in (dict, Mapping):
        return "table"
    if dataclasses.is_dataclass(hint):
        return "table"
    names = {str: "string", bool: "boolean", int: "integer", float: "number", Path: "path"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "**required**"
    if value is None:
        return "not set"
    return _code(_toml(value))


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _field_comments(path: Path) -> dict[tuple[str, str], str]:
    """{(class, field): the comment beside the field, or the comment lines right above it}."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    trailing: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            trailing[tok.start[0]] = tok.string.lstrip("#").strip()
    out = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            above: list[str] = []
            n = stmt.lineno - 1
            while n >= 1 and lines[n - 1].strip().startswith("#"):
                above.insert(0, lines[n - 1].strip().lstrip("#").strip())
                n -= 1
            words = " ".join([*above, trailing.get(stmt.lineno, "")]).strip()
            if words:
                out[(node.name, stmt.target.id)] = words
    return out


# ----------------------------------------------------------------------------- exit codes


def exit_codes_page() -> str:
    from envbuild import errors

    raised: dict[int, list[str]] = {}
    for name, obj in vars(errors).items():
        if (
            isinstance(obj, type)
            and issubclass(obj, errors.EnvbuildError)
            and obj is not errors.EnvbuildError
        ):
            raised.setdefault(int(obj.exit_code), []).append(name)
    out = [
        "# Exit codes",
        "",
        GENERATED.format(source="`envbuild/errors.py`"),
        "",
        (
            "Every failure envbuild knows has a typed error with one exit code; only"
            " `envbuild.cli.main` turns them into an exit status (`envbuild --help` lists them"
            " too). A message says what to try next."
        ),
        "",
        "| code | name | meaning | raised as |",
        "|---|---|---|---|",
    ]
    for code in errors.ExitCode:
        classes = ", ".join(_code(c) for c in raised.get(int(code), []))
        out.append(
            f"| {_anchor(f'exit-{int(code)}')}{_code(str(int(code)))} | {_code(code.name)} | "
            f"{_text(errors.EXIT_CODE_DOCS.get(code, ''))} | {classes} |"
        )
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- check-lock


# when each kind of own-lock rule runs (``OWN_RULES``' first field), in the page's words
_OWN_RULE_KINDS = {
    "static": "static",
    "--base": "`--base REF`",
    "--online": "`--online`",
    "dry run": "dry run (not with `--offline`)",
}


def own_lock_rules() -> dict[str, tuple[str, str]]:
    """{rule: (when it runs, what it means)}: every rule of envbuild's own locks (``OWN_RULES``; the
    rule family refuses to report one that is not listed there)."""
    findings = importlib.import_module("envbuild.gate.findings")
    return dict(findings.OWN_RULES)


def _docstring_blocks(doc: str) -> list[str]:
    """A docstring cut into list items and paragraphs (continuation lines joined)."""
    blocks: list[str] = []
    current: list[str] = []
    for line in doc.splitlines():
        if not line.strip() or line.startswith("- "):
            if current:
                blocks.append(" ".join(current))
            current = [line.strip()] if line.strip() else []
        else:
            current.append(line.strip())
    if current:
        blocks.append(" ".join(current))
    return blocks


def check_lock_page() -> str:
    findings = importlib.import_module("envbuild.gate.findings")
    output = importlib.import_module("envbuild.gate.output")
    ownlock = importlib.import_module("envbuild.gate.rules.ownlock")
    out = [
        "# check-lock: rules and output",
        "",
        GENERATED.format(
            source=(
                "`envbuild/gate/findings.py` (`RULES`, `OWN_RULES`), `envbuild/gate/output.py` "
                "and `envbuild/gate/rules/ownlock/__init__.py`"
            )
        ),
        "",
        (
            "`envbuild check-lock` has two modes. `check-lock FILE...` judges any lockfile"
            " (uv.lock, pylock.toml, requirements, poetry.lock) per environment it installs: the"
            " [gate](#gate). `check-lock` with `--profile`/`--stack` (or nothing: every profile)"
            " checks envbuild's own per-step locks: [own locks](#own). Either exits 8 on a finding"
            " ([exit codes](exit-codes.md)). How to put it in CI: [the CI gate"
            " tutorial](../tutorials/ci-gate.md)."
        ),
        "",
        _heading(2, "gate", "The gate: any lockfile"),
        "",
        "| rule | what it means |",
        "|---|---|",
    ]
    out += [
        f"| {_anchor(f'gate-{rule}')}{_code(rule)} | {_text(what)} |"
        for rule, what in findings.RULES.items()
    ]
    out += [
        "",
        _heading(2, "output", "Output"),
        "",
        _rst(_docstring(output).split("\n\n", 1)[0]),
        "",
        _heading(2, "json", "JSON (`--json`)"),
        "",
        "One document on stdout:",
        "",
    ]
    schema = re.search(
        r"JSON \(``--json``\), schema \d+::\n\n(.*?)\n\n(?=\S)", inspect.getdoc(output) or "", re.S
    )
    if schema:
        out += ["```text", inspect.cleandoc(schema.group(1)), "```", ""]
    else:
        log.warning("envbuild/gate/output.py's docstring no longer holds the JSON schema block")
    tail = (inspect.getdoc(output) or "").rsplit("\n\n", 1)[-1]
    out += [_rst(tail), ""]
    blocks = _docstring_blocks(inspect.getdoc(ownlock) or "")
    out += [
        _heading(2, "own", "envbuild's own locks"),
        "",
        (
            "Every rule of the check of a stack's own lock (`envbuild.gate.findings.OWN_RULES`),"
            " reported through the same findings and output as the gate's."
        ),
        "",
        "| rule | kind | what it means |",
        "|---|---|---|",
    ]
    for rule, (kind, what) in sorted(own_lock_rules().items()):
        out.append(
            f"| {_anchor(f'own-{rule}')}{_code(rule)} | {_OWN_RULE_KINDS.get(kind, _code(kind))} | "
            f"{_text(what)} |"
        )
    out += ["", "How they run, in `envbuild/gate/rules/ownlock`'s words:", ""]
    out += [f"- {_text(_rst(b))}" for b in blocks if not b.startswith("- ")]
    out.append("")
    return "\n".join(out)


# ----------------------------------------------------------------------------- --json documents


def _json_anchor(command: str) -> str:
    """``plan --lock FILE --json`` -> ``plan-lock-file``: the words of the command line, --json left
    out."""
    words = [w.lstrip("-").rstrip(".").lower() for w in command.split() if w != "--json"]
    return "-".join(w for w in words if w)


def _typeddict_comments(cls: type) -> dict[str, str]:
    """{field: the comment beside it (or right above it)} of a ``TypedDict`` and of the
    ``TypedDict`` classes it extends (their comments, in their own modules; the class's own win)."""
    module = sys.modules[cls.__module__]
    source = Path(inspect.getfile(module))
    node = next(
        (
            n
            for n in ast.parse(source.read_text(encoding="utf-8")).body
            if isinstance(n, ast.ClassDef) and n.name == cls.__name__
        ),
        None,
    )
    out: dict[str, str] = {}
    for base in node.bases if node is not None else []:
        parent = getattr(module, base.id, None) if isinstance(base, ast.Name) else None
        if isinstance(parent, type) and typing.is_typeddict(parent):
            out.update(_typeddict_comments(parent))
    out.update(
        {
            field: words
            for (owner, field), words in _field_comments(source).items()
            if owner == cls.__name__
        }
    )
    return out


def _json_type(hint: Any, objects: list[type], many: bool = False) -> str:
    """A field's type in JSON's words (``many``: the items of an array or the values of an object);
    each ``TypedDict`` met is linked and added to ``objects``."""
    if typing.is_typeddict(hint):
        if hint not in objects:
            objects.append(hint)
        return f"[{hint.__name__}](#obj-{hint.__name__})" + (" objects" if many else "")
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        shown = [_code(f'"{a}"' if isinstance(a, str) else str(a)) for a in args]
        return shown[0] if len(shown) == 1 else "one of " + ", ".join(shown)
    if origin in (typing.Union, types.UnionType):
        kinds = [_json_type(a, objects, many) for a in args if a is not type(None)]
        return " or ".join(kinds + (["nulls" if many else "null"] if type(None) in args else []))
    if origin is list:
        return (
            ("arrays of " if many else "array of ") + _json_type(args[0], objects, True)
            if args
            else "array"
        )
    if origin is dict or hint is dict:
        if not args or args[1] in (Any, object):
            return "objects (any keys and values)" if many else "object (any keys and values)"
        return ("objects of " if many else "object of ") + _json_type(args[1], objects, True)
    if hint in (Any, object):
        return "any JSON values" if many else "any JSON value"
    names = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}
    name = names.get(hint, getattr(hint, "__name__", str(hint)))
    return name + "s" if many else name


def _json_fields(cls: type, objects: list[type]) -> list[str]:
    hints = typing.get_type_hints(cls)
    comments = _typeddict_comments(cls)
    rows = ["| field | type | required | meaning |", "|---|---|---|---|"]
    for name, hint in hints.items():
        if name not in comments:
            log.warning(
                "%s.%s has no comment: write one beside the field (docs/reference/json.md"
                " shows it)",
                cls.__name__,
                name,
            )
        required = "yes" if name in cls.__required_keys__ else "no"
        rows.append(
            f"| {_code(name)} | {_json_type(hint, objects)} | {required} |"
            f" {_text(_rst(comments.get(name, '')))} |"
        )
    return rows


def json_schema(cls: type) -> str | int | None:
    """The ``schema`` value a document's ``TypedDict`` declares (``Literal[...]``), or None."""
    hint = typing.get_type_hints(cls).get("schema")
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Literal else None


def json_page() -> str:
    documents = importlib.import_module("envbuild.commands.documents")
    entries = documents.DOCUMENTS
    intro = [_rst(b) for b in _docstring(documents).split("\n\n")[1:2]]
    out = [
        "# JSON documents (`--json`)",
        "",
        GENERATED.format(
            source="the `TypedDict`s of `envbuild/commands/documents.py` and the modules it names"
        ),
        "",
        (
            "Every command that takes `--json` prints one JSON document on stdout and nothing else"
            " (its progress and notes go to stderr); the exit code is the command's own ([exit"
            " codes](exit-codes.md))."
        ),
        "",
        *(" ".join(p.split()) for p in intro),
        "",
        "| command | schema | document |",
        "|---|---|---|",
    ]
    for e in entries:
        schema = json_schema(e.document)
        shown = (
            _code(f'"{schema}"' if isinstance(schema, str) else str(schema))
            if schema is not None
            else "none: a list"
        )
        out.append(
            f"| [{_code('envbuild ' + e.command)}](#{_json_anchor(e.command)}) | {shown} | "
            f"{_code(e.document.__name__)} |"
        )
    objects: list[type] = []
    for e in entries:
        schema = json_schema(e.document)
        out += ["", _heading(2, _json_anchor(e.command), _code(f"envbuild {e.command}")), ""]
        if e.many:
            out.append(
                f"A JSON list, one [{e.document.__name__}](#obj-{e.document.__name__}) per item,"
                " with no `schema` key: the list it has always been, kept as it is."
            )
            if e.document not in objects:
                objects.append(e.document)
            continue
        out += [
            f"Schema: {_code(repr(schema) if isinstance(schema, int) else str(schema))}. "
            + _text(" ".join(_rst(_docstring(e.document)).split())),
            "",
        ]
        out += _json_fields(e.document, objects)
    out += [
        "",
        _heading(2, "objects", "Objects"),
        "",
        "The objects the documents hold, where their fields are fixed.",
        "",
    ]
    done: set[type] = set()
    while len(done) < len(objects):
        cls = next(c for c in objects if c not in done)
        done.add(cls)
        out += [_heading(3, f"obj-{cls.__name__}", _code(cls.__name__)), ""]
        doc = " ".join(_rst(_docstring(cls)).split()) if cls.__doc__ else ""
        if doc:
            out += [_text(doc), ""]
        out += [*_json_fields(cls, objects), ""]
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # envbuild from this checkout, also where it is not installed
    sys.exit(main())
