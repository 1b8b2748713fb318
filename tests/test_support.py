"""The test support code itself: wheels are valid, the index serves what pip expects, faults
fire."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import parse_wheel_filename
from support.fixtures import (
    NIGHTLY_TORCH,
    PYTORCH_TRITON,
    ScenarioIndex,
    ScenarioWheels,
    Venv,
    installer_env,
)
from support.index import BlackHole, IndexServer, UnreachablePort
from support.wheels import build_sdist, build_wheel, sha256_of
from wheel.wheelfile import WheelFile

from envbuild.spec import load_spec


def _get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


# ----------------------------------------------------------------------------- wheels


def test_wheel_is_valid_and_reproducible(tmp_path: Path) -> None:
    kwargs: dict[str, Any] = dict(
        requires=["pytorch-triton==3.7.0+git9c288bc5", "extra-thing; extra == 'full'"],
        files={"torch/__init__.py": "x = 1\n", "torch/version.py": "cuda = '13.2'\n"},
    )
    first = build_wheel(tmp_path / "a", "torch", NIGHTLY_TORCH, **kwargs)
    second = build_wheel(tmp_path / "b", "torch", NIGHTLY_TORCH, **kwargs)
    assert first.name == f"torch-{NIGHTLY_TORCH}-py3-none-any.whl"
    assert sha256_of(first) == sha256_of(second)
    name, version, _, tags = parse_wheel_filename(first.name)
    assert (str(name), str(version)) == ("torch", NIGHTLY_TORCH)
    assert {str(t) for t in tags} == {"py3-none-any"}
    with WheelFile(first) as wf:  # reading through WheelFile checks every RECORD hash
        for member in wf.namelist():
            wf.read(member)
        meta = wf.read(f"torch-{NIGHTLY_TORCH}.dist-info/METADATA").decode()
    assert "Requires-Dist: pytorch-triton==3.7.0+git9c288bc5" in meta
    assert "Provides-Extra: full" in meta
    assert not list((tmp_path / "a").glob(".wheel-*")), "temp folder left behind"


def test_wheel_defaults_and_tags(tmp_path: Path) -> None:
    path = build_wheel(
        tmp_path,
        "Some.Name_pkg",
        "1.0rc1",
        python_tag="cp311",
        abi_tag="cp311",
        platform_tag="linux_x86_64",
    )
    assert path.name == "some_name_pkg-1.0rc1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(path) as zf:
        assert "some_name_pkg/__init__.py" in zf.namelist()
        assert "Root-Is-Purelib: false" in zf.read("some_name_pkg-1.0rc1.dist-info/WHEEL").decode()


def test_sdist_layout(tmp_path: Path) -> None:
    path = build_sdist(tmp_path, "tiny-sdist", "0.1", requires=["einops-like"])
    assert path.name == "tiny_sdist-0.1.tar.gz"
    again = build_sdist(tmp_path / "again", "tiny-sdist", "0.1", requires=["einops-like"])
    assert sha256_of(path) == sha256_of(again)
    with tarfile.open(path) as tf:
        names = tf.getnames()
        member = tf.extractfile("tiny_sdist-0.1/pyproject.toml")
        assert member is not None
        pyproject = member.read().decode()
    assert "tiny_sdist-0.1/tiny_sdist/__init__.py" in names
    assert 'dependencies = ["einops-like"]' in pyproject
    assert 'backend-path = ["_backend"]' in pyproject
    st = build_sdist(tmp_path / "st", "tiny-sdist", "0.1", backend="setuptools")
    with tarfile.open(st) as tf:
        member = tf.extractfile("tiny_sdist-0.1/pyproject.toml")
        assert member is not None
        pyproject = member.read().decode()
    assert (
        'build-backend = "setuptools.build_meta"' in pyproject
        and 'packages = ["tiny_sdist"]' in pyproject
    )


# ----------------------------------------------------------------------------- the index


def test_index_pages(scenario_index: ScenarioIndex) -> None:
    srv = scenario_index.server
    status, root = _get(scenario_index.nightly_url + "/")
    assert status == 200
    assert 'href="torch/"' in root and 'href="pytorch-triton/"' in root
    status, page = _get(scenario_index.nightly_url + "/torch/")
    assert status == 200
    wheel = scenario_index.wheels.wheel("torch", NIGHTLY_TORCH, repo="nightly")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"/nightly/files/{wheel.name}#sha256={digest}" in page
    # the nightly torch is only on the nightly index; the pypi index has the decoys
    status, pypi_torch = _get(scenario_index.pypi_url + "/torch/")
    assert "2.12.0.dev" not in pypi_torch and "torch-2.13.0-py3-none-any.whl" in pypi_torch
    # non-normalized names redirect to the normalized page (urllib follows it)
    status, page = _get(scenario_index.pypi_url + "/Pytorch_Triton")
    assert status == 200 and PYTORCH_TRITON.replace("+", "%2B") not in page
    assert f"pytorch_triton-{PYTORCH_TRITON}-py3-none-any.whl" in page
    assert _get(scenario_index.pypi_url + "/no-such-project/")[0] == 404
    assert _get(srv.url + "/no-such-repo/simple/")[0] == 404
    status, flat = _get(scenario_index.pypi_flat)
    assert status == 200 and "einops_like-0.8.1-py3-none-any.whl#sha256=" in flat
    with urllib.request.urlopen(srv.file_url("nightly", wheel.name), timeout=5) as resp:
        assert resp.read() == wheel.read_bytes()


def test_nightly_venv_has_the_baseline(nightly_venv: Venv) -> None:
    """Real pip installed the nightly torch from the nightly index, its deps from either."""
    dists = nightly_venv.dists()
    assert dists["torch"].version == NIGHTLY_TORCH
    assert dists["pytorch-triton"].version == PYTORCH_TRITON
    assert "triton" not in dists
    assert nightly_venv.owners("triton/__init__.py") == ["pytorch-triton"]
    out = nightly_venv.run(
        "-c", "import torch; print(torch.__version__, torch.version.cuda)", check=True
    )
    assert out.stdout.split() == [NIGHTLY_TORCH, "13.2"]


def test_pip_installs_from_find_links_offline(
    make_venv: Callable[..., Venv], scenario_index: ScenarioIndex
) -> None:
    venv = make_venv()
    scenario_index.server.clear_requests()
    venv.pip(
        "install",
        "--no-index",
        "--find-links",
        scenario_index.pypi_flat,
        "mamba-like==1.0",
        "torch==2.12.0",
        check=True,
    )
    assert venv.version("mamba-like") == "1.0"
    assert venv.version("torch") == "2.12.0"
    assert venv.owners("triton/__init__.py") == ["triton"]
    assert not scenario_index.server.requested("*/simple/*"), (
        "find-links must not touch the simple index"
    )
    assert scenario_index.server.requested("/pypi/flat/")


def test_sdist_isolated_build_sees_the_index_torch_not_the_installed_one(
    tmp_path: Path,
    nightly_venv: Venv,
    index_server: Callable[..., IndexServer],
    scenario_wheels: ScenarioWheels,
) -> None:
    """Why build isolation is a trap, for real: an sdist with torch in [build-system] requires,
    built with isolation, compiles against the newest stable torch from the index, not the
    installed nightly."""
    build_sdist(
        tmp_path / "sdists",
        "ext-like",
        "0.1",
        requires=["torch"],
        build_requires=["torch"],
        probe=["torch"],
    )
    srv = index_server({"pypi": scenario_wheels.pypi, "sdists": tmp_path / "sdists"})
    nightly_venv.pip(
        "install",
        "--index-url",
        srv.simple_url("sdists"),
        "--extra-index-url",
        srv.simple_url("pypi"),
        "ext-like==0.1",
        check=True,
    )
    assert nightly_venv.version("torch") == NIGHTLY_TORCH  # the installed torch is untouched...
    built_against = json.loads(nightly_venv.read("ext_like/_build_env.json"))
    assert built_against == {"torch": "2.13.0"}  # ...but the extension was built against another


def test_sdist_without_isolation_sees_the_installed_torch(
    tmp_path: Path, nightly_venv: Venv
) -> None:
    sdist = build_sdist(
        tmp_path, "ext-like", "0.1", requires=["torch"], build_requires=["torch"], probe=["torch"]
    )
    nightly_venv.pip(
        "install", "--no-index", "--no-build-isolation", "--no-deps", sdist, check=True
    )
    assert json.loads(nightly_venv.read("ext_like/_build_env.json")) == {"torch": NIGHTLY_TORCH}


def test_private_index_can_lose_the_nightly(
    private_scenario_index: ScenarioIndex, scenario_index: ScenarioIndex
) -> None:
    """A nightly leaving its index: deleting it from a private copy leaves the shared one alone."""
    private_scenario_index.wheels.wheel("torch", NIGHTLY_TORCH, repo="nightly").unlink()
    assert _get(private_scenario_index.nightly_url + "/torch/")[0] == 404
    assert _get(scenario_index.nightly_url + "/torch/")[0] == 200
    assert private_scenario_index.server.port != scenario_index.server.port


# ----------------------------------------------------------------------------- faults


@pytest.fixture
def private_index(tmp_path: Path, index_server: Callable[..., IndexServer]) -> IndexServer:
    build_wheel(
        tmp_path / "pypi",
        "einops-like",
        "0.8.1",
        files={"einops_like/__init__.py": "x = 1\n" * 4000},
    )
    return index_server({"pypi": tmp_path / "pypi"})


def test_fault_corrupt_fails_the_hash_check(
    private_index: IndexServer, make_venv: Callable[..., Venv]
) -> None:
    private_index.fail("*/files/einops_like-*", "corrupt")
    out = make_venv().pip("install", "--index-url", private_index.simple_url("pypi"), "einops-like")
    assert out.returncode != 0
    assert "DO NOT MATCH THE HASHES" in out.stderr


def test_fault_drop_mid_download(
    private_index: IndexServer, make_venv: Callable[..., Venv]
) -> None:
    private_index.fail("*/files/einops_like-*", "drop")
    out = make_venv().pip(
        "install", "--retries", "0", "--index-url", private_index.simple_url("pypi"), "einops-like"
    )
    assert out.returncode != 0
    # pip 23's vendored urllib3 does not enforce Content-Length: the short file fails the hash
    # check; newer pips report the broken connection itself. Either way nothing is installed.
    assert re.search(
        r"IncompleteRead|Connection broken|ProtocolError|DO NOT MATCH THE HASHES", out.stderr
    ), out.stderr
    assert [r.status for r in private_index.requested("*/files/*")] == [0]


def test_fault_times_and_statuses(private_index: IndexServer) -> None:
    url = private_index.simple_url("pypi") + "/einops-like/"
    private_index.fail("/pypi/simple/*", 503, times=1)
    assert _get(url)[0] == 503
    assert _get(url)[0] == 200  # the fault was used up
    private_index.fail("/pypi/simple/*", "reset")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(url, timeout=5)
    private_index.clear_faults()
    assert _get(url)[0] == 200
    assert [r.status for r in private_index.requested("/pypi/simple/*")] == [503, 200, 0, 200]


def test_fault_stall_is_released_on_stop(tmp_path: Path) -> None:
    srv = IndexServer({"pypi": tmp_path}).start()
    srv.fail("*", "stall", seconds=60)
    with pytest.raises((TimeoutError, urllib.error.URLError, socket.timeout)):
        urllib.request.urlopen(srv.simple_url("pypi") + "/", timeout=0.5)
    started = time.monotonic()
    srv.stop()
    # the stall's 60 s are not waited out: the server's contract, 5 s far above a loaded machine's
    # noise
    assert time.monotonic() - started < 5


def test_unreachable_port_and_black_hole(make_venv: Callable[..., Venv]) -> None:
    with UnreachablePort() as dead:
        with pytest.raises(urllib.error.URLError) as info:
            urllib.request.urlopen(dead.url, timeout=5)
        assert isinstance(info.value.reason, ConnectionRefusedError)  # refused, not timed out
    with BlackHole() as hole, pytest.raises((TimeoutError, urllib.error.URLError, socket.timeout)):
        urllib.request.urlopen(hole.url, timeout=0.5)


def test_installer_env_cuts_off_host_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "file:///somewhere")
    monkeypatch.setenv("UV_INDEX_URL", "file:///somewhere")
    env = installer_env(tmp_path / "home")
    assert "PIP_INDEX_URL" not in env and "UV_INDEX_URL" not in env
    assert env["PIP_CONFIG_FILE"] == "/dev/null" and env["UV_NO_CONFIG"] == "1"
    assert env["HOME"] == str(tmp_path / "home")


# ----------------------------------------------------------------------------- stack specs


def test_write_stack_is_a_valid_spec(
    write_stack: Callable[..., Path], scenario_index: ScenarioIndex
) -> None:
    path = write_stack(
        [
            {"name": "first-owner", "packages": ["overlap-a==1.0"]},
            {
                "name": "tools",
                "packages": ["eager-upgrader==1.0"],
                "upgrade": True,
                "upgrade_strategy": "eager",
                "env": {"MAX_JOBS": "2"},
            },
        ],
        overlaps=[{"packages": ["overlap-a", "overlap-b"], "winner": "overlap-b"}],
    )
    spec = load_spec(path, environ={})
    assert [s.name for s in spec.steps] == ["torch", "first-owner", "tools"]
    assert spec.baseline_index == 0
    assert spec.steps[0].index_url == scenario_index.nightly_url
    assert spec.steps[0].extra_index_urls == (scenario_index.pypi_url,)
    assert spec.steps[1].index_url == scenario_index.pypi_url
    assert spec.steps[2].upgrade_strategy == "eager" and dict(spec.steps[2].env) == {
        "MAX_JOBS": "2"
    }
    assert spec.abi.version == NIGHTLY_TORCH and spec.abi.triton_provider == "pytorch-triton"
    assert spec.abi.overlaps[0].winner == "overlap-b"


def test_every_test_left_to_thorough_exists_and_says_what_keeps_its_ground() -> None:
    """``support.thorough`` names tests by node id: each names a test function of its file (a
    renamed test would silently come back into ``make test``) and the test that keeps its ground."""
    import ast

    from support.fixtures import REPO_ROOT
    from support.thorough import THOROUGH

    missing = []
    for nodeid, ground in THOROUGH.items():
        file, _, name = nodeid.partition("::")
        tree = ast.parse((REPO_ROOT / file).read_text(encoding="utf-8"))  # a whole file: no name
        functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if (name and name.split("[", 1)[0] not in functions) or not ground.strip():
            missing.append(nodeid)
    assert not missing, missing
