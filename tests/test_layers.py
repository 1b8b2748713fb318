"""Imports run downhill: no module of an earlier stage imports a later one.

The stages, in order (docs/architecture.md): the foundation everything may use, then
spec -> plan -> installer -> guard -> lock -> gate -> wheelhouse -> proof, then the
orchestrators and front ends (provision, images, commands, cli) that may import anything.
A module may import its own stage and every stage before it. Every import counts, the ones
inside functions too: a lazy import is fine for start-up time, never to hide a dependency that
runs back up. Type-only imports (``if TYPE_CHECKING:``) count as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "envbuild"

STAGES = ("foundation", "spec", "plan", "installer", "guard", "lock", "gate", "wheelhouse", "proof", "top")

# Module or package -> stage; a module takes the entry of its nearest listed parent package.
STAGE_OF = {
    # foundation: errors, events, I/O, TOML, quoting, the network and the one runner, the index
    # client, the ABI-label parser and the wheelhouse's provenance record; they import no stage
    "envbuild": "foundation",  # the package itself (__version__)
    "envbuild.errors": "foundation",
    "envbuild.events": "foundation",
    "envbuild._io": "foundation",
    "envbuild._toml": "foundation",
    "envbuild.quoting": "foundation",
    "envbuild.net": "foundation",
    "envbuild.run": "foundation",
    "envbuild.metacache": "foundation",
    "envbuild.index": "foundation",
    "envbuild.abitag": "foundation",
    "envbuild.wheel_provenance": "foundation",
    "envbuild.wheeltags": "foundation",
    "envbuild.stepfile": "foundation",  # the step-file reader: the plan writes step files, the lock makes them  # which wheels a target takes; what a wheelhouse holds
    "envbuild.spec": "spec",
    "envbuild.plan": "plan",
    "envbuild.installer": "installer",
    "envbuild.layout": "installer",  # the data root and $HOME links the venv goes into
    "envbuild.abi": "guard",
    "envbuild.lock": "lock",
    "envbuild.gate": "gate",  # judges envbuild's own locks too (rules.ownlock reads lock.model)
    "envbuild.wheelhouse": "wheelhouse",
    "envbuild.host": "proof",  # preflight: the host's part of the proof (receipts record it)
    "envbuild.proof": "proof",
    "envbuild.provision": "top",
    "envbuild.fromlock": "top",  # provision --lock: the gate chooses, provision installs
    "envbuild.images": "top",
    "envbuild.commands": "top",
    "envbuild.cli": "top",
    "envbuild.__main__": "top",
}

# (importer, imported) -> why it is allowed for now. Each one is a debt with its fix written down;
# the test fails when one is no longer needed, so the list only shrinks.
KNOWN_UPHILL = {
}


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
            found |= {(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "envbuild"}
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
            found |= {(f"{target}.{a.name}", node.lineno) for a in node.names if _exists(f"{target}.{a.name}")}
    return found


def _stage(module: str) -> str | None:
    if module in STAGE_OF:
        return STAGE_OF[module]
    parts = module.split(".")
    for n in range(len(parts) - 1, 1, -1):  # never the bare package: a new top-level module needs a stage
        if ".".join(parts[:n]) in STAGE_OF:
            return STAGE_OF[".".join(parts[:n])]
    return None


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_stage() -> None:
    missing = [_module_name(p) for p in _modules() if _stage(_module_name(p)) is None]
    assert not missing, f"give these modules a stage in tests/test_layers.py STAGE_OF: {missing}"


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
        for (a, b), lines in uphill.items() if (a, b) not in KNOWN_UPHILL
    }
    assert not new, ("imports that run back up a stage (pass the value down from the caller, or move the "
                     "shared piece below both):\n" + "\n".join(sorted(new)))
    fixed = sorted(f"{a} -> {b}" for (a, b) in KNOWN_UPHILL if (a, b) not in uphill)
    assert not fixed, f"no longer uphill, remove from KNOWN_UPHILL in tests/test_layers.py: {fixed}"


def test_the_guard_imports_nothing_of_the_wheelhouse() -> None:
    """The ABI guard reads the wheelhouse's provenance record through envbuild.wheel_provenance."""
    imported = {m for m, _ in _imports(PACKAGE / "abi.py")}
    assert not {m for m in imported if m.startswith("envbuild.wheelhouse")}
    assert "envbuild.wheel_provenance" in imported
