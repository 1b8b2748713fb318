"""The import warm-up (envbuild/provision/warmup.py), with real uv installs into real venvs.

After the baseline step, a uv provision starts ``import torch`` in the background so the final
import check finds torch's bytecode in place. These tests show that it runs where it can help,
stays off where it cannot, and is never a verdict: a warm-up that fails does not fail the run,
and one that passes does not hide a final state in which torch no longer imports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import PY_MAJOR_MINOR, EnvbuildResult, installer_env
from support.wheels import build_wheel

from envbuild.errors import ExitCode
from envbuild.provision import warmup

pytestmark = pytest.mark.slow  # real provisions
# The sandbox sets PYTHONDONTWRITEBYTECODE=1; with it nothing would be written. "" unsets it for
# Python.
BYTECODE_ON = {"PYTHONDONTWRITEBYTECODE": ""}
TORCH = "2.12.0+cpu"


def _stack(
    tmp_path: Path,
    torch_init: str,
    later: list[tuple[str, str, dict[str, str]]],
    submodules: int = 0,
    prelude: str = "",
) -> Path:
    """A stack whose baseline is a stand-in torch with ``torch_init`` as its __init__ (importing
    ``submodules`` more modules of its own, after ``prelude``), then one step per ``later`` wheel
    (name, version, files), all from a local find-links folder."""
    wheels = tmp_path / "wheels"
    files = {f"torch/_m{i}.py": f"X = {i}\n" for i in range(submodules)}
    files["torch/__init__.py"] = (
        prelude + "".join(f"from . import _m{i}\n" for i in range(submodules)) + torch_init
    )
    files["torch/version.py"] = f"__version__ = {TORCH!r}\ncuda = None\n"
    files["torch/_never_imported.py"] = "Y = 1\n"
    build_wheel(wheels, "torch", TORCH, files=files)
    for name, version, files in later:
        build_wheel(wheels, name, version, files=files)
    src = f'find_links = ["{wheels}"]\nno_index = true\n'
    text = (
        f'schema = 1\nname = "warmup"\npython = "{PY_MAJOR_MINOR}"\n'
        '[layout]\nroot = "/mnt/data"\nlinks = { venv = "venv" }\nmin_free_gb = 0\n'
        f'[abi]\npackage = "torch"\nversion = "{TORCH}"\nlocal = "cpu"\n'
        f'[[step]]\nname = "torch"\npackages = ["torch=={TORCH}"]\n{src}'
    )
    for i, (name, version, _) in enumerate(later):
        text += f'[[step]]\nname = "later-{i}"\npackages = ["{name}=={version}"]\n{src}'
    path = tmp_path / "stack.toml"
    path.write_text(text, encoding="utf-8")
    return path


# The import mode runs only on hosts with 4+ cores; forced here so these tests mean the same on any
# host.
FORCE_IMPORT = {"ENVBUILD_IMPORT_WARMUP": "import"}
ARGS = ("--backend", "uv", "--compile-bytecode", "no", "--json")


def _provision(
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    stack: Path,
    *extra: str,
    env: dict[str, str] | None = None,
) -> EnvbuildResult:
    return run_envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        tmp_path / "data",
        "--home",
        tmp_path / "home",
        *ARGS,
        *extra,
        env={**BYTECODE_ON, **FORCE_IMPORT, **(env or {})},
    )


def _provision_on_one_cpu(tmp_path: Path, stack: Path) -> EnvbuildResult:
    """The default (auto) warm-up, with envbuild and its children pinned to one CPU by taskset."""
    argv = [
        "taskset",
        "-c",
        "0",
        sys.executable,
        "-m",
        "envbuild",
        "provision",
        "--stack",
        str(stack),
        "--root",
        str(tmp_path / "data"),
        "--home",
        str(tmp_path / "home"),
        *ARGS,
    ]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=installer_env(tmp_path / "home", BYTECODE_ON),
        timeout=600,
    )
    return EnvbuildResult(out.returncode, out.stdout, out.stderr)


def _site(tmp_path: Path) -> Path:
    return next((tmp_path / "data" / "venv" / "lib").glob("python3*/site-packages"))


PLAIN_TORCH = "from .version import __version__\n"
# A stand-in torch whose import, where IMPORT_SEEN names a file, waits (up to a minute) for the
# later step's helper-a to be installed beside it, and writes down its process, whether helper-a
# was there when the import began, and whether it was when the import ended: a warm-up that the
# later steps waited for would find it missing at the end. An import that found helper-a there from
# the start (the final check's) first waits (up to a minute) for an earlier import's line: the run
# stops a warm-up still running once the check is done, and a check quicker than the warm-up's
# own start on a loaded machine would otherwise leave one line.
WATCHING_TORCH = (
    "import os as _os\n"
    "if _os.environ.get('IMPORT_SEEN'):\n"
    "    import pathlib as _p, time as _t\n"
    "    _site = _p.Path(__file__).resolve().parents[1]\n"
    "    _seen = _p.Path(_os.environ['IMPORT_SEEN'])\n"
    "    def _there(): return any(_site.glob('helper_a-*.dist-info/RECORD'))\n"
    "    _began, _until = _there(), _t.monotonic() + 60\n"
    "    while not _there() and _t.monotonic() < _until:\n"
    "        _t.sleep(0.02)\n"
    "    while _began and not (_seen.exists() and _seen.read_text()) and _t.monotonic() < _until:\n"
    "        _t.sleep(0.02)\n"
    "    with open(_seen, 'a') as _f:\n"
    "        _f.write(f'{_os.getpid()} {_began} {_there()}\\n')\n"
) + PLAIN_TORCH


def test_warmup_writes_torch_bytecode_while_later_steps_install(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """The warm-up overlaps the later step: provision starts it before that step begins (its own
    output says so, in order), and the warm-up's process is still running once the step has
    installed helper-a (the stand-in torch sees it arrive); the final check's import comes after."""
    stack = _stack(
        tmp_path, WATCHING_TORCH, [("helper-a", "1.0", {"helper_a/__init__.py": "A = 1\n"})]
    )
    seen = tmp_path / "imports-seen.txt"
    result = run_envbuild(
        "-v",
        "provision",
        "--stack",
        stack,
        "--root",
        tmp_path / "data",
        "--home",
        tmp_path / "home",
        *ARGS,
        env={**BYTECODE_ON, **FORCE_IMPORT, "IMPORT_SEEN": str(seen)},
    )
    assert result.rc == ExitCode.OK, result.output
    doc = json.loads(result.stdout)
    assert doc["import_warmup"]["module"] == "torch"
    assert doc["import_warmup"]["seconds"] is not None
    # started after the torch step, before the later one
    said = result.stderr.splitlines()
    started = next(i for i, line in enumerate(said) if "import warm-up after step torch" in line)
    later = next(i for i, line in enumerate(said) if "==> step" in line and "later-0" in line)
    assert started < later, result.stderr
    # ... and still running when the later step had installed helper-a; the final check's import
    # (another process) came after it, and found helper-a there from the start
    warm, check = (line.split() for line in seen.read_text().splitlines())
    assert warm[2] == "True" and check[1:] == ["True", "True"], (warm, check)
    assert warm[0] != check[0]
    assert isinstance(doc["import_warmup"]["finished_before_check"], bool)
    # the bytecode a first import writes is there, and uv was not asked to compile anything:
    # helper_a (never imported) has none
    assert list((_site(tmp_path) / "torch" / "__pycache__").glob("__init__.cpython-*.pyc"))
    assert not (_site(tmp_path) / "helper_a" / "__pycache__").exists()
    receipt = json.loads(Path(doc["receipt"]).read_text())
    assert receipt["payload"]["import_warmup"]["module"] == "torch"


