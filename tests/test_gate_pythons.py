"""Every row of ``check-lock`` is true for every Python it names (issue 51).

- Real locks (``tests/data/pythonlocks/README.md`` says how each was made, by which tool at which
  version; the public ones under ``tests/data/publocks`` and ``pixilocks``): for every row, each
  Python it names, judged alone (``--python``), gives the same torch, result and findings.
- A Hypothesis property: poetry.lock files with torch wheels for some Pythons and platforms and
  not others, an extension built for one torch minor with wheels for some Pythons, and a torch
  requirement whose marker names a Python: the same holds, and a row says "no file" exactly
  where the generated lock has no torch wheel.
- The issue's cases, each planted and fixed: a Python range split where torch has no file; a
  ``cp314`` wheel lets 3.14 be judged; ``--base`` across a Python bump.

Offline and in-process (the gate reads only the committed files): seconds in all.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.gate import Policy, check_file
from envbuild.gate.environments import Narrow
from envbuild.gate.findings import NO_FILE, FileReport

DATA = Path(__file__).resolve().parent / "data"
LOCKS = DATA / "pythonlocks"
POLICY = Policy(python="3.12")
_ROW = re.compile(
    r"^(?P<plat>[^,]+?)(?:, python (?P<lo>3\.\d+)(?:–(?P<hi>3\.\d+))?)?(?:, (?P<sel>.+))?$"
)

REAL = [
    LOCKS / "uv-py311-torch251" / "uv.lock",
    LOCKS / "uv-py310-torch290" / "uv.lock",
    LOCKS / "poetry-py38-torch251" / "poetry.lock",
    LOCKS / "uv-universal-py39-torch251" / "requirements.txt",
    LOCKS / "pip-compile-py311-torch251" / "requirements.txt",
    LOCKS / "public" / "cosmos-predict2.5" / "uv.lock",
    LOCKS / "public" / "text-generation-inference" / "poetry.lock",
    DATA / "publocks" / "docling" / "uv.lock",
    DATA / "publocks" / "lerobot" / "uv.lock",
    DATA / "pixilocks" / "llama-index-inference" / "pixi.lock",
    DATA / "pixilocks" / "pytorch-gpu-pixi-example" / "pixi.lock",
]


def _said(report: FileReport, row: str) -> frozenset[tuple[str, str, str]]:
    return frozenset(
        (f.rule, f.package, f.reason) for f in report.findings if row in f.environments
    )


def _pythons(name: str) -> tuple[str, list[str]]:
    """A row's name without its Pythons, and the Pythons it names."""
    m = _ROW.match(name)
    assert m is not None, name
    rest = ", ".join(x for x in (m.group("plat"), m.group("sel")) if x)
    if not m.group("lo"):
        return rest, []
    lo = int(m.group("lo").split(".")[1])
    hi = int(m.group("hi").split(".")[1]) if m.group("hi") else lo
    return rest, [f"3.{n}" for n in range(lo, hi + 1)]


def assert_rows_hold_per_python(path: Path, **kw: object) -> FileReport:
    """Each row's verdict (torch, result, findings) is what each of its Pythons gets alone."""
    report = check_file(path, POLICY, offline=True, **kw)  # type: ignore[arg-type]
    alone: dict[str, FileReport] = {}
    for row in report.environments:
        name, pythons = _pythons(row.name)
        said = (row.torch, row.result, _said(report, row.name))
        for py in pythons:
            if py not in alone:
                alone[py] = check_file(
                    path,
                    POLICY,
                    offline=True,
                    narrow=Narrow(python=(py,)),
                    **kw,  # type: ignore[arg-type]
                )
            got = [r for r in alone[py].environments if r.name == name]
            assert len(got) == 1, (path, py, name, [r.name for r in alone[py].environments])
            one = got[0]
            assert (one.torch, one.result, _said(alone[py], one.name)) == said, (path, py, name)
    return report


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_row_holds_for_each_python_it_names(path: Path) -> None:
    report = assert_rows_hold_per_python(path)
    assert report.environments


def test_a_python_range_splits_where_torch_has_no_file() -> None:
    """poetry ``python = "^3.8"``, torch 2.5.1: wheels for 3.9-3.12 on four platforms, 3.13 on
    linux x86_64 only, none for 3.8 (the issue's first case; it said 3.8-3.13 "no file" on every
    platform, and the note named no Python)."""
    report = check_file(LOCKS / "poetry-py38-torch251" / "poetry.lock", POLICY, offline=True)
    rows = {r.name: r.result for r in report.environments}
    assert rows["linux x86_64, python 3.9–3.13"] == "ok"
    assert rows["linux aarch64, python 3.9–3.12"] == "ok"
    assert rows["linux aarch64, python 3.8"] == NO_FILE
    assert rows["linux aarch64, python 3.13–3.15"] == NO_FILE  # 3.15: a locked file's cp315
    assert rows["macos x86_64, python 3.8–3.15"] == NO_FILE  # torch 2.2 was the last
    note = next(n for n in report.notices if n.startswith("no torch file installs on"))
    assert "linux aarch64, python 3.8, 3.13–3.15;" in note, note
    assert report.ok


