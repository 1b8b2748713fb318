"""The generated parts of ``docs/architecture.md``: its file table and its "who prints" rule.

Both are blocks between two HTML comments, refreshed by ``make docs-reference``
(``docs/hooks/reference.py --write`` calls ``refresh``) and checked by
``tests/test_architecture_page.py`` (and by ``reference.py --check``), as the stage table is.
Nothing in them is written by hand:

- the file table (``files_table``): one row per package or module at the top of ``envbuild/``, in
  the order of the stages (``stages.py``'s ``STAGE_OF``). Its "does" column is the first
  sentence of the package's ``__init__.py`` docstring, then each module under it with the first
  sentence of its docstring; its "owns on disk" column is the package's ``OWNS`` tuple (in its
  ``__init__.py``), or, for a module at the top, its entry of ``TOP_LEVEL_OWNS`` in
  ``envbuild/__init__.py``. Docstrings and ``OWNS`` write code as ````code````, which becomes
  Markdown's
  ```code```.
- the "who prints" rule (``prints_block``): only the modules of ``PRINT_ALLOWED`` print; a scan of
  every module's syntax tree (``printing``) finds what prints anywhere else, and each module it
  finds must be one of ``PRINT_EXCEPTIONS``, which says why it may. The page lists them.

Everything here reads source files (``ast``), never imports envbuild: it runs in ``mkdocs serve``
too.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "envbuild"
PAGE = ROOT / "docs" / "architecture.md"

FILES_OPEN = (
    "<!-- files: generated from envbuild/ (module docstrings, OWNS) by `make docs-reference` -->\n"
)
FILES_CLOSE = "<!-- end files -->"
PRINTS_OPEN = (
    "<!-- prints: generated from docs/hooks/architecture.py (a scan of envbuild/) by `make"
    " docs-reference` -->\n"
)
PRINTS_CLOSE = "<!-- end prints -->"

# The front ends: a module named here, or any module of a package named here, may print.
PRINT_ALLOWED = ("envbuild.cli", "envbuild.commands")

# Modules outside PRINT_ALLOWED that print, and why they may. The test fails on a module that prints
# and is not here, and on an entry here whose module no longer prints: the list only shrinks.
PRINT_EXCEPTIONS = {
    "envbuild.proof.diststep.agent": (
        "torchrun itself, run by the target venv's python as a child process (no envbuild import):"
        " it prints a ``sys.exit`` message and an uncaught exception as Python would, on stderr,"
        " and flushes both streams before it leaves with ``os._exit``; ``proof.diststep.launch``"
        " logs them"
    ),
    "envbuild.proof.diststep.worker": (
        "one torchrun worker in the target venv (no envbuild import): rank 0 says the result on"
        " stdout as an ``ENVBUILD_DIST_RESULT`` line, which ``proof.diststep.launch`` reads; both"
        " streams are flushed before a gloo run leaves with ``os._exit``"
    ),
    "envbuild.provision.pycwalk": (
        "the bytecode walk, run by the target venv's python as a child process (no envbuild"
        " import): one JSON line on stdout (what it found and compiled), which"
        " ``provision.warmup`` reads, and its usage on stderr for a bad command line"
    ),
    "envbuild.proof.inventory": (
        "a script the venv's own interpreter runs (no envbuild, no torch import): it hands the"
        " inventory back to ``proof.receipt.inventory`` as one JSON document on stdout"
    ),
    "envbuild.proof.smoke.checks": (
        "the smoke checks' script, run by the target venv's python as a child process (no envbuild"
        " import): it flushes both streams before it leaves with ``os._exit`` (the torch.compile"
        " check's process lets go of them first, so the worker's end does not wait for it)"
    ),
    "envbuild.proof.smoke.smoke_main": (
        "the smoke checks' run, in the target venv's python (no envbuild import): each result is"
        " one ``ENVBUILD_SMOKE`` line on stdout, which ``proof.smoke`` reads as the checks"
        " finish; a usage error goes to stderr"
    ),
    "envbuild.proof.smoke.load": (
        "the planted competing load of ``ENVBUILD_SMOKE_LOAD_GPUS``, run by the target venv's"
        " python as a child process (no envbuild import): it says ``ENVBUILD_LOAD ready`` on stdout"
        " once its matrix products run, which ``proof.smoke.gpus`` waits for"
    ),
}

# What the scan counts as printing, by the qualified name a call or attribute resolves to (through
# the module's imports: ``from rich.console import Console`` makes ``Console(...)``
# ``rich.console.Console``).
PRINT_CALLS = {
    "print": "`print()`",
    "pprint.pprint": "`pprint.pprint`",
    "pprint.pp": "`pprint.pp`",
    "logging.basicConfig": "`logging.basicConfig` (a handler on stderr)",
    "logging.StreamHandler": "`logging.StreamHandler`",
    "faulthandler.enable": "`faulthandler` (stderr)",
    "faulthandler.dump_traceback": "`faulthandler` (stderr)",
}
PRINT_PREFIXES = {
    "traceback.print_": "`traceback.print_*`",
}
SYS_STREAMS = ("stdout", "stderr", "__stdout__", "__stderr__", "excepthook", "displayhook")
RICH_PRINTERS = (
    "Console",
    "Live",
    "Progress",
    "Status",
    "get_console",
    "print",
    "print_json",
    "inspect",
)
OS_WRITE_FDS = (1, 2)


# ----------------------------------------------------------------------------- modules and
# docstrings


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def docstring(path: Path) -> str:
    return ast.get_docstring(_tree(path)) or ""


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph: up to the first ``.``, ``?`` or ``!``
    followed by a space, outside a ````code```` span (the whole paragraph when there is none)."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    out = []
    for i, part in enumerate(re.split(r"(``.+?``)", paragraph)):
        if i % 2 == 0 and (m := re.search(r"[.?!](?=\s)", part)):
            out.append(part[: m.end()])
            break
        out.append(part)
    return "".join(out).strip()


# Words a docstring may start with that stay capitalised in a table cell.
PROPER = {"Python", "PyPI", "PyTorch", "Modal", "Ansible", "Docker", "GitHub", "NVIDIA", "CUDA"}


def _uncapitalised(text: str) -> str:
    """A sentence as the tail of a cell entry: "The one client" -> "the one client"."""
    m = re.match(r"[A-Z][a-z]*\b", text)
    if m and m.group(0) not in PROPER:
        return text[0].lower() + text[1:]
    return text


def _code(s: str) -> str:
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def cell(text: str) -> str:
    """Docstring text as one table cell of Markdown: ````code```` as a code span, the rest escaped
    (``<root>``, ``{a,b}``, ``[target]``, ``|``). A ``|`` inside code splits it into two spans with
    an escaped ``|`` between: a code host's tables split a row at a pipe even inside a code span."""
    out = []
    for i, part in enumerate(re.split(r"``(.+?)``", text)):
        if i % 2:
            out.append("\\|".join(_code(piece) for piece in part.split("|")))
        else:
            part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            out.append(re.sub(r"([\\\[\]{}|])", r"\\\1", part))
    return "".join(out)


