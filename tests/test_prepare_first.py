"""Prepare, then install (``provision.prepare``, ``provision.restore``, ``provision.overlaps``),
against what ``uv sync --frozen`` does with the same project.

Real projects locked by the real ``uv lock`` (``support.planted``): torch from the gate's stand-in
index over HTTP, and one planted failure each. Real uv, real envbuild, compared at the venv's file
listing before and after:

- a failing sdist build and a git host that does not answer stop both before anything is
  installed: an existing venv keeps every file (both), a fresh root gets no venv (envbuild; uv
  leaves an empty one);
- a failure after the install began (a wheel whose ``.pth`` breaks every interpreter, so the final
  ``import torch`` fails) puts an existing venv back as it was; a venv the run made is left, and
  said so;
- two wheels that install one module are installed both, as uv installs them, with one winner
  every time, named in the output and the receipt, and in ``check-lock``'s note; a wheel that
  installs a file of torch's is refused before anything is installed (uv installs it), and
  ``check-lock`` fails it, from the RECORDs the refused run read.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import GateIndex, uv_bin
from support.planted import Planted, planted_project
from support.rangeserver import RangeServer
from support.wheels import build_wheel, sha256_of

from envbuild.errors import ExitCode
from envbuild.index import records
from envbuild.proof.receipt import receipt_files


def listing(venv: Path) -> dict[str, tuple[int, int | str]] | None:
    """Every file of the venv (not bytecode): {relative path: (size, inode, or a link's target)};
    None: no venv."""
    if not venv.exists():
        return None
    return {
        str(p.relative_to(venv)): (
            p.lstat().st_size,
            str(p.readlink()) if p.is_symlink() else p.lstat().st_ino,
        )
        for p in sorted(venv.rglob("*"))
        if "__pycache__" not in p.parts and (p.is_symlink() or not p.is_dir())
    }


def dists(venv: Path) -> set[str]:
    return {p.name for p in venv.glob("lib/python3*/site-packages/*.dist-info")}


def uv_sync(project: Planted, venv: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = installer_env(home)
    env.pop("UV_NO_CONFIG")  # the project's own [tool.uv] and indexes
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    return subprocess.run(
        [uv_bin(), "sync", "--frozen"],
        cwd=project.folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def failure(data: Path) -> dict[str, object]:
    doc = json.loads(receipt_files(data / "receipts", ("provision",))[0].read_text())
    got = doc["payload"]["failure"]
    assert isinstance(got, dict)
    return got


@pytest.fixture
def planted(gate_index: GateIndex, tmp_path: Path) -> Iterator[Callable[[str], Planted]]:
    """``planted(kind)``: the project of that kind, locked, its index served for the test."""
    import contextlib

    with contextlib.ExitStack() as stack:
        yield lambda kind: stack.enter_context(planted_project(tmp_path, gate_index, kind))


@pytest.mark.slow
# the git host's case is the sdist's ground (a prepare that fails, the venv as it was): thorough
@pytest.mark.parametrize("kind", ["sdist", pytest.param("git", marks=pytest.mark.thorough)])
def test_a_failed_download_or_build_leaves_the_venv_as_uv_sync_leaves_it(
    kind: str,
    planted: Callable[[str], Planted],
    tmp_path: Path,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    healthy, bad = planted("healthy"), planted(kind)
    home = tmp_path / "home"
    # uv: an existing venv keeps every file; a new one is made, and left empty
    uv_venv = tmp_path / "uv-venv"
    assert uv_sync(healthy, uv_venv, home).returncode == 0
    uv_before = listing(uv_venv)
    out = uv_sync(bad, uv_venv, home)
    assert out.returncode != 0 and listing(uv_venv) == uv_before, out.stderr
    out = uv_sync(bad, tmp_path / "uv-fresh", home)
    assert out.returncode != 0 and dists(tmp_path / "uv-fresh") == set(), out.stderr

    # envbuild: the same, and a fresh root gets no venv at all
    data = tmp_path / "data"
    res = run_envbuild("provision", "--lock", healthy.lock, "--root", data)
    assert res.rc == 0, res.output
    before = listing(data / "venv")
    res = run_envbuild("provision", "--lock", bad.lock, "--root", data)
    assert res.rc == ExitCode.INSTALL, res.output
    assert listing(data / "venv") == before
    said = res.stderr.split("error: ", 1)[1]
    assert said.startswith("preparing step 2 ('rest')") and "Nothing was installed" in said
    assert f"The venv {data / 'venv'} is as it was." in said
    assert ("broken-build" if kind == "sdist" else "gitdep") in said
    assert "envbuild/" not in res.stderr  # uv's words, no traceback of envbuild's own
    got = failure(data)
    assert (got["stage"], got["exit_code"]) == ("prepare", 5)
    assert got["venv"] == {"state": "untouched", "detail": f"the venv {data / 'venv'} is as it was"}
    res = run_envbuild("verify", "--root", data)
    assert res.rc == 0, res.output  # the venv of the healthy run, finished

    fresh = tmp_path / "fresh"
    res = run_envbuild("provision", "--lock", bad.lock, "--root", fresh)
    assert res.rc == ExitCode.INSTALL, res.output
    assert not (fresh / "venv").exists() and f"No venv was made at {fresh / 'venv'}" in res.stderr
    assert failure(fresh)["venv"]["state"] == "not-made"  # type: ignore[index]

    # the same with the early import warm-up (forced: it runs by itself on 4 cores or more): it is
    # stopped with the prepare, and nothing of it is left on the root
    early = tmp_path / "early"
    res = run_envbuild(
        "provision",
        "--lock",
        bad.lock,
        "--root",
        early,
        env={"ENVBUILD_IMPORT_WARMUP": "import", "PYTHONDONTWRITEBYTECODE": ""},
    )
    assert res.rc == ExitCode.INSTALL and "envbuild/" not in res.stderr, res.output
    assert not (early / "venv").exists()
    assert not [p.name for p in (early / "cache" / "prepare").iterdir() if p.is_dir()]


@pytest.mark.slow
def test_a_failure_after_the_install_began_puts_the_venv_back(
    planted: Callable[[str], Planted], tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    healthy, bad = planted("healthy"), planted("breaks-import")
    data = tmp_path / "data"
    assert run_envbuild("provision", "--lock", healthy.lock, "--root", data).rc == 0
    before = listing(data / "venv")
    res = run_envbuild("provision", "--lock", bad.lock, "--root", data)
    assert res.rc == ExitCode.ABI and "`import torch` fails" in res.stderr, res.output
    assert f"{data / 'venv'} is back as it was before this run" in res.stderr
    assert listing(data / "venv") == before  # the same files, the same inodes
    assert not (data / "venv.envbuild-before").exists()
    assert failure(data)["venv"]["state"] == "restored"  # type: ignore[index]
    res = run_envbuild("verify", "--root", data)
    assert res.rc == 0 and "failed" not in res.output, res.output

    # a venv this run made is left as it is, and the failure says what is there
    fresh = tmp_path / "fresh"
    res = run_envbuild("provision", "--lock", bad.lock, "--root", fresh)
    assert res.rc == ExitCode.ABI, res.output
    left = failure(fresh)["venv"]
    assert left["state"] == "left"  # type: ignore[index]
    assert "holds the steps done (torch, rest)" in left["detail"]  # type: ignore[index]
    assert "resumes at the final check" in res.stderr
    assert "sitebreaker-1.0.dist-info" in dists(fresh / "venv")


@pytest.mark.slow
def test_two_wheels_of_one_module_install_as_uv_installs_them_with_one_winner(
    planted: Callable[[str], Planted], tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    project = planted("overlap")
    out = uv_sync(project, tmp_path / "uv-venv", tmp_path / "home")
    assert out.returncode == 0, out.stderr
    data = tmp_path / "data"
    res = run_envbuild("provision", "--lock", project.lock, "--root", data, "--json")
    assert res.rc == 0, res.output
    assert dists(data / "venv") == dists(tmp_path / "uv-venv")
    assert "cvlike and cvlike-headless both install cvlike/__init__.py" in res.stderr
    assert "cvlike-headless's copy is the one kept" in res.stderr
    [site] = (data / "venv").glob("lib/python3*/site-packages")
    assert (site / "cvlike" / "__init__.py").read_text() == "WHO = 'cvlike-headless'\n"
    doc = json.loads(receipt_files(data / "receipts", ("provision",))[0].read_text())
    assert doc["payload"]["lock"]["overlaps"] == [
        {
            "packages": ["cvlike", "cvlike-headless"],
            "winner": "cvlike-headless",
            "paths": 1,
            "first": "cvlike/__init__.py",
        }
    ]
    res = run_envbuild("verify", "--root", data)
    assert res.rc == 0, res.output
    # a re-run changes nothing: the overlap is the stack's (its record), the winner still on disk
    res = run_envbuild("provision", "--lock", project.lock, "--root", data, "--json")
    assert res.rc == 0 and json.loads(res.stdout)["ran"] == [], res.output

    # check-lock, offline, from the RECORDs the provision read: a note, not a finding
    res = run_envbuild("check-lock", project.lock, "--offline")
    assert res.rc == 0, res.output
    assert "cvlike and cvlike-headless both install cvlike/__init__.py" in res.output


@pytest.mark.slow
def test_a_wheel_over_torchs_files_is_refused_before_anything_is_installed(
    planted: Callable[[str], Planted], tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    project = planted("overlap-torch")
    out = uv_sync(project, tmp_path / "uv-venv", tmp_path / "home")
    assert out.returncode == 0 and "torchpatch-1.0.dist-info" in dists(tmp_path / "uv-venv")

    # offline with an empty cache the gate cannot read the RECORDs, and says so
    res = run_envbuild("check-lock", project.lock, "--offline")
    assert res.rc == 0 and "could not be read in the cache: " in res.output, res.output
    assert "torchpatch 1.0" in res.output

    data = tmp_path / "data"
    res = run_envbuild("provision", "--lock", project.lock, "--root", data)
    assert res.rc == ExitCode.LOCK, res.output
    assert "torch and torchpatch both install torch/version.py" in res.stderr
    assert 'rule = "file-overlap", package = "torchpatch"' in res.stderr
    assert not (data / "venv").exists() and failure(data)["venv"]["state"] == "not-made"  # type: ignore[index]

    # the refused run read the RECORDs: check-lock now fails it, offline; a reviewed exception
    # accepts it
    res = run_envbuild("check-lock", project.lock, "--offline", "--json")
    assert res.rc == ExitCode.LOCK, res.output
    [found] = json.loads(res.stdout)["files"][0]["findings"]
    assert (found["rule"], found["package"]) == ("file-overlap", "torchpatch")
    accept = tmp_path / "accept.toml"
    accept.write_text(
        '[[accept]]\nrule = "file-overlap"\npackage = "torchpatch"\nreason = "reviewed"\n'
    )
    res = run_envbuild("check-lock", project.lock, "--offline", "--accept", accept)
    assert res.rc == 0, res.output


def test_a_wheels_record_is_read_by_range_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index.records``: the RECORD of a remote wheel over HTTP ranges (kilobytes), cached by
    sha256; a server without ranges gives None (the wheel is not streamed whole for it)."""
    wheel = build_wheel(
        tmp_path / "w", "big", "1.0", files={"big/__init__.py": "", "big/blob.bin": "x" * 400_000}
    )
    sha = sha256_of(wheel)
    from envbuild.index.client import TIMEOUT, session

    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    with RangeServer(wheel.parent) as server:
        got = records.remote_record(
            f"{server.url}/{wheel.name}", sha, http=session(), timeout=TIMEOUT
        )
        assert got is not None and set(got) == {"big/__init__.py", "big/blob.bin"}
        assert server.sent < 100_000  # not the wheel
    assert records.get(sha) == got
    with RangeServer(wheel.parent, ranges=False) as server:
        url = f"{server.url}/{wheel.name}"
        assert records.remote_record(url, "0" * 64, http=session(), timeout=TIMEOUT) is None
    assert records.get("0" * 64) is None


def test_overlaps_leave_out_identical_files() -> None:
    same = "sha256=abc"
    found = records.find_overlaps(
        {
            "nvidia-a": {"nvidia/__init__.py": same, "nvidia/a/x.so": "sha256=1"},
            "nvidia-b": {"nvidia/__init__.py": same, "nvidia/b/y.so": "sha256=2"},
            "Opencv_Python": {"cv2/__init__.py": "sha256=3", "cv2/a.so": "sha256=4"},
            "opencv-python-headless": {"cv2/__init__.py": "sha256=5", "cv2/a.so": "sha256=6"},
            "x": {"x-1.0.dist-info/RECORD": "", "../../../bin/tool": "sha256=7"},
            "y": {"y-1.0.dist-info/RECORD": "", "../../../bin/tool": "sha256=8"},
        }
    )
    assert found == [
        records.FileOverlap(
            ("opencv-python", "opencv-python-headless"), ("cv2/__init__.py", "cv2/a.so")
        )
    ]
    assert found[0].shown() == (
        "opencv-python and opencv-python-headless both install cv2/__init__.py and 1 more file(s)"
    )


def test_a_venv_on_an_overlay_filesystem_is_not_copied(tmp_path: Path) -> None:
    """``provision.restore.on_overlay``: the mount that holds the path decides (a link on an image's
    layer copies the whole file up, so such a venv is not copied before installing)."""
    from envbuild.provision.restore import on_overlay

    mounts = tmp_path / "mounts"
    mounts.write_text(
        "overlay / overlay rw,lowerdir=/l,upperdir=/u,workdir=/w 0 0\n"
        f"/dev/vdb {tmp_path} ext4 rw 0 0\n"
    )
    assert on_overlay(Path("/opt/venv"), mounts)
    assert not on_overlay(tmp_path / "data" / "venv", mounts)
    assert not on_overlay(Path("/opt/venv"), tmp_path / "missing")
