"""The fleet's shared build cache (``--build-cache DIR|URL``, ``envbuild.wheelhouse.sharedcache``):
real ``envbuild`` processes, each a "host" of its own (its own HOME, local build cache and output
folder), one shared folder between them.

- one builder per key: three ``wheelhouse build`` processes at once compile once, the two others
  say which host builds and wait, and all three hold the same wheel bytes;
- trust nothing: a published wheel whose bytes, record or key parts are wrong is never installed,
  it is rebuilt and republished, and the output says what was wrong;
- a builder killed (``kill -9``) or frozen (``SIGSTOP``: its heartbeat stops) mid-build does not
  block the next one past the takeover bound, and the output says so;
- an ``http://`` cache is read only: taken from, never written; one that does not answer is a
  warning and a local build;
- ``provision --lock`` of a lock whose sdist compiles a C++ torch extension against the real CPU
  torch, three data roots at once (``thorough``): one compile, every venv computes right with the
  same installed bytes, and each receipt says where its wheel came from.

The project the wheelhouse tests build is a setuptools package whose build appends a line to
``$FLEET_BUILDS`` (the compile counter) and, with ``$FLEET_HOLD``, waits until that file is
removed (so the test decides when the builder finishes, or kills it meanwhile).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fixtures import (
    NIGHTLY_TORCH,
    EnvbuildResult,
    ScenarioIndex,
    Venv,
    copy_venv,
    installer_env,
)
from support.gatelocks import GateIndex
from support.index import StaticServer, UnreachablePort

pytestmark = pytest.mark.slow

SETUP_PY = """
import os, socket, time
from pathlib import Path
from setuptools import setup
from setuptools.command.build_py import build_py


class Counted(build_py):
    def run(self):
        if os.environ.get("FLEET_BUILDS"):
            with open(os.environ["FLEET_BUILDS"], "a") as f:
                f.write(f"{socket.gethostname()} {os.getpid()}\\n")
        hold = os.environ.get("FLEET_HOLD")
        if hold:
            Path(hold + ".started").touch()
            while Path(hold).exists():
                time.sleep(0.1)
        super().run()


