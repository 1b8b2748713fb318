"""What the gate says beside its verdict is true (issue 41), each statement shown both ways.

- A finding names exactly the environments where a file of the entry installs (its wheel tags
  against the environment, ``index.wheeltags``): a ``linux_x86_64``-only flash-attn wheel built
  for another torch minor is a finding in ``linux x86_64`` alone, the others get the "no file"
  note; the same release with an aarch64 wheel too is a finding in both Linux rows.
- ``--base`` says a downgrade and a CUDA re-tag together when both happen (2.11.0+cu130 ->
  2.10.0+cu128), a downgrade alone as one, a re-tag alone as a swap; and it takes a file as well as
  a git ref.

- A requirements lock's rows are true: online, a hash-pinned torch's files are found on its index
  by hash (no wheel downloaded), so a Linux-only torch is "ok" on Linux and "no file for this
  platform" elsewhere; offline every row says "not known offline"; a hash no file on the index has
  (planted) leaves every row "not known: no file found" (``uv pip compile --generate-hashes``).

The locks of the first two are uv.lock files in the shape uv writes (a virtual project, a URL
wheel, a registry
torch with a wheel per platform); the rules read them as any other uv.lock (quick: no index).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult
from support.gatelocks import uv_bin
from support.index import IndexServer, UnreachablePort
from support.wheels import build_wheel

from envbuild.errors import ExitCode
from envbuild.gate import Policy, check_file
from envbuild.gate.findings import NO_FILE

Run = Callable[..., EnvbuildResult]
FLASH = "https://example.org/flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-cp312-cp312-{plat}.whl"
TORCH_WHEELS = (
    "cp312-cp312-manylinux_2_28_x86_64",
    "cp312-cp312-manylinux_2_28_aarch64",
    "cp312-none-macosx_11_0_arm64",
    "cp312-cp312-win_amd64",
)


def uv_lock(torch: str = "2.10.0", flash_plats: tuple[str, ...] = ("linux_x86_64",)) -> str:
    """A uv.lock: a virtual project with torch (a wheel per platform, none for macOS x86_64),
    a flash-attn URL wheel (no marker) built for torch 2.9 with wheels for ``flash_plats``, and a
    colorama edge whose marker names the platforms (so every platform is judged)."""
    url = FLASH.format(plat=flash_plats[0])
    wheels = "".join(
        f'    {{ url = "{FLASH.format(plat=p)}", hash = "sha256:{i + 1:064x}" }},\n'
        for i, p in enumerate(flash_plats)
    )
    torch_wheels = "".join(
        f'    {{ url = "https://files.example/t/torch-{torch.replace("+", "%2B")}-{tag}.whl", '
        f'hash = "sha256:{i + 20:064x}" }},\n'
        for i, tag in enumerate(TORCH_WHEELS)
    )
    colorama_url = "https://files.example/c/colorama-0.4.6-py2.py3-none-any.whl"
    colorama_marker = (
        "sys_platform == 'win32' or sys_platform == 'darwin' or platform_machine == 'aarch64'"
    )
    return f"""version = 1
revision = 3
requires-python = "==3.12.*"

[[package]]
name = "colorama"
version = "0.4.6"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [
    {{ url = "{colorama_url}", hash = "sha256:{9:064x}" }},
]

[[package]]
name = "demo"
version = "0.1.0"
source = {{ virtual = "." }}
dependencies = [
    {{ name = "colorama", marker = "{colorama_marker}" }},
    {{ name = "flash-attn" }},
    {{ name = "torch" }},
]

[package.metadata]
requires-dist = [
    {{ name = "colorama", marker = "{colorama_marker}" }},
    {{ name = "flash-attn", url = "{url}" }},
    {{ name = "torch", specifier = "=={torch}" }},
]

[[package]]
name = "flash-attn"
version = "2.8.3+cu12torch2.9cxx11abitrue"
source = {{ url = "{url}" }}
dependencies = [
    {{ name = "torch" }},
]
wheels = [
{wheels}]

