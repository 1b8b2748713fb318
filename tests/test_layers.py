"""Imports run downhill: no module of an earlier stage imports a later one.

The stages, in order (``STAGES_DOC`` below, shown in docs/architecture.md): the foundation
everything may use, then spec -> plan -> installer -> guard -> stacklock -> gate -> wheelhouse ->
proof, then the orchestrators (provision, projectlock, images), then the front ends (commands, cli)
that may import anything.
A module may import its own stage and every stage before it. Every import counts, the ones
inside functions too: a lazy import is fine for start-up time, never to hide a dependency that
runs back up. Type-only imports (``if TYPE_CHECKING:``) count as well.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "envbuild"


def _load_stages() -> ModuleType:
    """docs/hooks/stages.py: the one stage list (the docs show it; these tests hold imports to
    it)."""
    spec = importlib.util.spec_from_file_location(
        "envbuild_docs_stages", PACKAGE.parent / "docs" / "hooks" / "stages.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_STAGES = _load_stages()
STAGES_DOC = _STAGES.STAGES_DOC
STAGES: tuple[str, ...] = _STAGES.STAGES
STAGE_OF: dict[str, str] = _STAGES.STAGE_OF
stage_table = _STAGES.stage_table
_stage = _STAGES.stage_of

MAX_TOP_LEVEL_MODULES = 12  # __init__ and __main__ count: a new module joins a stage's package

# (importer, imported) -> why it is allowed for now. Each one is a debt with its fix written down;
# the test fails when one is no longer needed, so the list only shrinks.
KNOWN_UPHILL: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _exists(module: str) -> bool:
    base = PACKAGE.parent.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports(path: Path) -> set[tuple[str, int]]:
    """Every envbuild module ``path`` imports, anywhere in the file, with its line."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {
                (a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "envbuild"
            }
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "envbuild":
                continue
            found.add((target, node.lineno))
            # `from envbuild import abi`: the submodule is what is imported
            found |= {
                (f"{target}.{a.name}", node.lineno)
                for a in node.names
                if _exists(f"{target}.{a.name}")
            }
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_stage() -> None:
    missing = [_module_name(p) for p in _modules() if _stage(_module_name(p)) is None]
    assert not missing, f"give these modules a stage in docs/hooks/stages.py STAGE_OF: {missing}"


def test_imports_run_downhill() -> None:
    uphill: dict[tuple[str, str], list[int]] = {}
    for path in _modules():
        importer = _module_name(path)
        mine = _stage(importer)
        if mine is None:
            continue  # reported by test_every_module_has_a_stage
        for imported, line in _imports(path):
            theirs = _stage(imported)
            if theirs is not None and STAGES.index(theirs) > STAGES.index(mine):
                uphill.setdefault((importer, imported), []).append(line)
    new = {
        f"{a} ({_stage(a)}, line {', '.join(map(str, sorted(lines)))}) imports {b} ({_stage(b)})"
        for (a, b), lines in uphill.items()
        if (a, b) not in KNOWN_UPHILL
    }
    assert not new, (
        "imports that run back up a stage (pass the value down from the caller, or move the "
        "shared piece below both):\n" + "\n".join(sorted(new))
    )
    fixed = sorted(f"{a} -> {b}" for (a, b) in KNOWN_UPHILL if (a, b) not in uphill)
    assert not fixed, f"no longer uphill, remove from KNOWN_UPHILL in tests/test_layers.py: {fixed}"


def test_the_guard_imports_nothing_of_the_wheelhouse() -> None:
    """The ABI guard reads the wheelhouse's build record through envbuild.guard.buildrecord."""
    imported = {m for p in (PACKAGE / "guard").glob("*.py") for m, _ in _imports(p)}
    assert not {m for m in imported if m.startswith("envbuild.wheelhouse")}
    assert "envbuild.guard.buildrecord" in imported


def test_the_stages_are_listed_once() -> None:
    assert len(set(STAGES)) == len(STAGES)
    assert set(STAGE_OF.values()) == set(STAGES), (
        "a stage without a module, or a module of no stage"
    )