@pytest.mark.skipif(
    shutil.which("taskset") is None, reason="needs taskset (util-linux) to pin envbuild to one CPU"
)
def test_a_later_provision_compiles_what_the_import_loaded_on_every_core(tmp_path: Path) -> None:
    """The first provision records the files import torch loaded (in the data root's cache); the
    next one of the same torch compiles exactly those, in parallel, while it installs. On one CPU
    the first run has no warm-up at all (the import mode needs spare cores); the compile mode runs.
    """
    # torch imports helper_a when present (as torch does numpy): a later step installs it, so the
    # listing leaves it out (only torch's and its protected set's files: constraints freeze them)
    optional = "try:\n    import helper_a\nexcept ImportError:\n    pass\n"
    stack = _stack(
        tmp_path,
        optional + PLAIN_TORCH,
        [("helper-a", "1.0", {"helper_a/__init__.py": "A = 1\n"})],
        submodules=80,
    )
    first = _provision_on_one_cpu(tmp_path, stack)
    assert first.rc == ExitCode.OK, first.output
    assert json.loads(first.stdout)["import_warmup"] is None
    listing = next((tmp_path / "data" / "cache" / "envbuild").glob("import-torch-*.json"))
    files = json.loads(listing.read_text())["files"]
    assert {"torch/__init__.py", "torch/version.py", "torch/_m79.py"} <= set(files)
    assert "torch/_never_imported.py" not in files and not any(
        f.startswith("helper_a/") for f in files
    )

    # a new venv on the same data root (caches kept), as a warm re-provision makes
    shutil.rmtree(tmp_path / "data" / "venv")
    shutil.rmtree(tmp_path / "data" / ".envbuild")
    second = _provision_on_one_cpu(tmp_path, stack)
    assert second.rc == ExitCode.OK, second.output
    warm = json.loads(second.stdout)["import_warmup"]
    assert warm["mode"] == "compile" and warm["files"] == len(files), warm
    cache = _site(tmp_path) / "torch" / "__pycache__"
    assert len(list(cache.glob("_m*.cpython-*.pyc"))) == 80
    assert not list(cache.glob("_never_imported.*.pyc"))
    # what it wrote is what an import writes: the next import loads it as is (no rewrite)
    pyc = next(cache.glob("_m0.cpython-*.pyc"))
    before = pyc.stat().st_mtime_ns
    venv_python = tmp_path / "data" / "venv" / "bin" / "python"
    subprocess.run(
        [str(venv_python), "-c", "import torch"], check=True, env={**os.environ, **BYTECODE_ON}
    )
    assert pyc.stat().st_mtime_ns == before


