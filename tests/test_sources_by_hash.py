"""Sources by hash, not by host (issue 31): a locked file comes from any source that serves its
sha256.

A stack locked against its own indexes (``${T_NIGHTLY}``, ``${T_PYPI}``) is provisioned on a
host where those indexes do not answer and pip's configured mirror (``PIP_INDEX_URL``, a real
index over HTTP, and ``PIP_FIND_LINKS``, a folder) serves the very files: one notice naming the
host, every file installed hash-checked. A mirror whose file has another sha256 is never used:
exit 3 naming the file, its sha256 and every source tried, before anything is made. A verified
re-run of the finished environment makes no network call at all (a network namespace with no
interface; sources that would swallow a connection).
"""

from __future__ import annotations

import errno
import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from lockhelpers import lock_env, manifest
from support.fixtures import NIGHTLY_TORCH, EnvbuildResult, ScenarioIndex, Venv, installer_env
from support.index import BlackHole, IndexServer
from support.wheels import build_wheel

from envbuild.errors import ExitCode

pytestmark = pytest.mark.slow

DEAD = "http://nightly.invalid/simple"  # RFC 6761: .invalid never resolves
STEPS = [
    {
        "name": "torch",
        "packages": [f"torch=={NIGHTLY_TORCH}"],
        "index_url": "${T_NIGHTLY}",
        "extra_index_urls": ["${T_PYPI}"],
        "pre": True,
    },
    {"name": "helpers", "packages": ["einops-like==0.8.1"], "index_url": "${T_PYPI}"},
]


def _unshare_works() -> bool:
    try:
        return (
            subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _provision(
    tmp_path: Path, stack: Path, backend: str, env: Mapping[str, str], *, netns: bool = False
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
    ]
    if netns:
        argv = ["unshare", "-rn", *argv]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=installer_env(tmp_path / "home", {**lock_env(tmp_path), **env}),
        timeout=600,
    )
    return EnvbuildResult(out.returncode, out.stdout, out.stderr)


@pytest.fixture
def locked(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    private_scenario_index: ScenarioIndex,
    tmp_path: Path,
) -> Path:
    """The stack, locked against its own (live) indexes."""
    index = private_scenario_index
    stack = write_stack(STEPS, baseline=False)
    live = {"T_NIGHTLY": index.nightly_url, "T_PYPI": index.pypi_url, **lock_env(tmp_path)}
    r = run_envbuild("lock", "--stack", stack, env=live)
    assert r.rc == 0, r.output
    return stack


def _mirror(
    tmp_path: Path, index: ScenarioIndex, index_server: Callable[[Mapping[str, Path]], IndexServer]
) -> tuple[IndexServer, Path]:
    """pip's configured mirror: the PyPI stand-in's files on an index of its own, the nightly's in a
    folder."""
    pypi, links = tmp_path / "mirror-pypi", tmp_path / "mirror-links"
    shutil.copytree(index.wheels.pypi, pypi)
    shutil.copytree(index.wheels.nightly, links)
    return index_server({"mirror": pypi}), links