def test_a_uv_lock_from_311_is_not_ok_at_313_on_aarch64() -> None:
    """uv.lock ``requires-python >=3.11``, torch 2.5.1: the issue's second case said linux aarch64
    3.11-3.13 ok; 3.13 has no aarch64 wheel."""
    report = check_file(LOCKS / "uv-py311-torch251" / "uv.lock", POLICY, offline=True)
    rows = {r.name: r.result for r in report.environments}
    assert rows["linux aarch64, python 3.11–3.12"] == "ok"
    assert rows["linux aarch64, python 3.13–3.15"] == NO_FILE
    assert rows["linux x86_64, python 3.11–3.13"] == "ok"


def test_a_cp314_wheel_lets_314_be_judged() -> None:
    """uv.lock ``requires-python >=3.10`` with torch 2.9.0, which ships cp314 wheels: 3.14 is
    judged (and ok); the range once stopped at 3.13."""
    report = check_file(LOCKS / "uv-py310-torch290" / "uv.lock", POLICY, offline=True)
    rows = {r.name: r.result for r in report.environments}
    assert rows["linux x86_64, python 3.10–3.14"] == "ok"
    alone = check_file(
        LOCKS / "uv-py310-torch290" / "uv.lock",
        POLICY,
        offline=True,
        narrow=Narrow(python=("3.14",)),
    )
    assert {r.name: r.result for r in alone.environments}["linux aarch64"] == "ok"


def test_a_public_lock_whose_torch_wheels_skip_a_python() -> None:
    """nvidia-cosmos/cosmos-predict2.5 50369b8 locks torch 2.7.1+cu128 by URL, for cp310 and cp312
    on linux x86_64 only (``requires-python >=3.10``): the gate said "linux x86_64, python
    3.10–3.13 ok"; 3.11 and 3.13 have no torch file."""
    report = check_file(LOCKS / "public" / "cosmos-predict2.5" / "uv.lock", POLICY, offline=True)
    rows = {r.name: r.result for r in report.environments}
    assert rows["linux x86_64, python 3.10"] == "ok"
    assert rows["linux x86_64, python 3.11"] == NO_FILE
    assert rows["linux x86_64, python 3.12"] == "ok"
    assert rows["linux x86_64, python 3.13–3.14"] == NO_FILE


def test_base_across_a_python_bump() -> None:
    """Base: Python 3.10, torch 2.5.1; head: Python 3.11, torch 2.6.0 (same platforms): a note that
    the Python moved, no ``torch-gone`` (the issue's case); the other way round a downgrade is
    still one; and a head whose new Python has no torch file where the base's had one is
    ``torch-gone`` there alone."""
    base = str(LOCKS / "uv-base-py310-torch251" / "uv.lock")
    bumped = check_file(
        LOCKS / "uv-head-py311-torch260" / "uv.lock", POLICY, offline=True, base=base
    )
    assert bumped.ok, [f.text() for f in bumped.findings]
    assert any("the Python moved" in n and "python 3.10 at" in n for n in bumped.notices)
    assert not any("gone from this lock" in n for n in bumped.notices)
    back = check_file(
        LOCKS / "uv-base-py310-torch251" / "uv.lock",
        POLICY,
        offline=True,
        base=str(LOCKS / "uv-head-py311-torch260" / "uv.lock"),
    )
    assert {f.rule for f in back.findings} == {"torch-downgrade"}
    gone = check_file(LOCKS / "uv-head-py313-torch251" / "uv.lock", POLICY, offline=True, base=base)
    (finding,) = gone.findings
    assert finding.rule == "torch-gone" and "python 3.10" in finding.reason
    # torch 2.5.1 has cp310 wheels on these three and no cp313 ones; macOS x86_64 had none before
    assert finding.environments == ["linux aarch64", "macos arm64", "windows amd64"]


# ----------------------------------------------------------------------------- the property

PLATFORM_TAGS = {
    "linux x86_64": "manylinux_2_28_x86_64",
    "linux aarch64": "manylinux_2_28_aarch64",
    "macos arm64": "macosx_11_0_arm64",
    "macos x86_64": "macosx_10_15_x86_64",
    "windows amd64": "win_amd64",
}


def _wheels(name: str, version: str, cells: set[tuple[str, int]]) -> str:
    files = [f"{name}-{version}-cp3{n}-cp3{n}-{PLATFORM_TAGS[p]}.whl" for p, n in sorted(cells)]
    return ",\n".join(
        f'    {{file = "{f}", hash = "sha256:{i + 1:064x}"}}' for i, f in enumerate(files)
    )


