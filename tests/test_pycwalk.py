"""``envbuild/provision/pycwalk.py``: the bytecode a first import writes, found by reading the
import statements and written ahead of it.

The oracle is always a real import in a real interpreter: which files it loads (against what the
walk finds), and which ``.pyc`` it writes or rewrites after the walk (none: it trusts every one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envbuild.provision import pycwalk, warmup

TAG = sys.implementation.cache_tag
WALK = str(warmup.WALK_SCRIPT)

# A package with every kind of statement the walk reads, and the imports it must leave out
FILES = {
    "pkg/__init__.py": (
        '"""Docstring: import pkg.never_doc is only words here."""\n'
        "from __future__ import annotations\n"
        "import os, sys as _sys\n"
        "from typing import TYPE_CHECKING\n"
        "from . import plain\n"
        "from .sub import (\n"
        "    deep,  # a submodule named in a parenthesised list\n"
        "    VALUE,\n"
        ")\n"
        "from pkg.alias import thing as other\n"
        "import pkg.dotted.leaf\n"
        "try:\n"
        "    from . import in_try\n"
        "except ImportError:\n"
        "    from . import in_except\n"
        "if _sys.version_info >= (3,):\n"
        "    from . import in_if\n"
        "if TYPE_CHECKING:\n"
        "    from . import typing_only\n"
        "else:\n"
        "    from . import in_else\n"
        "def later(\n"
        "    x: int,\n"
        ") -> None:\n"
        "    from . import in_def\n"
        "class Holder:\n"
        "    from . import in_class\n"
        "    def method(self):\n"
        "        import pkg.in_method\n"
        "from .relative import *\n"
    ),
    "pkg/plain.py": "P = 1\n",
    "pkg/sub/__init__.py": "VALUE = 2\n",
    "pkg/sub/deep.py": "from ..plain import P\nD = P\n",
    "pkg/alias.py": "thing = 3\n",
    "pkg/dotted/__init__.py": "",
    "pkg/dotted/leaf.py": "L = 4\n",
    "pkg/in_try.py": "T = 5\n",
    "pkg/in_except.py": "E = 6\n",  # not loaded (the try works): found anyway, harmless
    "pkg/in_if.py": "I = 7\n",
    "pkg/typing_only.py": "raise RuntimeError('never imported')\n",
    "pkg/in_else.py": "X = 8\n",
    "pkg/in_def.py": "raise RuntimeError('never imported')\n",
    "pkg/in_class.py": "C = 9\n",
    "pkg/in_method.py": "raise RuntimeError('never imported')\n",
    "pkg/relative.py": "from . import plain as _p\nR = 10\n",
    "pkg/never.py": "N = 11\n",
    "pkg/never_doc.py": "N = 12\n",
}
# what `import pkg` loads, and what the walk finds beside it (the except branch it cannot rule out)
LOADED = {
    "pkg/__init__.py",
    "pkg/plain.py",
    "pkg/sub/__init__.py",
    "pkg/sub/deep.py",
    "pkg/alias.py",
    "pkg/dotted/__init__.py",
    "pkg/dotted/leaf.py",
    "pkg/in_try.py",
    "pkg/in_if.py",
    "pkg/in_else.py",
    "pkg/in_class.py",
    "pkg/relative.py",
}


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    for rel, text in FILES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text, encoding="utf-8")
    return site


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _loaded(site: Path, module: str, python: str = sys.executable) -> set[str]:
    """The files of ``site`` a real ``import module`` loads."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import " + module + "\n"
        "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))"
    )
    out = subprocess.run(
        [python, "-S", "-c", code, str(site)],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    root = str(site.resolve()) + os.sep
    files = [os.path.realpath(f) for f in json.loads(out.stdout.splitlines()[-1]) if f]
    return {f[len(root) :] for f in files if f.startswith(root) and f.endswith(".py")}


def _pycs(site: Path) -> dict[str, int]:
    return {str(p.relative_to(site)): p.stat().st_ino for p in site.rglob("*.pyc")}


def test_the_walk_finds_what_the_import_loads_in_its_order(tmp_path: Path) -> None:
    site = _site(tmp_path)
    assert _loaded(site, "pkg") == LOADED
    found = [str(Path(p).relative_to(site)) for p in pycwalk.order(str(site), "pkg")]
    assert set(found) == LOADED | {"pkg/in_except.py"}
    # the import's order: a package before its modules, a module's own imports before the next
    # statement of its importer
    assert found.index("pkg/__init__.py") == 0
    assert found.index("pkg/sub/__init__.py") < found.index("pkg/sub/deep.py")
    assert found.index("pkg/sub/deep.py") < found.index("pkg/alias.py")
    assert found.index("pkg/dotted/__init__.py") < found.index("pkg/dotted/leaf.py")


@pytest.mark.parametrize("reverse", [False, True])
def test_the_import_trusts_every_file_the_walk_wrote(tmp_path: Path, reverse: bool) -> None:
    site = _site(tmp_path)
    argv = [sys.executable, "-S", WALK, str(site), "pkg", *(["--reverse"] if reverse else [])]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=_env())
    assert json.loads(out.stdout) == {"files": len(LOADED) + 1, "compiled": len(LOADED) + 1}
    written = _pycs(site)
    assert {
        rel.split("/__pycache__/")[0] + "/" + Path(rel).name.split(".")[0] + ".py"
        for rel in written
    } == LOADED | {"pkg/in_except.py"}
    assert all(Path(rel).name.endswith(f".{TAG}.pyc") for rel in written)
    _loaded(site, "pkg")  # the real import, bytecode on
    after = _pycs(site)
    assert after == written  # nothing new, nothing rewritten (same inode: trusted as it was)
    # a second walk finds them all there and compiles nothing
    again = subprocess.run(argv, capture_output=True, text=True, check=True, env=_env())
    assert json.loads(again.stdout)["compiled"] == 0