def _locked_file(stack: Path, name: str) -> tuple[str, str]:
    """(file name, sha256) of the one locked file of ``name``."""
    package = next(
        p for s in manifest(stack.parent)["steps"] for p in s["packages"] if p["name"] == name
    )
    (artifact,) = package["artifacts"]
    return artifact["filename"], artifact["sha256"]


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_a_dead_index_is_a_notice_when_the_mirror_serves_the_files(
    locked: Path,
    private_scenario_index: ScenarioIndex,
    index_server: Callable[[Mapping[str, Path]], IndexServer],
    tmp_path: Path,
    provisioned_venv: Venv,
    backend: str,
) -> None:
    server, links = _mirror(tmp_path, private_scenario_index, index_server)
    # the lock's indexes are gone; the names no longer resolve either
    private_scenario_index.server.stop()
    env = {
        "T_NIGHTLY": DEAD,
        "T_PYPI": "http://pypi.invalid/simple",
        "PIP_INDEX_URL": server.simple_url("mirror"),
        "PIP_FIND_LINKS": str(links),
    }
    r = _provision(tmp_path, locked, backend, env)
    assert r.rc == 0, r.output
    notices = [line for line in r.output.splitlines() if line.startswith("notice:")]
    assert len(notices) == 2, r.output  # one line per host that does not answer
    assert notices[0].startswith(
        f"notice: {DEAD} does not answer (host name does not resolve); the locked files "
        "of step torch come by sha256 from "
    ), notices
    assert (
        "http://pypi.invalid/simple does not answer" in notices[1]
        and "steps torch, helpers" in notices[1]
    )
    assert "error" not in r.stderr.lower() and "Traceback" not in r.output
    assert (
        provisioned_venv.version("torch") == NIGHTLY_TORCH
        and provisioned_venv.version("einops-like") == "0.8.1"
    )
    assert server.requested("/mirror/files/einops_like-*"), (
        "the helper's wheel came from the mirror"
    )

    # the finished environment re-verifies with no network at all: no interface in its namespace
    if _unshare_works():
        r = _provision(tmp_path, locked, backend, env, netns=True)
        assert r.rc == 0 and "nothing to do" in r.output and "notice:" not in r.output, r.output
    # ... and with every source a black hole that would swallow a connection: none is attempted
    # (nor probed: a probe would wait out its 30 s deadline there and say so in a notice)
    with BlackHole() as hole:
        server.clear_requests()
        r = _provision(
            tmp_path,
            locked,
            backend,
            {
                "T_NIGHTLY": hole.url,
                "T_PYPI": hole.url,
                "PIP_INDEX_URL": hole.url,
                "PIP_FIND_LINKS": hole.url,
            },
        )
        assert r.rc == 0 and "nothing to do" in r.output and "notice:" not in r.output, r.output
        assert _no_connection_waiting(hole), "a connection to a package source was attempted"
    assert server.requested() == []


def _no_connection_waiting(hole: BlackHole) -> bool:
    """Whether the black hole's backlog is empty: the kernel completes every handshake into it."""
    sock: socket.socket = hole._sock  # the listening socket is the evidence
    sock.setblocking(False)
    try:
        conn, _ = sock.accept()
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
    conn.close()
    return False


def test_a_file_with_another_sha256_is_never_taken(
    locked: Path,
    private_scenario_index: ScenarioIndex,
    index_server: Callable[[Mapping[str, Path]], IndexServer],
    tmp_path: Path,
) -> None:
    """The mirror's torch has the locked file's name but other bytes: no source serves the locked
    file, so the run stops before anything is made, naming the file, its sha256 and every source."""
    server, links = _mirror(tmp_path, private_scenario_index, index_server)
    filename, sha256 = _locked_file(locked, "torch")
    (links / filename).unlink()
    forged = build_wheel(
        tmp_path / "forged", "torch", NIGHTLY_TORCH, files={"torch/__init__.py": "FORGED = True\n"}
    )
    assert forged.name == filename
    shutil.copy(forged, links / filename)
    private_scenario_index.server.stop()
    env = {
        "T_NIGHTLY": DEAD,
        "T_PYPI": "http://pypi.invalid/simple",
        "PIP_INDEX_URL": server.simple_url("mirror"),
        "PIP_FIND_LINKS": str(links),
    }
    r = _provision(tmp_path, locked, "uv", env)
    assert r.rc == ExitCode.PREFLIGHT, r.output
    assert "no package source serves 1 locked file(s)" in r.stderr, r.stderr
    assert f"torch: torch=={NIGHTLY_TORCH}: {filename} (sha256 {sha256})" in r.stderr
    # each source's verdict: the dead ones failed to resolve (no deadline waited out)
    for source in (
        f"{DEAD} [the step's]: host name does not resolve",
        "http://pypi.invalid/simple [the step's]: host name does not resolve",
        f"{server.simple_url('mirror')} [pip's configuration]: answers",
        f"{links} [pip's configuration]: answers",
    ):
        assert source in r.stderr, r.stderr
    assert "Traceback" not in r.output
    # nothing was made
    assert not (tmp_path / "data").exists() and not (tmp_path / "home" / "venv").is_symlink()