[[package]]
name = "torch"
version = "{torch}"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [
{torch_wheels}]
"""


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "uv.lock").write_text(text)
    return folder / "uv.lock"


@pytest.mark.parametrize(
    ("plats", "where"),
    [
        (("linux_x86_64",), ["linux x86_64"]),  # the lock: one wheel, no marker
        (("linux_x86_64", "linux_aarch64"), ["linux x86_64", "linux aarch64"]),
    ],
)
def test_an_extension_finding_names_where_its_file_installs(
    tmp_path: Path, plats: tuple[str, ...], where: list[str]
) -> None:
    report = check_file(_write(tmp_path, uv_lock(flash_plats=plats)), Policy(), offline=True)
    found = [(f.rule, f.package, f.environments) for f in report.findings]
    assert found == [("extension-abi", "flash-attn", where)]
    rows = {r.name: r.result for r in report.environments}
    assert rows["macos arm64"] == "ok" and rows["windows amd64"] == "ok"
    assert rows["macos x86_64"] == NO_FILE  # torch has no wheel there
    note = next(n for n in report.notices if n.startswith("flash-attn 2.8.3"))
    elsewhere = [p for p in ("linux aarch64", "macos arm64", "windows amd64") if p not in where]
    assert all(p in note for p in elsewhere) and not any(p in note for p in where), note


@pytest.mark.parametrize(
    ("before", "after", "rule", "says", "never"),
    [
        (
            "2.11.0+cu130",
            "2.10.0+cu128",
            "torch-downgrade",
            "a downgrade, and re-tagged (+cu130 -> +cu128: another CUDA build)",
            None,
        ),
        ("2.11.0+cu128", "2.10.0+cu128", "torch-downgrade", "here: a downgrade", "re-tagged"),
        (
            "2.10.0+cu130",
            "2.10.0+cu128",
            "torch-swap",
            "the same version with another local tag",
            ": a downgrade",
        ),
    ],
)
def test_base_names_a_downgrade_and_a_retag(
    tmp_path: Path, before: str, after: str, rule: str, says: str, never: str | None
) -> None:
    base = _write(tmp_path / "release", uv_lock(torch=before, flash_plats=("any",)))
    head = _write(tmp_path / "today", uv_lock(torch=after, flash_plats=("any",)))
    report = check_file(head, Policy(), offline=True, base=str(base))
    torch = [f for f in report.findings if f.package == "torch"]
    assert {f.rule for f in torch} == {rule}, report.findings
    assert all(says in f.reason for f in torch) and not any(
        never and never in f.reason for f in torch
    )
    same = check_file(head, Policy(), offline=True, base=str(head))  # the true case: nothing moved
    assert not [f for f in same.findings if f.package == "torch"]


def test_base_takes_a_file_and_a_git_ref(run_envbuild: Run, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    lock = _write(repo, uv_lock(torch="2.11.0+cu130", flash_plats=("any",)))
    old = _write(tmp_path / "release", uv_lock(torch="2.11.0+cu130", flash_plats=("any",)))
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "uv.lock"],
        ["-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "lock"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    lock.write_text(uv_lock(torch="2.10.0+cu128", flash_plats=("any",)))
    for base in (str(old), "main"):
        r = run_envbuild("check-lock", lock, "--offline", "--base", base)
        assert r.rc == ExitCode.LOCK, r.output
        assert "a downgrade, and re-tagged (+cu130 -> +cu128: another CUDA build)" in r.stdout, (
            r.output
        )
    lock.write_text(old.read_text())
    r = run_envbuild("check-lock", lock, "--offline", "--base", str(old))
    assert r.rc == ExitCode.OK, r.output
    r = run_envbuild("check-lock", lock, "--offline", "--base", str(tmp_path / "nowhere.lock"))
    assert (
        r.rc == ExitCode.CONFIG
        and "no such git revision" in r.stderr
        and "Traceback" not in r.output
    ), r.output
    # outside any git repository: a missing file is named as one, not as a bad git revision
    r = run_envbuild("check-lock", old, "--offline", "--base", str(tmp_path / "nowhere.lock"))
    assert r.rc == ExitCode.CONFIG and "no such file" in r.stderr, r.output
    assert "Traceback" not in r.output


# ----------------------------------------------------------------------------- requirements rows


@pytest.fixture(scope="module")
def cu130_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """torch 2.11.0+cu130 with a Linux x86_64 wheel only (as the CUDA index serves it), colorama."""
    folder = tmp_path_factory.mktemp("cu130")
    build_wheel(
        folder,
        "torch",
        "2.11.0+cu130",
        platform_tag="manylinux_2_28_x86_64",
        python_tag="py3",
        abi_tag="none",
    )
    build_wheel(folder, "colorama", "0.4.6")
    with IndexServer({"cu130": folder}) as server:
        yield server


def _compiled(tmp: Path, index: IndexServer) -> Path:
    """``uv pip compile --universal --generate-hashes`` of torch and a Windows-only colorama."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "requirements.in").write_text(
        "torch==2.11.0+cu130\ncolorama==0.4.6 ; sys_platform == 'win32'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    got = subprocess.run(
        [
            uv_bin(),
            "pip",
            "compile",
            "requirements.in",
            "--universal",
            "--generate-hashes",
            "--python-version",
            "3.12",
            "--index-url",
            index.simple_url("cu130"),
            "--emit-index-url",
            "-o",
            "requirements.txt",
            "--no-header",
        ],
        cwd=tmp,
        env={**env, "UV_CACHE_DIR": str(tmp / "uv-cache"), "XDG_CONFIG_HOME": str(tmp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    return tmp / "requirements.txt"


@pytest.mark.slow  # uv pip compile against a local index (20 s on 2 loaded cores)
def test_requirements_rows_say_what_the_hashes_show(
    cu130_index: IndexServer, tmp_path: Path
) -> None:
    lock = _compiled(tmp_path, cu130_index)
    online = {
        r.name: r.result
        for r in check_file(lock, Policy(python="3.12"), use_cache=False).environments
    }
    assert online["linux x86_64"] == "ok", online
    assert {
        online[p] for p in ("linux aarch64", "macos arm64", "macos x86_64", "windows amd64")
    } == {"no file for this platform and Python"}, online
    offline = {
        r.name: r.result for r in check_file(lock, Policy(python="3.12"), offline=True).environments
    }
    assert set(offline.values()) == {"not known offline"}, offline  # never "ok" without evidence
    # planted: a hash no file on the index has
    lock.write_text(
        re.sub(
            r"(torch==2\.11\.0\+cu130 \\\n\s+--hash=sha256:)[0-9a-f]{64}",
            r"\g<1>" + "0" * 64,
            lock.read_text(),
        )
    )
    planted = check_file(lock, Policy(python="3.12"), use_cache=False)
    assert {r.result for r in planted.environments} == {"not known: no file found"}, (
        planted.environments
    )
    # the index gone: the rows say so, never "ok"
    dead = UnreachablePort()
    try:
        lock.write_text(lock.read_text().replace(cu130_index.simple_url("cu130"), dead.url))
        gone = check_file(lock, Policy(python="3.12"), use_cache=False)
    finally:
        dead.close()
    assert {r.result for r in gone.environments} == {"not known: the index did not answer"}, gone