def test_a_source_the_walk_cannot_compile_is_left_to_the_import(tmp_path: Path) -> None:
    site = _site(tmp_path)
    (site / "pkg" / "plain.py").write_bytes(b"P = (\n")  # a syntax error: the import fails too
    out = subprocess.run(
        [sys.executable, "-S", WALK, str(site), "pkg"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    assert json.loads(out.stdout) == {"files": len(LOADED) + 1, "compiled": len(LOADED)}
    assert not list(site.glob("pkg/__pycache__/plain.*"))


def test_sigterm_stops_it_after_the_file_it_writes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "big").mkdir(parents=True)
    n = 2000
    body = "".join(f"def f{i}(x):\n    return [x * {i} for _ in range(3)]\n" for i in range(20))
    (site / "big" / "__init__.py").write_text(
        "".join(f"from . import m{i}\n" for i in range(n)), encoding="utf-8"
    )
    for i in range(n):
        (site / "big" / f"m{i}.py").write_text(body, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-S", WALK, str(site), "big"],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    cache = site / "big" / "__pycache__"
    deadline = time.monotonic() + 60
    while not (cache.is_dir() and len(list(cache.iterdir())) >= 10) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the walk ended before it was signalled: make the tree larger"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    doc = json.loads(out)
    assert doc["files"] == n + 1 and 10 <= doc["compiled"] < n + 1
    # every file there is a whole .pyc (no temporary file left): the count it printed
    names = [p.name for p in cache.iterdir()]
    assert all(name.endswith(f".{TAG}.pyc") for name in names), names
    assert len(names) == doc["compiled"]


def test_a_bad_command_line_says_how_to_call_it() -> None:
    for argv in ([], ["site"], ["site", "mod", "--nice"], ["site", "mod", "--nice", "x"]):
        out = subprocess.run(
            [sys.executable, "-S", WALK, *argv], capture_output=True, text=True, env=_env()
        )
        assert out.returncode == 2 and "pycwalk.py SITE MODULE" in out.stderr, argv


@pytest.mark.pip_sources
def test_the_walk_of_real_torch_finds_what_import_torch_loads(torch_venv: Path) -> None:
    """torch 2.13.0 (the CPU build): read, not compiled (the shared venv is left as it is)."""
    python = str(torch_venv / "bin" / "python")
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    loaded = {f for f in _loaded_real(python, site) if f.startswith("torch/")}
    found = {str(Path(p).relative_to(site)) for p in pycwalk.order(str(site), "torch")}
    found_torch = {f for f in found if f.startswith("torch/")}
    missed = loaded - found_torch
    assert len(loaded) > 500
    assert len(missed) <= len(loaded) // 50, sorted(missed)  # at least 98% of what it loads
    assert len(found_torch) <= 1.1 * len(loaded), len(found_torch)  # and little else


def _loaded_real(python: str, site: Path) -> set[str]:
    code = (
        "import json, sys, warnings; warnings.simplefilter('ignore'); import torch\n"
        "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    root = str(site.resolve()) + os.sep
    files = [os.path.realpath(f) for f in json.loads(out.stdout.splitlines()[-1]) if f]
    return {f[len(root) :] for f in files if f.startswith(root) and f.endswith(".py")}