def test_a_locked_step_is_the_same_step_from_any_source(tmp_path: Path) -> None:
    """A locked step's identity in the manifest leaves its sources out (an unlocked step's keeps
    them: there they decide what resolves); a manifest that recorded the step's plan digest is
    taken as the same step, not run again."""
    from envbuild.plan import PlannedStep, PlanOptions, make_plan
    from envbuild.provision.core import _identities
    from envbuild.provision.sources import step_identity
    from envbuild.provision.state import Manifest
    from envbuild.spec import load_spec

    stack = tmp_path / "stack.toml"
    stack.write_text(
        'schema = 1\nname = "t"\npython = "3.11"\n[abi]\npackage = "torch"\nversion = "2.13.0"\n'
        '[[step]]\nname = "torch"\npackages = ["torch==2.13.0"]\nindex_url = "${T_INDEX}"\n'
    )
    pins = tmp_path / "01-torch.txt"
    pins.write_text("torch==2.13.0 --hash=sha256:" + "0" * 64 + "\n")

    def step(index: str, locked: bool, wheelhouse: str | None = None) -> PlannedStep:
        spec = load_spec(stack, {"T_INDEX": index})
        return make_plan(
            spec,
            PlanOptions(
                backend="uv", wheelhouse=wheelhouse, locked={"torch": pins} if locked else {}
            ),
        ).steps[0]

    a, b = step("https://a.example/simple", True), step("https://b.example/simple", True)
    assert a.digest != b.digest and step_identity(a) == step_identity(b)
    assert step_identity(step("https://a.example/simple", True, "/wheelhouse")) == step_identity(a)
    u1, u2 = step("https://a.example/simple", False), step("https://b.example/simple", False)
    assert step_identity(u1) != step_identity(u2)

    plan = make_plan(
        load_spec(stack, {"T_INDEX": "https://a.example/simple"}),
        PlanOptions(backend="uv", locked={"torch": pins}),
    )
    recorded = Manifest(path=tmp_path / "manifest.json")
    recorded.sync_steps([("torch", plan.steps[0].digest)])
    recorded.state("torch").status = "ok"
    assert (
        recorded.pending(_identities(plan)) == ([], []) and recorded.state("torch").status == "ok"
    )


def test_pip_config_sources_take_pips_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pip config list`` lists ``:env:`` before ``global`` before ``install``; pip itself takes
    PIP_* variables over the [install] section over [global]."""
    from envbuild.installer.pip import pip_config_sources

    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nfind-links = /from-global\nindex-url = https://global.example/simple\n"
        "[install]\nfind-links = /from-install\n"
    )
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    env = installer_env(tmp_path / "home", {"PIP_CONFIG_FILE": str(conf)})
    got = pip_config_sources(env)
    assert got.find_links == ("/from-install",) and got.index_url == "https://global.example/simple"
    got = pip_config_sources({**env, "PIP_FIND_LINKS": "/from-env /and-env"})
    assert got.find_links == ("/from-env", "/and-env")
    # pip's answer is kept, one file per key: both answers are there
    kept = [
        json.loads(f.read_text())["values"] for f in (tmp_path / "cache" / "pip-config").glob("*")
    ]
    assert len(kept) == 2 and ["/from-env", "/and-env"] in [v.get("find-links") for v in kept]


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_a_forged_copy_beside_the_real_file_is_never_installed(
    locked: Path,
    private_scenario_index: ScenarioIndex,
    index_server: Callable[[Mapping[str, Path]], IndexServer],
    tmp_path: Path,
    provisioned_venv: Venv,
    backend: str,
) -> None:
    """The find-links folder holds a torch with the locked name and other bytes, the mirror index
    the real one: the installer reads both, and installs the bytes the lock pins."""
    server, links = _mirror(tmp_path, private_scenario_index, index_server)
    filename, _ = _locked_file(locked, "torch")
    shutil.copy(links / filename, tmp_path / "mirror-pypi" / filename)
    forged = build_wheel(
        tmp_path / "forged", "torch", NIGHTLY_TORCH, files={"torch/__init__.py": "FORGED = True\n"}
    )
    shutil.copy(forged, links / filename)
    private_scenario_index.server.stop()
    env = {
        "T_NIGHTLY": DEAD,
        "T_PYPI": "http://pypi.invalid/simple",
        "PIP_INDEX_URL": server.simple_url("mirror"),
        "PIP_FIND_LINKS": str(links),
    }
    r = _provision(tmp_path, locked, backend, env)
    assert r.rc == 0, r.output
    assert provisioned_venv.version("torch") == NIGHTLY_TORCH
    assert "FORGED" not in provisioned_venv.read("torch/__init__.py")