setup(name="fleet-ext", version="1.0.0", packages=["fleet_ext"], cmdclass={"build_py": Counted})
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The wheelhouse spec of the counted project (a source folder)."""
    src = tmp_path / "fleet-ext"
    (src / "fleet_ext").mkdir(parents=True)
    (src / "fleet_ext" / "__init__.py").write_text("ANSWER = 42\n")
    (src / "setup.py").write_text(SETUP_PY)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    spec = tmp_path / "fleet-ext.toml"
    spec.write_text(
        f'schema = 1\nname = "fleet-ext"\nversion = "1.0.0"\n[source]\npath = "{src}"\n'
        '[build]\nrequires = ["setuptools"]\n'
    )
    return spec


@dataclass
class Host:
    """One envbuild process standing for a host: its own HOME, cache and output folder."""

    name: str
    folder: Path
    proc: subprocess.Popen[bytes]

    @property
    def output(self) -> str:
        """stderr, then stdout (provision says what it does on stdout, wheelhouse build on
        stderr)."""
        return "\n".join(
            (self.folder / f).read_text(errors="replace") for f in ("out.log", "stdout.json")
        )

    def wait(self, timeout: float = 300) -> int:
        return self.proc.wait(timeout=timeout)

    def document(self) -> list[dict[str, object]]:
        text = (self.folder / "stdout.json").read_text()
        doc: list[dict[str, object]] = json.loads(text)
        return doc


def start_build(tmp: Path, name: str, spec: Path, python: Path, cache: str, **env: str) -> Host:
    """``wheelhouse build SPEC --json --build-cache CACHE`` as host ``name``, in the background."""
    folder = tmp / name
    folder.mkdir(parents=True, exist_ok=True)
    full = installer_env(folder / "home", {"FLEET_BUILDS": str(tmp / "builds.log"), **env})
    argv = [sys.executable, "-m", "envbuild", "wheelhouse", "build", str(spec), "--json"]
    argv += ["--python", str(python), "--out", str(folder / "out"), "--cache", str(folder / "c")]
    argv += ["--build-cache", cache]
    with (folder / "stdout.json").open("wb") as out, (folder / "out.log").open("wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=full, start_new_session=True)
    return Host(name, folder, proc)


def build(tmp: Path, name: str, spec: Path, python: Path, cache: str, **env: str) -> Host:
    host = start_build(tmp, name, spec, python, cache, **env)
    assert host.wait() == 0, host.output
    return host


def compiles(tmp: Path, name: str = "builds.log") -> int:
    log = tmp / name
    return len(log.read_text().splitlines()) if log.exists() else 0


def until(what: str, check: object, timeout: float = 300) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def wheel_of(host: Host) -> Path:
    [wheel] = (host.folder / "out").glob("*.whl")
    return wheel


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def published(shared: Path) -> tuple[Path, dict[str, object]]:
    [record] = (shared / "wheels").glob("*/result.json")
    data: dict[str, object] = json.loads(record.read_text())
    return record.parent, data


def test_one_builder_per_key_the_others_wait_and_install_its_wheel(
    project: Path, torch_venv: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    python = torch_venv / "bin" / "python"
    hold = tmp_path / "hold"
    hold.touch()
    hosts = [
        start_build(tmp_path, f"h{i}", project, python, str(shared), FLEET_HOLD=str(hold))
        for i in range(3)
    ]
    try:
        # one host compiles (and holds); the two others wait, saying where the build runs
        until("a builder", (tmp_path / "hold.started").exists)
        until("two waiters", lambda: sum("waiting here" in h.output for h in hosts) == 2)
    finally:
        hold.unlink()
    assert [h.wait() for h in hosts] == [0, 0, 0], [h.output for h in hosts]
    assert compiles(tmp_path) == 1
    me = socket.gethostname()
    origins = sorted(str(h.document()[0]["origin"]["how"]) for h in hosts)  # type: ignore[index]
    assert origins == ["build cache", "build cache", "built here"]
    builder = next(h for h in hosts if "waiting here" not in h.output)
    for h in hosts:
        if h is not builder:
            assert f"fleet-ext 1.0.0: building on {me} (pid {builder.proc.pid})" in h.output
            assert h.document()[0]["origin"]["built_on"] == me  # type: ignore[index]
    assert "published to the build cache" in builder.output
    assert len({sha(wheel_of(h)) for h in hosts}) == 1
    entry, record = published(shared)
    assert record["sha256"] == sha(wheel_of(builder)) and record["built_on"] == me
    assert not list((shared / "leases").iterdir())  # released
    assert not list((shared / "tmp").iterdir())

    # a fourth host, later: installs it at once
    late = build(tmp_path, "h3", project, python, str(shared))
    assert compiles(tmp_path) == 1 and "waiting" not in late.output
    assert sha(wheel_of(late)) == record["sha256"]


DAMAGES = [
    ("bytes", "the wheel's bytes do not match its record"),
    ("record", "is not valid JSON: rebuilt"),
    ("key", "its key differs from this host's (torch.version 2.0.0, now 2.13.0+cpu)"),
]


def test_a_damaged_cache_entry_is_rebuilt_and_republished(
    project: Path, torch_venv: Path, tmp_path: Path
) -> None:
    """Each damage in turn (the wheel's bytes, its record's JSON, a key part of its record): the
    next host says what is wrong, never installs it, rebuilds and republishes in its place, and the
    host after it takes the new entry."""
    shared = tmp_path / "shared"
    python = torch_venv / "bin" / "python"
    build(tmp_path, "h0", project, python, str(shared))
    for n, (damage, said) in enumerate(DAMAGES, 1):
        entry, record = published(shared)
        wheel = entry / str(record["wheel"])
        if damage == "bytes":
            wheel.write_bytes(wheel.read_bytes()[:-10] + b"0123456789")
        elif damage == "record":
            (entry / "result.json").write_text("{ not json")
        else:
            parts = dict(record["parts"])  # type: ignore[call-overload]
            parts["torch"] = {**parts["torch"], "version": "2.0.0"}
            (entry / "result.json").write_text(json.dumps({**record, "parts": parts}))
        again = build(tmp_path, f"h{n}", project, python, str(shared))
        assert said in again.output, again.output
        assert compiles(tmp_path) == 1 + n  # rebuilt, not installed
        assert again.document()[0]["origin"]["how"] == "built here"  # type: ignore[index]
        assert "Traceback" not in again.output
        # republished in its place
        entry, fixed = published(shared)
        assert fixed["sha256"] == sha(wheel_of(again)) == sha(entry / str(fixed["wheel"]))
    last = build(tmp_path, "late", project, python, str(shared))
    assert compiles(tmp_path) == 1 + len(DAMAGES) and sha(wheel_of(last)) == fixed["sha256"]


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_dead_or_frozen_builder_is_taken_over(
    project: Path, torch_venv: Path, tmp_path: Path, how: str
) -> None:
    """``kill -9`` of the builder's whole process group (its host died): the next one sees its
    process gone and takes over at once. ``SIGSTOP`` of the builder (alive, its heartbeat frozen):
    the next one takes over once the heartbeat has not moved for ENVBUILD_BUILD_CACHE_STALE."""
    shared = tmp_path / "shared"
    python = torch_venv / "bin" / "python"
    hold = tmp_path / "hold"
    hold.touch()
    first = start_build(tmp_path, "h0", project, python, str(shared), FLEET_HOLD=str(hold))
    try:
        until("the builder", (tmp_path / "hold.started").exists)
        if how == "kill":
            os.killpg(first.proc.pid, signal.SIGKILL)
        else:
            os.kill(first.proc.pid, signal.SIGSTOP)
        first.proc.wait() if how == "kill" else None
        nxt = build(tmp_path, "h1", project, python, str(shared), ENVBUILD_BUILD_CACHE_STALE="3")
    finally:
        with_group_killed(first)
        hold.unlink(missing_ok=True)
    why = "its process is gone" if how == "kill" else r"its heartbeat has not moved for \d+ s"
    me = socket.gethostname()
    taken = rf"took over the build lease of {me} \(pid {first.proc.pid}\) \({why}\)"
    assert re.search(taken, nxt.output), nxt.output
    assert nxt.document()[0]["origin"]["how"] == "built here"  # type: ignore[index]
    entry, record = published(shared)
    assert record["sha256"] == sha(wheel_of(nxt))


def test_a_host_that_waited_too_long_builds_for_itself(
    project: Path, torch_venv: Path, tmp_path: Path
) -> None:
    """The builder is alive and beating but slow: a waiter gives up after ENVBUILD_BUILD_CACHE_WAIT
    seconds, says so, and builds for itself (never slower than without the cache); the first
    builder's own wheel is still published when it ends."""
    shared = tmp_path / "shared"
    python = torch_venv / "bin" / "python"
    hold = tmp_path / "hold"
    hold.touch()
    first = start_build(tmp_path, "h0", project, python, str(shared), FLEET_HOLD=str(hold))
    try:
        until("the builder", (tmp_path / "hold.started").exists)
        impatient = build(
            tmp_path, "h1", project, python, str(shared), ENVBUILD_BUILD_CACHE_WAIT="2"
        )
    finally:
        hold.unlink()
    assert first.wait() == 0, first.output
    me = socket.gethostname()
    assert re.search(
        rf"waited \d+ s for {me} \(pid {first.proc.pid}\)'s build of this key"
        r" \(ENVBUILD_BUILD_CACHE_WAIT=2\): building here",
        impatient.output,
    ), impatient.output
    assert compiles(tmp_path) == 2
    assert impatient.document()[0]["origin"]["how"] == "built here"  # type: ignore[index]
    entry, record = published(shared)
    assert record["sha256"] in {sha(wheel_of(first)), sha(wheel_of(impatient))}


