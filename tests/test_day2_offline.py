"""Offline needs nothing else (issue 24): a git requirement reaches a host with no network.

A git repository served over HTTP on loopback (git's dumb HTTP protocol: a bare repository and
``git update-server-info`` behind a static file server) is locked to a commit; ``wheelhouse
mirror`` builds it into a wheel and records the wheel's hash in ``lock.json``. Then the
repository and the index are taken away, and ``provision --offline`` runs in a network
namespace with no route at all (``unshare -rn``: not even loopback): every step installs from
the wheelhouse, hash-checked, and no git runs. A wheelhouse that lacks something is refused
before anything is made, with the list of what is missing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lockhelpers import lock_env, make_git_repo, manifest
from support.fixtures import EnvbuildResult, ScenarioIndex, Venv, installer_env
from support.index import StaticServer
from support.wheels import build_sdist

from envbuild.errors import ExitCode

pytestmark = pytest.mark.slow


def _unshare_works() -> bool:
    try:
        return (
            subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture
def git_http(tmp_path: Path) -> Iterator[tuple[str, StaticServer]]:
    """``http://127.0.0.1:PORT/gitpkg.git``: a bare clone of a fresh repository, served by git's
    dumb HTTP."""
    repo = make_git_repo(tmp_path)
    served = tmp_path / "git-served"
    served.mkdir()
    env = installer_env(tmp_path / "home")
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(repo), str(served / "gitpkg.git")], check=True, env=env
    )
    subprocess.run(
        ["git", "--git-dir", str(served / "gitpkg.git"), "update-server-info"], check=True, env=env
    )
    with StaticServer(served) as httpd:
        yield f"{httpd.url}/gitpkg.git", httpd


def _offline(
    tmp_path: Path, stack: Path, wheelhouse: Path, backend: str, *, netns: bool
) -> EnvbuildResult:
    argv = [
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
        "--python",
        sys.executable,
        "--backend",
        backend,
        "--offline",
        "--wheelhouse",
        str(wheelhouse),
    ]
    if netns:
        argv = ["unshare", "-rn", *argv]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=installer_env(tmp_path / "home"),
        timeout=600,
    )
    return EnvbuildResult(out.returncode, out.stdout, out.stderr)


def _seed_wheels(wheelhouse: Path, wheel_factory: Callable[..., Path]) -> None:
    """pip and setuptools from this interpreter's ensurepip, and a stand-in ``wheel``."""
    import ensurepip

    bundled = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("*.whl"))
    if len(bundled) < 2:
        pytest.skip("this interpreter's ensurepip bundles no wheels to seed a uv venv with")
    for w in bundled:
        shutil.copy(w, wheelhouse / w.name)
    shutil.copy(wheel_factory("wheel", "0.45.1"), wheelhouse)


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_git_requirement_reaches_an_offline_host(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    private_scenario_index: ScenarioIndex,
    git_http: tuple[str, StaticServer],
    tmp_path: Path,
    provisioned_venv: Venv,
    wheel_factory: Callable[..., Path],
    backend: str,
) -> None:
    url, httpd = git_http
    index = private_scenario_index
    # a direct-URL sdist: built like a git one
    sdist = build_sdist(tmp_path / "archives", "srcpkg-like", "1.0")
    index.server.add_repo("archives", sdist.parent)
    sdist_url = index.server.file_url("archives", sdist.name)
    stack = write_stack(
        [
            {"name": "helpers", "packages": ["einops-like==0.8.1"], "index_url": index.pypi_url},
            {
                "name": "git",
                "packages": [
                    f"gitpkg-like @ git+{url}@main",
                    "fla-core-like==0.4.2",
                    f"srcpkg-like @ {sdist_url}",
                ],
                "no_deps": True,
                "index_url": index.pypi_url,
            },
        ]
    )
    env = lock_env(tmp_path)
    r = run_envbuild("lock", "--stack", stack, env=env)
    assert r.rc == 0, r.output
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()

    # an empty wheelhouse: refused before step 1, with everything that is missing, nothing made
    r = _offline(tmp_path, stack, wheelhouse, backend, netns=False)
    assert r.rc == 5, r.output
    assert (
        f"lacks {7 + (3 if backend == 'uv' else 0)} file(s)" in r.stderr
        and "nothing was made" in r.stderr
    )
    assert f"git: gitpkg-like @ git+{url}@" in r.stderr and "no wheel built from it" in r.stderr
    assert "torch: torch==" in r.stderr and "helpers: einops-like==0.8.1" in r.stderr
    assert not (tmp_path / "data").exists()

    # the mirror builds the git requirement at its locked commit and records the wheel in the lock
    r = run_envbuild(
        "wheelhouse", "mirror", "--lock", stack.parent, "--out", wheelhouse, "--json", env=env
    )
    assert r.rc == 0, r.output
    built = json.loads(r.stdout)["built"]
    assert [(b["name"], b["reused"]) for b in built] == [
        ("gitpkg-like", False),
        ("srcpkg-like", False),
    ]
    pin = next(
        p
        for s in manifest(stack.parent)["steps"]
        for p in s["packages"]
        if p["name"] == "gitpkg-like"
    )
    assert pin["vcs"]["ref"] == "main" and pin["vcs"]["wheel"]["sha256"] == built[0]["sha256"]
    assert (wheelhouse / pin["vcs"]["wheel"]["filename"]).is_file()
    record = next(
        a
        for a in json.loads((wheelhouse / "wheelhouse.json").read_text())["artifacts"]
        if a["filename"] == pin["vcs"]["wheel"]["filename"]
    )
    assert (
        record["built_from"]["commit"] == pin["vcs"]["commit"]
        and record["built_from"]["source_date_epoch"]
    )
    r = run_envbuild(
        "wheelhouse", "mirror", "--lock", stack.parent, "--out", wheelhouse, "--json", env=env
    )
    assert r.rc == 0 and all(b["reused"] for b in json.loads(r.stdout)["built"]), r.output
    # lock.json changed: still a good lock
    r = run_envbuild("check-lock", "--stack", stack, "--offline", env=env)
    assert r.rc == 0, r.output

    # one file gone from the wheelhouse: named, exit 5
    einops = next(wheelhouse.glob("einops_like-*.whl"))
    einops.rename(tmp_path / einops.name)
    r = _offline(tmp_path, stack, wheelhouse, backend, netns=False)
    assert (
        r.rc == 5
        and f"lacks {1 + (3 if backend == 'uv' else 0)} file(s)" in r.stderr
        and "helpers: einops-like==0.8.1" in r.stderr
    ), r.output
    (tmp_path / einops.name).rename(einops)

    # uv seeds a new venv with pip, setuptools, wheel: from the wheelhouse, offline
    if backend == "uv":
        r = _offline(tmp_path, stack, wheelhouse, backend, netns=False)
        assert r.rc == 5 and "the new venv: wheel (the uv backend seeds it" in r.stderr, r.output
        _seed_wheels(wheelhouse, wheel_factory)

    # the repository and the index go away; the host has no network at all
    httpd.stop()
    index.server.stop()
    if not _unshare_works():
        pytest.skip("unshare -rn is not allowed here (no user/network namespaces)")
    r = _offline(tmp_path, stack, wheelhouse, backend, netns=True)
    assert r.rc == 0, r.output
    assert provisioned_venv.read("gitpkg_like/__init__.py") == "FROM_GIT = True\n"
    assert provisioned_venv.version("fla-core-like") == "0.4.2"
    assert provisioned_venv.version("srcpkg-like") == "1.0"
    log = (tmp_path / "data" / "logs" / "03-git.log").read_text()
    # the git line replaced by the built wheel
    assert "git clone" not in log and "03-git.offline.txt" in log
    steps = tmp_path / "data" / ".envbuild" / "steps"
    assert (
        "--hash=sha256:" + pin["vcs"]["wheel"]["sha256"]
        in (steps / "03-git.offline.txt").read_text()
    )
    shutil.rmtree(tmp_path / "data")