@pytest.mark.skipif(
    not 2 <= warmup.usable_cpus() < warmup.IMPORT_MODE_MIN_CPUS,
    reason="the walk beside the check runs alone on 2 or 3 cores (on 4 or more the import mode"
    " has written the bytecode before the check; on one core it would only slow the import)",
)
def test_the_walk_beside_the_check_writes_what_its_import_meets_last(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A first provision on two cores: no warm-up before the check (no listing yet, and the
    import mode needs 4 cores), so the walk from the other end runs beside the check's import.
    Here that import naps first (as torch's first import spends seconds in its shared libraries),
    so the walk compiles the 80 modules it will meet; the import trusts what it wrote."""
    nap = "import os as _os, time as _t\n_t.sleep(float(_os.environ.get('TORCH_NAP', '0')))\n"
    stack = _stack(
        tmp_path,
        PLAIN_TORCH,
        [("helper-a", "1.0", {"helper_a/__init__.py": "A = 1\n"})],
        submodules=80,
        prelude=nap,
    )
    # the warm-up left to choose by itself ("1": on, not forced to import)
    auto = {"ENVBUILD_IMPORT_WARMUP": "1", "TORCH_NAP": "3"}
    result = _provision(run_envbuild, tmp_path, stack, env=auto)
    assert result.rc == ExitCode.OK, result.output
    warm = json.loads(result.stdout)["import_warmup"]
    assert warm["mode"] == "check" and warm["files"] == 0, warm
    cache = _site(tmp_path) / "torch" / "__pycache__"
    pycs = {p.name: p.stat().st_ino for p in cache.glob("*.pyc")}
    # _m79 is the last module the import meets: the walk from the other end wrote it first
    assert warm["beside_check"] >= 1 and any(n.startswith("_m79.") for n in pycs), (warm, pycs)
    assert len(pycs) == 82  # __init__, version and the 80, each written once by one of the two
    assert not list(cache.glob("_never_imported.*"))
    venv_python = tmp_path / "data" / "venv" / "bin" / "python"
    subprocess.run(
        [str(venv_python), "-c", "import torch"], check=True, env={**os.environ, **BYTECODE_ON}
    )
    assert {p.name: p.stat().st_ino for p in cache.glob("*.pyc")} == pycs  # trusted as they are


@pytest.mark.parametrize("how", ["variable", "pip", "compile", "no-bytecode"])
def test_warmup_stays_off_where_it_cannot_help(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult], how: str
) -> None:
    stack = _stack(
        tmp_path, PLAIN_TORCH, [("helper-a", "1.0", {"helper_a/__init__.py": "A = 1\n"})]
    )
    extra: tuple[str, ...] = ()
    env: dict[str, str] = {}
    if how == "variable":
        env["ENVBUILD_IMPORT_WARMUP"] = "0"
    elif how == "pip":
        extra = ("--backend", "pip")  # pip compiles at install
    elif how == "compile":
        extra = ("--compile-bytecode", "yes")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = _provision(run_envbuild, tmp_path, stack, *extra, env=env)
    assert result.rc == ExitCode.OK, result.output
    assert json.loads(result.stdout)["import_warmup"] is None
    assert not (tmp_path / "data" / "logs" / "import-warmup.log").exists()


def test_a_failing_warmup_is_not_a_verdict(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """torch needs a module that only a later step installs: the warm-up fails, the run does not."""
    # three later steps: the warm-up's failed import (a tenth of a second) is over long before the
    # check; on a machine so loaded that it is not, it is killed at the end, which is no verdict
    # either
    stack = _stack(
        tmp_path,
        "import late_dep\n" + PLAIN_TORCH,
        [
            ("filler-a", "1.0", {"filler_a/__init__.py": ""}),
            ("filler-b", "1.0", {"filler_b/__init__.py": ""}),
            ("late-dep", "1.0", {"late_dep/__init__.py": "OK = True\n"}),
        ],
    )
    result = _provision(run_envbuild, tmp_path, stack)
    assert result.rc == ExitCode.OK, result.output
    doc = json.loads(result.stdout)
    assert doc["full_check"]["version"] == TORCH
    assert doc["import_warmup"]["exit"] != 0, doc["import_warmup"]
    if doc["import_warmup"]["exit"] == 1:
        assert (
            "ModuleNotFoundError: No module named 'late_dep'"
            in (tmp_path / "data" / "logs" / "import-warmup.log").read_text()
        )


def test_a_passing_warmup_does_not_hide_a_later_break(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """torch imports an optional module when present (as torch does numpy); a later step installs a
    version that breaks the import. The warm-up ran before it and passed; the final check fails."""
    torch_init = "try:\n    import optional_dep\nexcept ImportError:\n    pass\n" + PLAIN_TORCH
    stack = _stack(
        tmp_path,
        torch_init,
        [
            (
                "optional-dep",
                "2.0",
                {"optional_dep/__init__.py": "raise RuntimeError('built against API 1')\n"},
            )
        ],
    )
    result = _provision(run_envbuild, tmp_path, stack)
    assert result.rc == ExitCode.ABI, result.output
    assert "built against API 1" in result.stderr
    assert "Traceback" not in result.stderr.split("error:", 1)[0]


def test_wanted_reads_the_switches() -> None:
    on: dict[str, Any] = {
        "install_env": {},
        "import_env": {},
        "compiles_at_install": False,
        "single_step": False,
    }
    assert warmup.wanted(**on)
    assert not warmup.wanted(**{**on, "import_env": {"ENVBUILD_IMPORT_WARMUP": "0"}})
    assert not warmup.wanted(**{**on, "import_env": {"PYTHONDONTWRITEBYTECODE": "1"}})
    assert warmup.wanted(**{**on, "import_env": {"PYTHONDONTWRITEBYTECODE": ""}})
    assert not warmup.wanted(**{**on, "install_env": {"UV_COMPILE_BYTECODE": "1"}})
    assert not warmup.wanted(**{**on, "compiles_at_install": True})
    assert not warmup.wanted(**{**on, "single_step": True})
