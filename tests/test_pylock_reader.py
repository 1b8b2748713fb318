"""pylock.toml read per PEP 751 (``gate.formats.pylock``), on locks real tools write: ``pip lock``
(pip >= 25.1) and ``uv export --format pylock.toml``, each from a local HTTP index and from a
``--find-links`` folder with no index (then no package names an ``index``).

Both ways: a wheel's ``url`` is where its bytes are, not a direct reference (a pure-Python
package with one wheel and no index is no "extension wheel whose tag is not read"; planted: the
same package as a ``[packages.archive]`` is the direct reference it says); an extension built for
the locked torch passes, one built for another torch minor is a finding; a package's
``requires-python`` limits where it installs (planted: one limited to Python < 3.9 is not judged).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.gatelocks import uv_bin
from support.index import IndexServer
from support.wheels import build_wheel

from envbuild.gate import Policy, check_file
from envbuild.gate.formats import parse

HEALTHY = "2.8.3+cu12torch2.10cxx11abiTRUE"
PLANTED = "2.8.3+cu12torch2.9cxx11abiTRUE"
LINUX = "manylinux_2_28_x86_64"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch 2.10.0+cu128 (a Linux wheel), typing-extensions (pure Python), flash-attn built for
    torch 2.10 and for 2.9 (Linux wheels, each requiring torch)."""
    folder = tmp_path_factory.mktemp("pylock-wheels")
    build_wheel(folder, "torch", "2.10.0+cu128", requires=["typing-extensions"], platform_tag=LINUX)
    build_wheel(folder, "typing_extensions", "4.15.0")
    for version in (HEALTHY, PLANTED):
        build_wheel(folder, "flash_attn", version, requires=["torch"], platform_tag=LINUX)
    return folder


@pytest.fixture(scope="module")
def index(wheels: Path) -> Iterator[IndexServer]:
    with IndexServer({"pypi": wheels}) as server:
        yield server


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "UV_CACHE_DIR": str(tmp / "uv-cache"),
        "PIP_CACHE_DIR": str(tmp / "pip-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
    }


def _sources(wheels: Path, index: IndexServer | None) -> list[str]:
    return (
        ["--index-url", index.simple_url("pypi")]
        if index
        else ["--no-index", "--find-links", str(wheels)]
    )


def _run(argv: list[str], tmp: Path) -> None:
    got = subprocess.run(argv, cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, f"{argv}: {got.stderr}"


def pip_lock(tmp: Path, wheels: Path, index: IndexServer | None, flash: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "lock",
            "torch==2.10.0+cu128",
            f"flash-attn=={flash}",
            "-o",
            "pylock.toml",
            *_sources(wheels, index),
        ],
        tmp,
    )
    return tmp / "pylock.toml"


def uv_export(tmp: Path, wheels: Path, index: IndexServer | None, flash: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    where = (
        f'[[tool.uv.index]]\nname = "local"\nurl = "{index.simple_url("pypi")}"\ndefault = true\n'
        if index
        else f'[tool.uv]\nno-index = true\nfind-links = ["{wheels}"]\n'
    )
    (tmp / "pyproject.toml").write_text(
        f'[project]\nname = "demo"\nversion = "0.1.0"\nrequires-python = "=={py}.*"\n'
        f'dependencies = ["torch==2.10.0+cu128", "flash-attn=={flash}"]\n\n'
        "[tool.uv]\npackage = false\n"
        "environments = [\"sys_platform == 'linux' and platform_machine == 'x86_64'\"]\n"
        + where.replace("[tool.uv]\n", "")
    )
    for argv in (
        ["lock"],
        ["export", "--format", "pylock.toml", "-o", "pylock.toml", "--no-header"],
    ):
        _run([uv_bin(), *argv, "--python", sys.executable], tmp)
    return tmp / "pylock.toml"


@pytest.mark.slow  # real pip lock and uv against a local index (15 s on 2 cores)
@pytest.mark.parametrize("tool", [pip_lock, uv_export], ids=["pip-lock", "uv-export"])
@pytest.mark.parametrize("with_index", [True, False], ids=["index", "find-links"])
def test_pylock_from_real_tools(
    tool: object, with_index: bool, wheels: Path, index: IndexServer, tmp_path: Path
) -> None:
    assert callable(tool)
    good = tool(tmp_path / "good", wheels, index if with_index else None, HEALTHY)
    lock = parse(good, good.read_text(), "pylock")
    typing_ext = next(e for e in lock.entries if e.name == "typing-extensions")
    assert typing_ext.url is None and typing_ext.files, (
        typing_ext
    )  # a file of it, not a direct reference
    # pip lock names no index even when it used one (the case); uv names the index, or
    # the find-links folder as a file:// one
    assert (typing_ext.index is not None) is (tool is uv_export), typing_ext
    report = check_file(good, Policy(), offline=True)
    assert not report.findings, report.findings
    said = [
        n for n in [*report.notices, *report.unverified] if "typing-extensions" in n and "ABI" in n
    ]
    assert not said, (
        said
    )  # before: "typing-extensions 4.15.0 with torch ...: no ABI tag envbuild reads"
    bad = tool(tmp_path / "bad", wheels, index if with_index else None, PLANTED)
    report = check_file(bad, Policy(), offline=True)
    assert [(f.rule, f.package) for f in report.findings] == [("extension-abi", "flash-attn")], (
        report.findings
    )
    assert "built for torch 2.9" in report.findings[0].reason


ARCHIVE_LOCK = """lock-version = "1.0"
created-by = "hand"
requires-python = ">=3.9"

[[packages]]
name = "torch"
version = "2.10.0+cu128"
wheels = [
  {{ url = "https://files.example/torch-2.10.0%2Bcu128-py3-none-{linux}.whl",
     hashes = {{ sha256 = "{h1}" }} }},
]

[[packages]]
name = "flash-attn"
{what}

[[packages]]
name = "old-only"
version = "1.0"
requires-python = "<3.9"
wheels = [
  {{ url = "https://files.example/old_only-1.0-py3-none-any.whl", hashes = {{ sha256 = "{h3}" }} }},
]
"""


@pytest.mark.parametrize(
    ("what", "url"),
    [
        # a wheel with no index: its url is a file, the entry is no direct reference
        (
            (
                f'version = "{PLANTED}"\nwheels = [{{{{ url ='
                f' "https://files.example/flash_attn-{PLANTED}-py3-none-linux_x86_64.whl", hashes ='
                ' {{ sha256 = "{h2}" }} }}]'
            ),
            False,
        ),
        # the same bytes as a direct reference
        (
            'archive = {{ url = "https://files.example/flash_attn-'
            + PLANTED
            + '-py3-none-linux_x86_64.whl", hashes = {{ sha256 = "{h2}" }} }}',
            True,
        ),
    ],
)
def test_archive_and_requires_python(what: str, url: bool, tmp_path: Path) -> None:
    text = ARCHIVE_LOCK.format(what=what.format(h2="2" * 64), linux=LINUX, h1="1" * 64, h3="3" * 64)
    path = tmp_path / "pylock.toml"
    path.write_text(text)
    lock = parse(path, text, "pylock")
    flash = next(e for e in lock.entries if e.name == "flash-attn")
    assert (flash.url is not None) is url and flash.files and flash.hashes == ("2" * 64,)
    old = next(e for e in lock.entries if e.name == "old-only")
    assert old.marker == "python_full_version < '3.9'"
    report = check_file(path, Policy(), offline=True)
    assert [(f.rule, f.package) for f in report.findings] == [("extension-abi", "flash-attn")], (
        report.findings
    )
    assert not [n for n in report.unverified if "old-only" in n]