def with_group_killed(host: Host) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(host.proc.pid, signal.SIGKILL)
    host.proc.wait(timeout=60)


def test_an_http_cache_is_read_only(project: Path, torch_venv: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    python = torch_venv / "bin" / "python"
    build(tmp_path, "h0", project, python, str(shared))
    before = {p: p.stat().st_mtime_ns for p in shared.rglob("*")}
    with StaticServer(shared) as srv:
        reader = build(tmp_path, "h1", project, python, srv.url)
        assert compiles(tmp_path) == 1
        origin = reader.document()[0]["origin"]
        assert origin["how"] == "build cache" and origin["cache"] == srv.url  # type: ignore[index]
        # a key it lacks: built here, nothing written there
        (project.parent / "fleet-ext" / "fleet_ext" / "extra.py").write_text("X = 1\n")
        miss = build(tmp_path, "h2", project, python, srv.url)
        assert compiles(tmp_path) == 2
        assert miss.document()[0]["origin"]["how"] == "built here"  # type: ignore[index]
    assert {p: p.stat().st_mtime_ns for p in shared.rglob("*")} == before
    with UnreachablePort() as down_port:
        url = f"http://127.0.0.1:{down_port.port}/cache"
        down = build(tmp_path, "h3", project, python, url, ENVBUILD_NET_DEADLINE="2")
    assert "does not answer" in down.output and "building here without it" in down.output
    assert compiles(tmp_path) == 3 and "Traceback" not in down.output


def test_bad_build_cache_settings(project: Path, torch_venv: Path, tmp_path: Path) -> None:
    """A cache that is no folder or URL is a usage error (exit 2, one paragraph); a folder that
    cannot be written is a warning, and the build runs here."""
    python = torch_venv / "bin" / "python"
    bad = build_rc(tmp_path, "h0", project, python, "ftp://cache.example/builds")
    assert bad.proc.returncode == 2 and "a build cache is a folder" in bad.output
    assert "Traceback" not in bad.output
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache's folder would go")
    local = build(tmp_path, "h1", project, python, str(blocker / "cache"))
    assert "building here without it" in local.output and compiles(tmp_path) == 1
    env_set = build_rc(tmp_path, "h2", project, python, "", ENVBUILD_BUILD_CACHE_STALE="soon")
    assert env_set.proc.returncode == 2 and "ENVBUILD_BUILD_CACHE_STALE" in env_set.output


def build_rc(tmp: Path, name: str, spec: Path, python: Path, cache: str, **env: str) -> Host:
    host = start_build(tmp, name, spec, python, cache or str(tmp / "shared"), **env)
    host.wait()
    return host


# ----------------------------------------------------------------------------- provision --lock


# make test-thorough: three provisions and one real C++ compile against torch (about a CPU-minute);
# the wheelhouse tests above cover the lease, the waiting, the checks and the HTTP cache
@pytest.mark.thorough
def test_three_roots_provision_a_torch_extension_lock_at_once_and_compile_it_once(
    torch_venv: Path, tmp_path: Path
) -> None:
    from support.gatelocks import uv_bin
    from support.torchext import pyproject, torch_ext_sdist

    shared = tmp_path / "shared"
    sdist = torch_ext_sdist(tmp_path / "files")
    with StaticServer(tmp_path / "files") as srv:
        project = tmp_path / "app"
        project.mkdir()
        (project / "pyproject.toml").write_text(pyproject(f"{srv.url}/{sdist.name}", None))
        subprocess.run(
            [uv_bin(), "lock", "--no-cache"],
            cwd=project,
            env={k: v for k, v in installer_env(tmp_path / "lh").items() if k != "UV_NO_CONFIG"},
            check=True,
            capture_output=True,
        )
        hosts = [
            start_provision(tmp_path, f"root{i}", project / "uv.lock", torch_venv, shared)
            for i in range(3)
        ]
        codes = [h.wait(timeout=900) for h in hosts]
    assert codes == [0, 0, 0], [h.output for h in hosts]
    assert compiles(tmp_path, "torch-builds.log") == 1
    me = socket.gethostname()
    hows = []
    for h in hosts:
        venv = h.folder / "venv"
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-c", COMPUTE], capture_output=True, text=True
        )
        assert out.stdout.split() == ["[2.0,", "3.5,", "5.0,", "6.5]", "False"], out.stderr
        [receipt] = (h.folder / "root" / "receipts").glob("provision-*.json")
        built = json.loads(receipt.read_text())["payload"]["lock"]["builds"]["torch-ext-tiny"]
        hows.append(built["how"])
        assert built["built_on"] == me and built["sha256"] == record_sha(shared)
    assert sorted(hows) == ["build cache", "build cache", "built here"]
    installed = {
        sha(next((h.folder / "venv").glob("lib/python3*/site-packages/torch_ext_tiny/_C*.so")))
        for h in hosts
    }
    assert len(installed) == 1
    assert sum("waiting here" in h.output for h in hosts) >= 1, [h.output for h in hosts]