def _poetry_lock(
    low: int,
    torch_cells: set[tuple[str, int]],
    ext_cells: set[tuple[str, int]],
    ext_minor: int,
    needs_py: int,
) -> str:
    """A poetry.lock: torch 2.5.1 (wheels at ``torch_cells``; it requires ``helper==2.0`` from
    Python 3.``needs_py`` on, the lock holds helper 1.0), flash-attn built for torch 2.``ext_minor``
    (wheels at ``ext_cells``), and a marker naming every platform."""
    ext = f"2.7.0+cu12torch2.{ext_minor}cxx11abiFALSE"
    return f'''[[package]]
name = "torch"
version = "2.5.1"
description = ""
optional = false
python-versions = ">=3.8"
files = [
{_wheels("torch", "2.5.1", torch_cells)}
]

[package.dependencies]
helper = {{version = "2.0", markers = "python_version >= \\"3.{needs_py}\\""}}

[[package]]
name = "helper"
version = "1.0"
description = ""
optional = false
python-versions = ">=3.8"
files = [
    {{file = "helper-1.0-py3-none-any.whl", hash = "sha256:{99:064x}"}},
]

[[package]]
name = "flash-attn"
version = "{ext}"
description = ""
optional = false
python-versions = ">=3.8"
files = [
{_wheels("flash_attn", ext, ext_cells) or ""}
]

[package.dependencies]
torch = "*"

[[package]]
name = "colorama"
version = "0.4.6"
description = ""
optional = false
python-versions = ">=3.8"
markers = "sys_platform != \\"emscripten\\""
files = [
    {{file = "colorama-0.4.6-py2.py3-none-any.whl", hash = "sha256:{98:064x}"}},
]

[metadata]
lock-version = "2.1"
python-versions = ">=3.{low}"
content-hash = "0"
'''


cells = st.sets(st.tuples(st.sampled_from(sorted(PLATFORM_TAGS)), st.integers(8, 13)))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    low=st.integers(8, 12),
    torch_cells=cells.filter(bool),
    ext_cells=cells,
    ext_minor=st.sampled_from([4, 5]),
    needs_py=st.integers(8, 13),
)
def test_generated_locks_rows_hold_per_python(
    tmp_path_factory: pytest.TempPathFactory,
    low: int,
    torch_cells: set[tuple[str, int]],
    ext_cells: set[tuple[str, int]],
    ext_minor: int,
    needs_py: int,
) -> None:
    folder = tmp_path_factory.mktemp("gen")
    path = folder / "poetry.lock"
    path.write_text(_poetry_lock(low, torch_cells, ext_cells, ext_minor, needs_py))
    report = assert_rows_hold_per_python(path)
    for row in report.environments:
        platform, pythons = _pythons(row.name)
        for py in pythons:
            has = (platform, int(py.split(".")[1])) in torch_cells
            assert (row.installable is True) == has, (row.name, py, sorted(torch_cells))


# ----------------------------------------------------------------------------- regenerated


def _make(folder: Path, tmp: Path) -> Path:
    """The lock of ``folder`` made again by its tool (README.md's command) in a copy under
    ``tmp``."""
    import shutil
    import subprocess

    from support.fixtures import installer_env
    from support.gatelocks import poetry_bin, uv_bin

    work = tmp / folder.name
    shutil.copytree(folder, work)
    pythons = Path.home() / ".pyenv" / "versions"
    # pip: PyPI itself, not the host's pip.conf (its find-links), with the host's CA bundle
    cert = {"PIP_CERT": os.environ["PIP_CERT"]} if "PIP_CERT" in os.environ else {}
    env = installer_env(tmp / "home", {"PIP_CONFIG_FILE": "/dev/null", **cert})
    name = folder.name
    if name.startswith("poetry"):
        argv, out = [str(poetry_bin()), "lock"], work / "poetry.lock"
    elif name.startswith("pip-compile"):
        argv = [str(Path(sys.executable).parent / "pip-compile"), "--no-strip-extras"]
        argv += ["--no-emit-find-links", "-o", "requirements.txt", "requirements.in"]
        out = work / "requirements.txt"
    elif name.startswith("uv-universal"):
        argv = [uv_bin(), "pip", "compile", "--no-config", "--universal", "--python-version"]
        argv += ["3.9", "-o", "requirements.txt", "requirements.in"]
        out = work / "requirements.txt"
    else:
        py = {"uv-base-py310": "3.10", "uv-head-py313": "3.13"}.get(name[:13], "3.11")
        interpreter = next(pythons.glob(f"{py}.*/bin/python"))
        argv, out = (
            [uv_bin(), "lock", "--no-config", "--python", str(interpreter)],
            work / "uv.lock",
        )
    out.unlink()
    got = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stdout + got.stderr
    return out


@pytest.mark.network
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    "folder", sorted(p for p in LOCKS.iterdir() if p.is_dir() and p.name != "public"), ids=str
)
def test_the_tools_still_make_these_locks(folder: Path, tmp_path: Path) -> None:
    """Each committed lock made again by its tool pins the same torch, and its rows hold for every
    Python they name (newer files on PyPI may widen the Pythons judged)."""
    committed = next(
        p for p in folder.iterdir() if p.name in ("uv.lock", "poetry.lock", "requirements.txt")
    )
    made = _make(folder, tmp_path)
    torch = {r.torch for r in check_file(committed, POLICY, offline=True).environments}
    assert {r.torch for r in assert_rows_hold_per_python(made).environments} == torch