# ----------------------------------------------------------------------------- the file table


def _layers() -> ModuleType:
    """``stages.py``: the stages and which stage each package or module is in."""
    spec = importlib.util.spec_from_file_location(
        "envbuild_docs_stages_for_architecture", Path(__file__).with_name("stages.py")
    )
    assert spec is not None and spec.loader is not None
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    return layers


def top_level_units() -> list[Path]:
    """Every package (its folder) and module at the top of ``envbuild/``, in the stages' order."""
    layers = _layers()
    order = list(layers.STAGE_OF)
    units = [
        p
        for p in sorted(PACKAGE.iterdir())
        if (p.is_dir() and (p / "__init__.py").is_file()) or (p.suffix == ".py" and p.is_file())
    ]

    def key(unit: Path) -> tuple[int, int, str]:
        name = _unit_module(unit)
        stage = layers.stage_of(name) or layers.STAGE_OF.get(name)
        return (
            layers.STAGES.index(stage) if stage in layers.STAGES else len(layers.STAGES),
            order.index(name) if name in order else len(order),
            unit.name,
        )

    return sorted(units, key=key)


def _unit_module(unit: Path) -> str:
    return (
        "envbuild"
        if unit.name == "__init__.py"
        else f"envbuild.{unit.stem if unit.is_file() else unit.name}"
    )


