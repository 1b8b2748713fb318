"""``provision --lock`` installs the entries ``uv sync --frozen`` installs, removes what the
selection no longer installs, and the gate refuses only the selections that install a bad file.

- One name and version from several indexes (a package index and per-accelerator indexes as
  conflicting extras, as PyTorch's guide writes them): uv names the entry (its index), and the
  right one installs, even where another index serves some of the same files.
- Exact sync: a narrower selection on a provisioned root removes what it no longer installs
  (``--inexact`` keeps it), as ``uv sync`` does; ``verify`` calls a package nobody selected drift.
- The gate per selection: a mismatched extension wheel in an optional extra refuses that extra,
  not the default selection.

Every lock is made by real ``uv lock`` against a local HTTP index of tiny real wheels; every
comparison is with what real ``uv sync --frozen`` installs into a fresh venv.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import (
    PROJECT,
    GateIndex,
    _folder,
    _toml_list,
    _uv_indexes,
    _uv_lock,
    uv_bin,
    uv_pip_list,
)
from support.index import IndexServer
from support.wheels import WheelSpec

MISMATCHED = "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE"  # built for torch 2.9, beside 2.10


def _audio(platform: str, index: str) -> WheelSpec:
    """audio-like 2.8.0 for ``platform``; its module says which index built it."""
    return WheelSpec(
        "audio-like",
        "2.8.0",
        ("torch",),
        {"audio_like/__init__.py": f"INDEX = {index!r}\n"},
        platform_tag=platform,
    )


def _torch(version: str) -> WheelSpec:
    return WheelSpec(
        "torch",
        version,
        ("filelock-like",),
        {
            "torch/__init__.py": "from .version import __version__ as __version__\n",
            "torch/version.py": f"__version__ = {version!r}\ncuda = None\n",
        },
    )


MAC = "macosx_11_0_arm64"
LINUX = "manylinux_2_17_x86_64"


@pytest.fixture(scope="module")
def accel_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """pypi: torch 2.10.0, audio-like 2.8.0 (a Linux and a macOS wheel), filelock-like, einops-like;
    cpu: torch 2.10.0+cpu and the same macOS audio-like wheel, byte for byte (PyTorch's CPU index
    mirrors PyPI's macOS wheels); cu128: torch 2.10.0+cu128 and a Linux audio-like of its own."""
    root = tmp_path_factory.mktemp("accel-index")
    plain = WheelSpec("filelock-like", "3.0", (), {"filelock_like/__init__.py": ""})
    for spec in (
        _torch("2.10.0"),
        _audio(LINUX, "pypi"),
        _audio(MAC, "pypi"),
        plain,
        WheelSpec("einops-like", "0.8.1", (), {"einops_like/__init__.py": ""}),
    ):
        spec.build(root / "pypi")
    for spec in (_torch("2.10.0+cpu"), _audio(MAC, "pypi"), plain):
        spec.build(root / "cpu")
    for spec in (_torch("2.10.0+cu128"), _audio(LINUX, "cu128"), plain):
        spec.build(root / "cu128")
    with IndexServer({r: root / r for r in ("pypi", "cpu", "cu128")}) as server:
        yield server


def accel_lock(tmp: Path, server: IndexServer) -> Path:
    """uv.lock of torch and audio-like from the package index by default and from the cpu / cu128
    index under the conflicting extras of those names (audio-like 2.8.0 locked three times), with a
    dev group (einops-like), by real ``uv lock``."""
    folder = _folder(tmp, "uv-accel")
    deps = ["torch==2.10.0", "audio-like==2.8.0"]
    indexes = "".join(
        f'[[tool.uv.index]]\nname = "{r}"\nurl = "{server.simple_url(r)}"\nexplicit = true\n\n'
        for r in ("cpu", "cu128")
    )
    routed = '[{ index = "cpu", extra = "cpu" }, { index = "cu128", extra = "cu128" }]'
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = {_toml_list(deps)}

[project.optional-dependencies]
cpu = {_toml_list(deps)}
cu128 = {_toml_list(deps)}

[dependency-groups]
dev = ["einops-like==0.8.1"]

[tool.uv]
package = false
conflicts = [[{{ extra = "cpu" }}, {{ extra = "cu128" }}]]

[tool.uv.sources]
torch = {routed}
audio-like = {routed}

{indexes}[[tool.uv.index]]
name = "pypi"
url = "{server.simple_url("pypi")}"
default = true
""")
    return _uv_lock(folder, tmp)


def uv_sync(lock: Path, venv: Path, home: Path, *args: str) -> None:
    env = installer_env(home, {"UV_PROJECT_ENVIRONMENT": str(venv)})
    env.pop("UV_NO_CONFIG")  # the project's own [tool.uv] is part of what uv sync reads
    subprocess.run(
        [uv_bin(), "sync", "--frozen", "--no-cache", "--python", sys.executable, *args],
        cwd=lock.parent,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )


def module_text(venv: Path, relative: str) -> str:
    [site] = (venv / "lib").glob("python3.*/site-packages")
    return (site / relative).read_text()


# ------------------------------------------------------------------------- the entry uv installs


@pytest.mark.slow
def test_the_entry_of_the_index_uv_installs(
    accel_index: IndexServer, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """audio-like 2.8.0 is locked from pypi, cpu and cu128; cpu's entry shares its macOS wheel with
    pypi's. The default selection installs pypi's (its Linux wheel), ``--extra cu128`` cu128's, each
    what ``uv sync`` installs; ``--extra cpu``, whose entry has no Linux wheel, is refused as uv
    refuses it, and check-lock agrees on the default."""
    lock = accel_lock(tmp_path, accel_index)
    assert lock.read_text().count('[[package]]\nname = "audio-like"') == 3
    plan = run_envbuild("plan", "--lock", lock, "--json")
    assert plan.rc == 0, plan.output
    files = {p["name"]: p["file"] for s in json.loads(plan.stdout)["stages"] for p in s["packages"]}
    assert files["audio-like"] == f"audio_like-2.8.0-py3-none-{LINUX}.whl"
    assert run_envbuild("check-lock", lock).rc == 0

    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    uv_sync(lock, tmp_path / "uv-venv", tmp_path / "home")
    ours = tmp_path / "data" / "venv"
    assert uv_pip_list(ours) == uv_pip_list(tmp_path / "uv-venv")
    assert module_text(ours, "audio_like/__init__.py") == "INDEX = 'pypi'\n"

    cu = run_envbuild("provision", "--lock", lock, "--extra", "cu128", "--root", tmp_path / "cu")
    assert cu.rc == 0, cu.output
    assert module_text(tmp_path / "cu" / "venv", "audio_like/__init__.py") == "INDEX = 'cu128'\n"
    assert uv_pip_list(tmp_path / "cu" / "venv")["torch"] == "2.10.0+cu128"

    cpu = run_envbuild("plan", "--lock", lock, "--extra", "cpu")
    assert cpu.rc == 2 and "audio-like 2.8.0: the lock has no file that installs" in cpu.stderr, (
        cpu.output
    )


@pytest.mark.slow
def test_a_lock_with_no_hashes_is_named_without_downloading(
    accel_index: IndexServer, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A lock from a find-links page that serves no hashes: uv's pylock export would download every
    file to hash it, so it runs offline and the requirements export names the selection instead;
    ``plan --lock`` downloads nothing, and ``provision --lock`` installs what ``uv sync`` does."""
    folder = _folder(tmp_path, "uv-bare")
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["torch==2.10.0", "einops-like==0.8.1"]

[tool.uv]
package = false
no-index = true
find-links = ["{accel_index.bare_url("pypi")}"]
""")
    lock = _uv_lock(folder, tmp_path)
    assert "sha256" not in lock.read_text()
    accel_index.clear_requests()
    plan = run_envbuild("plan", "--lock", lock, "--json")
    assert plan.rc == 0, plan.output
    assert {p["name"] for s in json.loads(plan.stdout)["stages"] for p in s["packages"]} == {
        "torch",
        "filelock-like",
        "einops-like",
    }
    assert accel_index.requested("*/files/*") == []
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    uv_sync(lock, tmp_path / "uv-venv", tmp_path / "home")
    assert uv_pip_list(tmp_path / "data" / "venv") == uv_pip_list(tmp_path / "uv-venv")


# ------------------------------------------------------------------------ the gate per selection


def extra_extension_lock(tmp: Path, idx: GateIndex) -> Path:
    """uv.lock of torch 2.10.0 (+cu128 on Linux) and trainer-utils, with flash-attn built for torch
    2.9 in the optional extra ``flash`` only (no conflicts), by real ``uv lock``."""
    folder = _folder(tmp, "uv-extra-ext")
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = {_toml_list(["torch==2.10.0", "trainer-utils==1.0"])}

[project.optional-dependencies]
flash = {_toml_list([idx.extension_requirement(MISMATCHED)])}

[tool.uv]
package = false

[tool.uv.sources]
torch = [{{ index = "cu128", marker = "sys_platform == 'linux'" }}]

{_uv_indexes(idx, ["cu128"])}""")
    return _uv_lock(folder, tmp)


