"""The gate on bad input: every outcome is a finding or a clean exit 2 within seconds, never a
traceback. Tool-made locks are mutated (Hypothesis) and read again; what no tool writes (a marker
that does not parse, 100k packages, bytes that are not UTF-8) is written here by hand."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fixtures import EnvbuildResult
from support.gatelocks import GateIndex, uv_groups_lock

from envbuild.errors import ConfigError, ExitCode
from envbuild.gate import Policy, check_file
from envbuild.gate.check import MAX_PACKAGES
from envbuild.gate.model import Format

Run = Callable[..., EnvbuildResult]

_HEAD = 'version = 1\nrevision = 3\nrequires-python = ">=3.10"\n\n'


def _pkg(
    name: str,
    version: str,
    source: str = 'source = { registry = "https://pypi.org/simple" }',
    deps: str = "",
) -> str:
    return f'[[package]]\nname = "{name}"\nversion = "{version}"\n{source}\n{deps}\n'


def test_unreadable_files_are_usage_errors(run_envbuild: Run, tmp_path: Path) -> None:
    latin = tmp_path / "requirements.txt"
    latin.write_bytes("torch==2.10.0  # café\n".encode("latin-1"))
    r = run_envbuild("check-lock", str(latin))
    assert r.rc == ExitCode.CONFIG and "not UTF-8 text" in r.stderr and "Traceback" not in r.output
    # refused for what it is, before a byte is read (/dev/zero read would never end)
    for target in ("/dev/zero", str(tmp_path)):
        r = run_envbuild("check-lock", "--format", "uv.lock", target)
        assert r.rc == ExitCode.CONFIG and "not a regular file" in r.stderr, r.output
    r = run_envbuild("check-lock", str(latin), "--environment", "linux and", "--offline")
    assert r.rc == ExitCode.CONFIG and "neither a platform" in r.stderr, r.output
    r = run_envbuild("check-lock", str(latin), "--python", "three")
    assert r.rc == ExitCode.CONFIG and "--python 'three'" in r.stderr, r.output


def test_a_marker_that_does_not_parse_is_a_finding_on_its_line(
    run_envbuild: Run, tmp_path: Path
) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(
        _HEAD
        + _pkg(
            "trainer",
            "0.1",
            'source = { virtual = "." }',
            'dependencies = [\n    { name = "torch", marker = "sys_platform == \'linux\' and and"'
            " },\n]",
        )
        + _pkg("torch", "2.10.0")
    )
    r = run_envbuild("check-lock", str(lock), "--offline")
    assert r.rc == ExitCode.LOCK, r.output
    assert (
        f"{lock}:7: trainer: a dependency marker of trainer 0.1 `sys_platform == 'linux' and and`"
        " does not parse"
        in r.stdout
        and "[broken-marker]" in r.stdout
        and "Traceback" not in r.output
    )


def test_a_fork_without_torch_is_named_not_failed(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(
        _HEAD
        + _pkg(
            "trainer",
            "0.1",
            'source = { virtual = "." }',
            'dependencies = [\n    { name = "torch", marker = "sys_platform == \'linux\'" },\n]',
        )
        + _pkg(
            "torch",
            "2.10.0+cu128",
            'source = { registry = "https://download.pytorch.org/whl/cu128" }',
        )
    )
    report = check_file(lock, Policy(), offline=True)
    assert report.ok, report.findings
    assert [r.torch for r in report.environments] == [
        "2.10.0+cu128",
        "2.10.0+cu128",
        None,
        None,
        None,
    ]
    assert any(
        n.startswith("no torch in 3 environment(s): macos arm64; macos x86_64; windows amd64")
        for n in report.notices
    )


def test_a_lock_of_100k_packages_answers_within_seconds(run_envbuild: Run, tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(_HEAD + "".join(_pkg(f"pkg{i}", "1.0") for i in range(100_000)))
    t0 = time.monotonic()
    r = run_envbuild("check-lock", str(lock), "--offline", "--json")
    took = time.monotonic() - t0
    assert r.rc == ExitCode.LOCK, r.output
    (finding,) = json.loads(r.stdout)["files"][0]["findings"]
    assert finding["rule"] == "broken-lock" and f"up to {MAX_PACKAGES}" in finding["reason"]
    assert took < 60, took  # the tables are counted before the file is parsed: well under a second


@pytest.fixture(scope="module")
def groups_lock_text(gate_index: GateIndex, tmp_path_factory: pytest.TempPathFactory) -> str:
    return uv_groups_lock(tmp_path_factory.mktemp("groups"), gate_index).read_text()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_tool_made_locks_never_crash(
    groups_lock_text: str, tmp_path: Path, data: st.DataObject
) -> None:
    """Lines of a real uv.lock deleted, duplicated or overwritten with arbitrary text, then read
    as each format: a report (findings or not) or a ConfigError, nothing else."""
    lines = groups_lock_text.splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["delete", "duplicate", "replace", "truncate"]))
        if action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "replace":
            lines[i] = data.draw(st.text(max_size=60))
        else:
            lines[i] = lines[i][: len(lines[i]) // 2]
        if not lines:
            lines = [""]
    fmt: Format = data.draw(st.sampled_from(["uv.lock", "pylock", "poetry.lock", "requirements"]))
    path = tmp_path / "lockfile"
    path.write_bytes("\n".join(lines).encode("utf-8", "replace"))
    try:
        report = check_file(path, Policy(), fmt=fmt, offline=True)
    except ConfigError:
        return
    assert report.format == fmt
    for f in report.findings:
        assert f.rule and f.reason


def test_a_python_3_marker_and_an_unversioned_entry_read_plainly(tmp_path: Path) -> None:
    """``python_version >= '3'`` tells no Python 3 apart (no "python 3.0-3.1" environments), and an
    entry without a version is named by its name (never ``==None``)."""
    lock = tmp_path / "uv.lock"
    lock.write_text(
        _HEAD
        + _pkg(
            "trainer",
            "0.1",
            'source = { virtual = "." }',
            'dependencies = [\n    { name = "torch", marker = "python_version >= \'3\'" },\n'
            '    { name = "helper" },\n]',
        )
        + _pkg(
            "torch",
            "2.10.0+cu128",
            'source = { registry = "https://download.pytorch.org/whl/cu128" }',
        )
        + '[[package]]\nname = "helper"\nsource = { git ='
        ' "https://example.com/helper?rev=1#abc" }\n'
        + 'dependencies = [\n    { name = "torch" },\n]\n'
    )
    report = check_file(lock, Policy(), offline=True)
    assert [r.name for r in report.environments] == ["linux x86_64"], report.environments
    # a torch dependent whose requirements are unknown
    assert report.unchecked == ["helper"], report.unchecked