COMPUTE = """
import torch, torch_ext_tiny
a = torch.tensor([1.0, 2.0, 3.0, 4.0])
b = torch.tensor([2.0, 3.0, 4.0, 5.0])
print(torch_ext_tiny.scaled_add(a, b, 0.5).tolist(), bool(torch_ext_tiny.cuda_built()))
"""


def record_sha(shared: Path) -> str:
    return str(published(shared)[1]["sha256"])


def start_provision(tmp: Path, name: str, lock: Path, torch_venv: Path, shared: Path) -> Host:
    """``provision --lock LOCK --venv <its own copy of the torch venv> --build-cache SHARED``."""
    folder = tmp / name
    folder.mkdir(parents=True)
    venv = copy_venv(torch_venv, folder / "venv")
    full = installer_env(folder / "home", {"TORCH_EXT_BUILDS": str(tmp / "torch-builds.log")})
    argv = [sys.executable, "-m", "envbuild", "provision", "--lock", str(lock), "--venv", str(venv)]
    argv += ["--root", str(folder / "root"), "--build-cache", str(shared)]
    with (folder / "stdout.json").open("wb") as out, (folder / "out.log").open("wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=full, start_new_session=True)
    return Host(name, folder, proc)


# ----------------------------------------------------------------------------- provision --stack


def test_a_stacks_locked_files_come_from_the_build_cache_by_sha256(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    private_scenario_index: ScenarioIndex,
    tmp_path: Path,
) -> None:
    """A stack's locked wheels that ``wheelhouse build --build-cache`` published (here: put there by
    the cache's own publisher) are a source by sha256 when the step's own sources do not serve
    them: the lock's indexes are gone, and ``provision --build-cache DIR`` installs them, saying
    where they came from; without the cache it stops (exit 3) naming the files."""
    from lockhelpers import lock_env, manifest

    from envbuild.wheelhouse.sharedcache import SharedCache

    index = private_scenario_index
    steps = [
        {
            "name": "torch",
            "packages": [f"torch=={NIGHTLY_TORCH}"],
            "index_url": "${T_NIGHTLY}",
            "extra_index_urls": ["${T_PYPI}"],
            "pre": True,
        },
        {"name": "helpers", "packages": ["einops-like==0.8.1"], "index_url": "${T_PYPI}"},
    ]
    stack = write_stack(steps, baseline=False)
    live = {"T_NIGHTLY": index.nightly_url, "T_PYPI": index.pypi_url, **lock_env(tmp_path)}
    assert run_envbuild("lock", "--stack", stack, env=live).rc == 0
    shared = tmp_path / "shared"
    cache = SharedCache(str(shared), url=False)
    wheels = [*index.wheels.nightly.glob("*.whl"), *index.wheels.pypi.glob("*.whl")]
    pins = [
        a for s in manifest(stack.parent)["steps"] for p in s["packages"] for a in p["artifacts"]
    ]
    for n, artifact in enumerate(pins):
        slot = tmp_path / "built" / str(n)
        slot.mkdir(parents=True)
        wheel = next(w for w in wheels if w.name == artifact["filename"])
        (slot / wheel.name).write_bytes(wheel.read_bytes())
        record = {"wheel": wheel.name, "sha256": artifact["sha256"], "parts": {}}
        (slot / "result.json").write_text(json.dumps(record))
        cache.publish(
            hashlib.sha256(wheel.name.encode()).hexdigest(), slot, wheel.name, replace=False
        )
    index.server.stop()
    dead = {
        "T_NIGHTLY": "http://nightly.invalid/simple",
        "T_PYPI": "http://pypi.invalid/simple",
        **lock_env(tmp_path),
    }
    args = ("provision", "--stack", stack, "--root", tmp_path / "data", "--python", sys.executable)
    without = run_envbuild(*args, env=dead)
    assert without.rc == 3 and pins[-1]["sha256"] in without.output, without.output
    res = run_envbuild(*args, "--build-cache", shared, env=dead)
    assert res.rc == 0, res.output
    assert "the fleet's build cache" in res.output or str(shared) in res.output, res.output
    assert (
        Venv(tmp_path / "data" / "venv", home=tmp_path / "home").version("einops-like") == "0.8.1"
    )


# ----------------------------------------------------------------------------- docker --lock


def test_docker_lock_gives_the_builds_layer_the_build_cache(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """``docker --lock --build-cache``: the builds stage's layer (only it) provisions with the
    cache: a URL as given (read back through the shell's quoting), a folder as the build context
    ``envbuild-build-cache`` bind-mounted read only; a stack's ``docker`` refuses the flag."""
    import io
    import shlex

    dockerfile_parse = pytest.importorskip("dockerfile_parse")
    from test_fromlock import uv_sdist_lock

    lock = uv_sdist_lock(tmp_path, gate_index)
    url = "http://cache.example/builds?team='ml infra'"
    for value, folder in ((url, "url"), ("/shared/builds", "dir")):
        out = tmp_path / folder
        out.mkdir()
        res = run_envbuild(
            "docker", "--lock", lock, "--build-cache", value, "-o", out / "Dockerfile", cwd=out
        )
        assert res.rc == 0, res.output
        parser = dockerfile_parse.DockerfileParser(fileobj=io.BytesIO())
        parser.content = (out / "Dockerfile").read_text()
        runs = [
            i["value"]
            for i in parser.structure
            if i["instruction"] == "RUN" and "provision --lock" in i["value"]
        ]
        [cached] = [r for r in runs if "--build-cache" in r]
        assert cached is runs[-1] and len(runs) >= 2  # the builds stage is the last one here
        words = shlex.split(cached)
        assert words[words.index("--build-cache") + 1] == (
            url if folder == "url" else "/mnt/envbuild-build-cache"
        )
        mounted = "--mount=type=bind,from=envbuild-build-cache,target=/mnt/envbuild-build-cache"
        assert (mounted in words) == (folder == "dir")
    stack = run_envbuild("docker", "--profile", "cpu", "--build-cache", url, cwd=tmp_path)
    assert stack.rc == 2 and "--build-cache is for `docker --lock`" in stack.stderr