@pytest.mark.slow
def test_a_finding_refuses_only_the_selections_that_install_it(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """The mismatched flash-attn is in the extra ``flash`` alone: the default selection plans and
    provisions (what uv sync installs), ``--extra flash`` is refused by the gate (exit 8), before
    anything is made."""
    lock = extra_extension_lock(tmp_path, gate_index)
    assert run_envbuild("check-lock", lock).rc == 8  # the lock as a whole holds the bad wheel
    plan = run_envbuild("plan", "--lock", lock)
    assert plan.rc == 0 and "gate: ok" in plan.stdout and "flash-attn" not in plan.stdout, (
        plan.output
    )

    flash = run_envbuild("plan", "--lock", lock, "--extra", "flash")
    assert flash.rc == 8 and "flash-attn" in flash.stderr and "[extension-abi]" in flash.stderr, (
        flash.output
    )
    refused = run_envbuild(
        "provision", "--lock", lock, "--extra", "flash", "--root", tmp_path / "bad"
    )
    assert refused.rc == 8 and not (tmp_path / "bad" / "venv").exists(), refused.output

    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    uv_sync(lock, tmp_path / "uv-venv", tmp_path / "home")
    assert uv_pip_list(tmp_path / "data" / "venv") == uv_pip_list(tmp_path / "uv-venv")
    assert "flash-attn" not in uv_pip_list(tmp_path / "data" / "venv")


# ----------------------------------------------------------------------------- exact sync


def _receipt(res: EnvbuildResult) -> Path:
    found = [
        line.split("receipt: ", 1)[1].strip()
        for line in res.stdout.splitlines()
        if line.startswith("receipt: ")
    ]
    assert found, res.output
    return Path(found[-1])


@pytest.mark.slow
def test_a_narrower_selection_removes_what_it_no_longer_installs(
    accel_index: IndexServer, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A root provisioned with the dev group, then ``--no-dev``: the dev package is gone, the venv
    holds what ``uv sync --frozen --no-dev`` leaves, and ``receipt diff`` names the change. A
    package installed by hand is drift for ``verify``; ``--inexact`` keeps it, an exact run
    removes it."""
    lock = accel_lock(tmp_path, accel_index)
    root, venv = tmp_path / "data", tmp_path / "data" / "venv"
    first = run_envbuild("provision", "--lock", lock, "--root", root)
    assert first.rc == 0, first.output
    assert "einops-like" in uv_pip_list(venv)

    narrow = run_envbuild("provision", "--lock", lock, "--no-dev", "--root", root)
    assert narrow.rc == 0, narrow.output
    assert "removed einops-like 0.8.1" in narrow.output
    uv_sync(lock, tmp_path / "uv-venv", tmp_path / "home", "--no-dev")
    assert uv_pip_list(venv) == uv_pip_list(tmp_path / "uv-venv")
    assert "einops-like" not in uv_pip_list(venv)
    receipt = json.loads(_receipt(narrow).read_text())
    sync = receipt["payload"]["lock"]["sync"]
    assert sync["exact"] is True and sync["removed"] == ["einops-like 0.8.1"]
    assert "einops-like" not in sync["installs"] and "audio-like" in sync["installs"]
    diff = run_envbuild("receipt", "diff", _receipt(first), _receipt(narrow))
    assert diff.rc == 10 and "einops-like" in diff.stdout and "identical" not in diff.stdout, (
        diff.output
    )

    assert run_envbuild("verify", "--root", root, "--no-receipt").rc == 0
    subprocess.run(
        [
            uv_bin(),
            "pip",
            "install",
            "--python",
            str(venv / "bin" / "python"),
            "--index-url",
            accel_index.simple_url("pypi"),
            "einops-like==0.8.1",
        ],
        check=True,
        capture_output=True,
        env=installer_env(tmp_path / "home"),
    )
    drift = run_envbuild("verify", "--root", root, "--no-receipt", "--json")
    assert drift.rc == 6, drift.output
    doc = json.loads(drift.stdout)
    assert (
        doc["ok"] is False
        and len(doc["extraneous"]) == 1
        and doc["extraneous"][0].startswith("einops-like 0.8.1")
    )

    kept = run_envbuild("provision", "--lock", lock, "--no-dev", "--inexact", "--root", root)
    assert kept.rc == 0, kept.output
    assert "einops-like" in uv_pip_list(venv)
    assert (
        run_envbuild("verify", "--root", root, "--no-receipt").rc == 0
    )  # --inexact: kept on purpose

    exact = run_envbuild("provision", "--lock", lock, "--no-dev", "--root", root)
    assert exact.rc == 0 and "removed einops-like 0.8.1" in exact.output, exact.output
    assert uv_pip_list(venv) == uv_pip_list(tmp_path / "uv-venv")


def _uv_uninstall(venv: Path, *names: str) -> None:
    subprocess.run(
        [uv_bin(), "pip", "uninstall", "--python", str(venv / "bin" / "python"), *names],
        check=True,
        capture_output=True,
        env=installer_env(),
    )


@pytest.mark.slow
def test_a_missing_package_is_drift_and_a_rerun_puts_it_back(
    accel_index: IndexServer, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """Packages of the selection uninstalled by hand from a provisioned root: ``verify`` names
    them (exit 6, text and ``--json``), and a re-run puts them back, as ``uv sync`` does, instead of
    calling the root finished; on the healthy root both are quiet."""
    lock = accel_lock(tmp_path, accel_index)
    root, venv = tmp_path / "data", tmp_path / "data" / "venv"
    first = run_envbuild("provision", "--lock", lock, "--root", root)
    assert first.rc == 0, first.output
    held = uv_pip_list(venv)
    assert {"audio-like", "einops-like"} <= set(held)
    healthy = run_envbuild("verify", "--root", root, "--no-receipt", "--json")
    assert healthy.rc == 0 and json.loads(healthy.stdout)["missing"] == [], healthy.output
    again = run_envbuild("provision", "--lock", lock, "--root", root)
    assert again.rc == 0 and "already provisioned and verified" in again.output, again.output

    _uv_uninstall(venv, "audio-like", "einops-like")
    drift = run_envbuild("verify", "--root", root, "--no-receipt", "--json")
    assert drift.rc == 6, drift.output
    doc = json.loads(drift.stdout)
    assert doc["ok"] is False and [m.split()[0] for m in doc["missing"]] == [
        "audio-like",
        "einops-like",
    ], doc
    text = run_envbuild("verify", "--root", root, "--no-receipt")
    assert text.rc == 6 and "audio-like is not installed" in text.output, text.output

    back = run_envbuild("provision", "--lock", lock, "--root", root)
    assert back.rc == 0, back.output
    assert "already provisioned" not in back.output
    assert "put back audio-like, einops-like" in back.output, back.output
    assert uv_pip_list(venv) == held
    assert run_envbuild("verify", "--root", root, "--no-receipt").rc == 0
    done = run_envbuild("provision", "--lock", lock, "--root", root)
    assert done.rc == 0 and "already provisioned and verified" in done.output, done.output


def test_exact_sync_never_removes_the_baseline(accel_index: IndexServer, tmp_path: Path) -> None:
    """Removing torch (or its protected set) is refused before anything is uninstalled (exit 6)."""
    from envbuild import guard
    from envbuild.errors import ABIViolation
    from envbuild.provision.exact import extraneous, remove

    venv = tmp_path / "venv"
    env = installer_env(tmp_path / "home")
    subprocess.run(
        [uv_bin(), "venv", "--python", sys.executable, str(venv)],
        check=True,
        capture_output=True,
        env=env,
    )
    subprocess.run(
        [
            uv_bin(),
            "pip",
            "install",
            "--python",
            str(venv / "bin" / "python"),
            "--index-url",
            accel_index.simple_url("pypi"),
            "torch==2.10.0",
            "einops-like==0.8.1",
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    [site] = (venv / "lib").glob("python3.*/site-packages")
    record = {"exact": True, "installs": ["einops-like"], "seeded": False}
    extra = extraneous(record, guard.scan(site))
    assert [d.name for d in extra] == ["filelock-like", "torch"]
    with pytest.raises(ABIViolation, match="part of the ABI baseline"):
        remove(
            venv / "bin" / "python",
            extra,
            ["torch", "filelock-like"],
            backend="uv",
            env=env,
            log_file=tmp_path / "log",
        )
    assert set(guard.scan(site)) == {"torch", "filelock-like", "einops-like"}
    gone = remove(
        venv / "bin" / "python",
        [d for d in extra if d.name == "filelock-like"],
        ["torch"],
        backend="uv",
        env=env,
        log_file=tmp_path / "log",
    )
    assert gone == ["filelock-like 3.0"] and set(guard.scan(site)) == {"torch", "einops-like"}