def test_a_wheelhouse_file_changed_after_the_mirror_is_refused_before_anything_is_made(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    private_scenario_index: ScenarioIndex,
    tmp_path: Path,
    provisioned_venv: Venv,
) -> None:
    """One byte of a locked wheel changes after the mirror (same size, so the mirror's record of
    its hash still matches name and size): the offline run hashes the files before step 1 and
    names the file with both hashes, exit 5, no data root and no venv. Restored, it installs."""
    index = private_scenario_index
    stack = write_stack(
        [{"name": "helpers", "packages": ["einops-like==0.8.1"], "index_url": index.pypi_url}]
    )
    env = lock_env(tmp_path)
    r = run_envbuild("lock", "--stack", stack, env=env)
    assert r.rc == 0, r.output
    wheelhouse = tmp_path / "wheelhouse"
    r = run_envbuild("wheelhouse", "mirror", "--lock", stack.parent, "--out", wheelhouse, env=env)
    assert r.rc == 0, r.output
    index.server.stop()
    wheel = next(wheelhouse.glob("einops_like-0.8.1-*.whl"))
    good = wheel.read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0x01
    wheel.write_bytes(bytes(damaged))
    want, got = hashlib.sha256(good).hexdigest(), hashlib.sha256(damaged).hexdigest()

    r = _offline(tmp_path, stack, wheelhouse, "pip", netns=False)
    assert r.rc == ExitCode.INSTALL, r.output
    assert f"{wheel.name}: the lock pins sha256 {want}, the file has {got}" in r.stderr, r.stderr
    assert "1 file(s) in the wheelhouse" in r.stderr and "nothing was made" in r.stderr
    assert "Traceback" not in r.output
    assert not (tmp_path / "data").exists()  # no data root, no venv, no step

    wheel.write_bytes(good)
    r = _offline(tmp_path, stack, wheelhouse, "pip", netns=False)
    assert r.rc == 0, r.output
    assert provisioned_venv.version("einops-like") == "0.8.1"