def _unit(module: str) -> str:
    """The top-level module or package of ``module``: the unit the cycle check looks at."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_import_cycle_between_top_level_units() -> None:
    """No two top-level modules or packages import each other, directly or through others, the
    front ends included: a cycle would make the stage order a lie."""
    edges: dict[str, set[str]] = {}
    for path in _modules():
        importer = _module_name(path)
        for imported, _ in _imports(path):
            if _exists(imported) and _unit(imported) != _unit(importer):
                edges.setdefault(_unit(importer), set()).add(_unit(imported))

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted(
        f"{a} <-> {b}" for a, targets in edges.items() for b in targets if a < b and a in reach(b)
    )
    assert not cycles, f"import cycles between envbuild's modules: {cycles}"


def _module_edges() -> dict[str, set[str]]:
    """Module -> the envbuild modules it imports, anywhere in the file. ``from envbuild.gate import
    check`` (a submodule) is an edge to ``envbuild.gate.check``; ``from envbuild.gate import
    check_file`` (a name of the package's face) is an edge to ``envbuild.gate`` itself."""
    edges: dict[str, set[str]] = {}
    for path in _modules():
        me = _module_name(path)
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: set[str] = set()
            if isinstance(node, ast.Import):
                targets = {a.name for a in node.names if a.name.split(".")[0] == "envbuild"}
            elif isinstance(node, ast.ImportFrom):
                base = (
                    package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    if node.level
                    else []
                )
                target = (
                    ".".join(base + ([node.module] if node.module else []))
                    if node.level
                    else node.module or ""
                )
                if target.split(".")[0] != "envbuild":
                    continue
                subs = {f"{target}.{a.name}" for a in node.names if _exists(f"{target}.{a.name}")}
                targets = subs | ({target} if len(subs) < len(node.names) else set())
            edges.setdefault(me, set()).update(t for t in targets if _exists(t) and t != me)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_no_import_cycle_between_modules_faces_included() -> None:
    """No module imports another that imports it back, directly or through others, package faces
    (``__init__``) and the front ends (``commands/``) included. The check above looks at
    top-level packages; this one at every module inside them."""
    cycles = _cycles(_module_edges())
    assert not cycles, (
        "import cycles between modules (move the shared piece below both): "
        + "; ".join(" <-> ".join(c) for c in cycles)
    )


def test_the_cycle_check_sees_a_circle_through_a_package_face() -> None:
    edges = {
        "envbuild.gate": {"envbuild.gate.check"},
        "envbuild.gate.check": {"envbuild.gate"},
        "envbuild.index.a": {"envbuild.index.b"},
        "envbuild.index.b": {"envbuild.index.c"},
        "envbuild.index.c": {"envbuild.index.a"},
        "envbuild.spec": set(),
    }
    assert sorted(_cycles(edges)) == [
        ["envbuild.gate", "envbuild.gate.check"],
        ["envbuild.index.a", "envbuild.index.b", "envbuild.index.c"],
    ]


def test_at_most_12_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(top)} modules at the top of envbuild/ (at most {MAX_TOP_LEVEL_MODULES}): {top}; "
        "put the new one in the package of its stage"
    )


def test_no_two_public_classes_share_a_name() -> None:
    """A class name says which thing it is: ``ParsedLock`` (any lockfile, read by the gate) is not
    ``stacklock.model.Lock`` (envbuild's lock.json)."""
    where: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(_module_name(path))
    shared = {name: mods for name, mods in where.items() if len(mods) > 1}
    assert not shared, (
        f"public classes of one name in two modules (rename one to say what it is): {shared}"
    )


@pytest.mark.parametrize("name", ["architecture.md", "development.md"])
def test_the_pages_show_these_stages(name: str) -> None:
    """docs/architecture.md and docs/development.md list the stages' modules from here, never by
    hand."""
    page = (PACKAGE.parent / "docs" / name).read_text(encoding="utf-8")
    begin, end = (
        "<!-- stages: generated from docs/hooks/stages.py by `make docs-reference` -->\n",
        "<!-- end stages -->",
    )
    assert begin in page and end in page, f"docs/{name} lost its stage table markers"
    shown = page.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    assert shown == stage_table(), f"docs/{name}'s stage table is stale: run `make docs-reference`"


def test_no_module_imports_its_own_package_face() -> None:
    """A package's face (``__init__``) imports its modules; a module that took a name from the face
    back (``from envbuild.gate import check_file`` inside ``envbuild/gate/``) would close a circle
    through it, which the cycle check above does not see (it looks at top-level units). Importing a
    submodule (``from envbuild.gate import accept``) names the submodule, not the face: allowed."""
    bad = []
    for path in _modules():
        if path.name == "__init__.py":
            continue
        module = _module_name(path)
        parents = {".".join(module.split(".")[:n]) for n in range(2, len(module.split(".")))}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in parents:
                names = [a.name for a in node.names if not _exists(f"{node.module}.{a.name}")]
                if names:
                    bad.append(
                        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} takes {', '.join(names)}"
                        f" from {node.module}"
                    )
    assert not bad, "modules that import their own package's face: " + "; ".join(sorted(bad))


def test_no_command_imports_the_console_script() -> None:
    """``envbuild.cli`` is the console script on top of ``commands/``; a command that imported it
    would close a circle through the parser that imports every command."""
    bad = sorted(
        f"{_module_name(p)}:{line}"
        for p in _modules()
        if _module_name(p).startswith("envbuild.commands")
        for m, line in _imports(p)
        if m == "envbuild.cli"
    )
    assert not bad, (
        "commands that import envbuild.cli (use envbuild.commands.parser): " + ", ".join(bad)
    )


def test_the_cycle_check_sees_the_old_circle_between_two_commands() -> None:
    """The circle this tree had: commands.lockfile (the --lock branches) imported commands.docker,
    which imported it back; both front ends, and still a circle."""
    edges = {
        "envbuild.commands.lockfile": {"envbuild.commands.docker", "envbuild.commands.common"},
        "envbuild.commands.docker": {"envbuild.commands.lockfile"},
        "envbuild.commands.common": set(),
    }
    assert _cycles(edges) == [["envbuild.commands.docker", "envbuild.commands.lockfile"]]