def _literal(path: Path, name: str) -> object:
    """The value of the top-level assignment ``name = <literal>`` in ``path``, or None."""
    for node in _tree(path).body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            )
        )
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            return ast.literal_eval(node.value)
    return None


def _strings(value: object) -> tuple[str, ...] | None:
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return value
    return None


def owns() -> dict[str, tuple[str, ...] | None]:
    """{package folder or module file name at the top of envbuild/: what it owns on disk}, None
    where nothing (or no tuple of strings) is declared."""
    top = _literal(PACKAGE / "__init__.py", "TOP_LEVEL_OWNS")
    top = top if isinstance(top, dict) else {}
    out: dict[str, tuple[str, ...] | None] = {}
    for unit in top_level_units():
        if unit.is_dir():
            out[unit.name + "/"] = _strings(_literal(unit / "__init__.py", "OWNS"))
        else:
            out[unit.name] = _strings(top.get(unit.stem))
    return out


def _shown(unit: Path) -> str:
    return f"`{unit.name}/`" if unit.is_dir() else f"`{unit.name}`"


def _entries(package: Path) -> list[str]:
    """Each module under ``package`` (its sub-packages' ``__init__.py`` as the folder), with the
    first sentence of its docstring."""
    paths = sorted(
        (
            p
            for p in package.rglob("*.py")
            if "__pycache__" not in p.parts and p != package / "__init__.py"
        ),
        key=lambda p: tuple(
            "" if part == "__init__.py" else part for part in p.relative_to(package).parts
        ),
    )
    out = []
    for path in paths:
        rel = path.relative_to(package)
        name = f"{rel.parent.as_posix()}/" if path.name == "__init__.py" else rel.as_posix()
        out.append(f"`{name}` {cell(_uncapitalised(first_sentence(docstring(path))))}")
    return out


def files_table() -> str:
    """The table of docs/architecture.md's "Stages and the files they own"."""
    layers = _layers()
    declared = owns()
    rows = ["| stage | package or module | does | owns on disk |", "| --- | --- | --- | --- |"]
    last = None
    for unit in top_level_units():
        module = _unit_module(unit)
        stage = layers.stage_of(module) or layers.STAGE_OF.get(module) or "?"
        main = unit / "__init__.py" if unit.is_dir() else unit
        does = [cell(first_sentence(docstring(main)))]
        if unit.is_dir():
            does += _entries(unit)
        what = declared[unit.name + "/" if unit.is_dir() else unit.name]
        owned = (
            "**not declared**" if what is None else "<br>".join(cell(w) for w in what) or "nothing"
        )
        shown_stage = (
            f"{layers.STAGES.index(stage) + 1}. {stage}"
            if stage != last and stage in layers.STAGES
            else ""
        )
        last = stage
        rows.append(f"| {shown_stage} | {_shown(unit)} | {'<br>'.join(does)} | {owned} |")
    return "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------- who prints


