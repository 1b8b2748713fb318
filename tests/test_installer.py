"""The installer backends behind one protocol, and pip's configured sources (real pip)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.index.pipconf import _cache_folder
from envbuild.installer import (
    Installer,
    PipInstaller,
    UvInstaller,
    installer_for,
    pip_config_sources,
)


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PIP_CONFIG_FILE": str(home / "pip.conf"),
        **extra,
    }


def test_each_backend_builds_its_own_commands(tmp_path: Path) -> None:
    backends: list[Installer] = [PipInstaller(), UvInstaller("/opt/uv")]
    py, venv = Path("/usr/bin/python3"), tmp_path / "v"
    pip, uv = (b.venv_argv(py, venv, offline_wheelhouse="/wh") for b in backends)
    assert pip == ["/usr/bin/python3", "-m", "venv", str(venv)]
    assert uv[:3] == ["/opt/uv", "venv", "--seed"] and uv[3:6] == [
        "--no-index",
        "--find-links",
        "/wh",
    ]
    report = tmp_path / "r.json"
    dry = PipInstaller().dry_run_argv(
        venv / "bin/python", args=["--no-deps"], requirements_file=tmp_path / "r.txt", report=report
    )
    assert (
        "--dry-run" in dry
        and dry[dry.index("--report") + 1] == str(report)
        and dry[-2:] == ["-r", str(tmp_path / "r.txt")]
    )
    assert installer_for("pip").name == "pip"


def test_pip_config_sources_are_cached_until_anything_pip_reads_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    home = tmp_path / "home"
    home.mkdir()
    first = pip_config_sources(_env(home, PIP_INDEX_URL="http://a.example/simple"))
    assert first.index_url == "http://a.example/simple"
    assert len(list(_cache_folder().glob("*.json"))) == 1
    # another variable: asked again, and both answers kept (a run under other variables does not
    # put the next one back to asking pip)
    assert (
        pip_config_sources(_env(home, PIP_INDEX_URL="http://b.example/simple")).index_url
        == "http://b.example/simple"
    )
    assert len(list(_cache_folder().glob("*.json"))) == 2
    # a config file pip reads appears: asked again
    (home / "pip.conf").write_text("[global]\nextra-index-url = http://c.example/simple\n")
    got = pip_config_sources(_env(home, PIP_INDEX_URL="http://b.example/simple"))
    assert got.extra_index_urls == ("http://c.example/simple",)
    # the same inputs again: the cached answer, which is pip's own
    assert pip_config_sources(_env(home, PIP_INDEX_URL="http://b.example/simple")) == got


def test_pip_config_sources_with_credentials_are_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    home = tmp_path / "home"
    home.mkdir()
    got = pip_config_sources(_env(home, PIP_INDEX_URL="https://bob:t0ken@private.example/simple"))
    assert got.index_url == "https://bob:t0ken@private.example/simple"
    assert not list(_cache_folder().glob("*.json"))