def _qualified(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` for a name or attribute chain, its first name resolved through the imports."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(attrs)])


def _aliases(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def printing(path: Path) -> dict[str, int]:
    """{what prints: the first line it is on} in one module (empty: it prints nothing)."""
    tree = _tree(path)
    aliases = _aliases(tree)
    found: dict[str, int] = {}

    def add(what: str, line: int) -> None:
        found[what] = min(found.get(what, line), line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = _qualified(node, aliases)
            if (
                name
                and name.split(".")[0] == "sys"
                and len(name.split(".")) > 1
                and name.split(".")[1] in SYS_STREAMS
            ):
                add(f"`sys.{name.split('.')[1]}`", node.lineno)
        if (
            isinstance(node, ast.Name)
            and aliases.get(node.id, "").split(".")[:1] == ["sys"]
            and aliases[node.id].split(".")[-1] in SYS_STREAMS
        ):
            add(f"`{aliases[node.id]}`", node.lineno)
        if not isinstance(node, ast.Call):
            continue
        name = _qualified(node.func, aliases)
        if name is None:
            continue
        if name in PRINT_CALLS:
            add(PRINT_CALLS[name], node.lineno)
        for prefix, what in PRINT_PREFIXES.items():
            if name.startswith(prefix):
                add(what, node.lineno)
        if name.split(".")[0] == "rich" and name.split(".")[-1] in RICH_PRINTERS:
            add(f"`rich` (`{name.split('.')[-1]}`)", node.lineno)
        if (
            name == "os.write"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in OS_WRITE_FDS
        ):
            add("`os.write` to fd 1 or 2", node.lineno)
    return found


def printers() -> dict[str, dict[str, int]]:
    """{module: what it prints with} for every module of envbuild/ that prints."""
    return {module_name(p): found for p in modules() if (found := printing(p))}


def allowed(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in PRINT_ALLOWED)


def _path_of(module: str) -> str:
    """``envbuild.commands`` -> ``commands/``, ``envbuild.cli`` -> ``cli.py``: as the page names
    them."""
    rel = module.removeprefix("envbuild.").replace(".", "/")
    return f"{rel}/" if (PACKAGE / rel).is_dir() else f"{rel}.py"


def rule() -> str:
    """The rule in words, as the page's first paragraph and its "Who prints" section state it."""
    shown = [f"`{_path_of(m)}`" for m in PRINT_ALLOWED]
    return (
        "only "
        + (" and ".join(shown) if len(shown) <= 2 else ", ".join(shown[:-1]) + " and " + shown[-1])
        + " print"
    )


def prints_block() -> str:
    """The "who prints" section's generated part: the rule, what counts, and the exceptions."""
    counted = [
        *dict.fromkeys(PRINT_CALLS.values()),
        *PRINT_PREFIXES.values(),
        *(f"`sys.{s}`" for s in SYS_STREAMS),
        "`rich`'s " + ", ".join(f"`{r}`" for r in RICH_PRINTERS),
        "`os.write` to fd 1 or 2",
    ]
    found = printers()
    lines = [
        (
            f"The rule: {rule()}. Library code reports through `events.emit`, and the front ends"
            " draw it."
        ),
        "",
        "What counts as printing (`docs/hooks/architecture.py` scans every module's syntax tree for"
        " it): "
        + ", ".join(counted)
        + ". Code handed to another interpreter as a string (`python -c`) prints "
        "in that process, whose output its caller captures.",
        "",
        (
            "The modules outside the front ends that print, and why they may (`PRINT_EXCEPTIONS`;"
            " `tests/test_architecture_page.py` fails on any other, and on one that no longer"
            " prints):"
        ),
        "",
        "| module | prints with | why |",
        "| --- | --- | --- |",
    ]
    for module in sorted(PRINT_EXCEPTIONS):
        what = ", ".join(sorted(found.get(module, {}))) or "nothing (remove it)"
        lines.append(f"| `{_path_of(module)}` | {what} | {cell(PRINT_EXCEPTIONS[module])} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the page


def _replace(text: str, begin: str, end: str, body: str) -> str:
    if begin not in text:
        return text
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + body + end + tail


def refresh(text: str) -> str:
    """``text`` with its file table and "who prints" block (where it has them) as the code makes
    them now."""
    if FILES_OPEN in text:
        text = _replace(text, FILES_OPEN, FILES_CLOSE, files_table())
    if PRINTS_OPEN in text:
        text = _replace(text, PRINTS_OPEN, PRINTS_CLOSE, prints_block())
    return text


def block(text: str, begin: str, end: str) -> str | None:
    """What a page holds between two markers (None: it lacks them)."""
    if begin not in text or end not in text.split(begin, 1)[1]:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0]
