"""``envbuild docker --lock FILE`` built for real: buildah, one committed layer per instruction.

A real ``uv lock`` of the real torch CPU build (stage torch), a stand-in prebuilt extension
wheel that imports torch (``causal-conv1d``, stage extensions) and an application package
(``app-utils``, stage rest), served from a local wheelhouse folder mounted read-only into the
build. The Dockerfile is built FROM the base image docker/build-image.sh makes (mmdebstrap,
Debian bookworm, re-committed under an image id of this run's own) with ``buildah bud
--layers``, cold; inside the image ``envbuild verify`` passes and the smoke layer passed. Then
``app-utils`` moves (1.0 -> 1.1, relocked by uv) and the rebuild takes every step up to the
extension layer from buildah's cache (same layer digests) and runs the rest layer and the ones
after it; in a container ``uv pip install`` (what a layer of the user's own runs) works under the
image's constraint (torch frozen) and verify still passes. A planted layer that reinstalls the same
torch between the torch and extension layers fails the build in the extension layer's ABI guard
(exit 6). The wall times land in build/image/fromlock/timings.json (docs/measured/images.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cachedir import TEST_CACHE
from support.fixtures import cache_lock, run_cli
from support.gatelocks import _run, uv_bin
from support.wheels import build_wheel
from test_fromlock_smoke import (
    TORCH_VERSION,
    lock_on_wheelhouse,
    torch_wheels,  # noqa: F401 - the fixture (real torch wheels)
)
from test_image_build import REPO, STORE, Container, _bud_sources, _cannot_build, buildah, layers

from envbuild.wheelhouse.pages import write_index

pytestmark = [pytest.mark.slow, pytest.mark.image]

BASE_TAG = os.environ.get("BASE_TAG", "localhost/envbuild-base:bookworm")
TAG = "localhost/envbuild-test/fromlock:latest"
RUN_BASE = "localhost/envbuild-test/fromlock-base:run"
PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
VENV = "/opt/envbuild/venv"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    """The base image of docker/build-image.sh (buildah and mmdebstrap installed first where
    missing)."""
    reason = _cannot_build()
    if reason:
        pytest.skip(reason)
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the lock pins this Python's wheels; the bookworm base has Python 3.11")
    env = {**os.environ, "BASE_ONLY": "1", "STORE": STORE, "BASE_TAG": BASE_TAG}
    with cache_lock(TEST_CACHE / "envbuild-base-image"):
        made = subprocess.run(
            ["bash", str(REPO / "docker" / "build-image.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-3000:]
    # The same base under an image id of its own (a label): every layer above it is built cold,
    # and buildah's cache, which takes the first stored image that matches a step, cannot
    # continue this run's chain from another run's (it would, after a `--no-cache` build).
    ctr = buildah("from", "-q", "--pull=never", BASE_TAG).stdout.strip()
    try:
        buildah("config", "--label", f"envbuild.test.run={time.time_ns()}", ctr)
        buildah("commit", "-q", ctr, RUN_BASE)
    finally:
        buildah("rm", ctr, check=False)
    yield RUN_BASE
    buildah("rmi", RUN_BASE, check=False)


def _wheelhouse(folder: Path, wheels: Path) -> Path:
    """torch and its dependencies, the stand-in extension and two app-utils, as a PEP 503 index."""
    folder.mkdir()
    for wheel in wheels.glob("*.whl"):
        (folder / wheel.name).symlink_to(wheel)
    build_wheel(
        folder,
        "causal-conv1d",
        "1.5.0",
        requires=["torch"],
        python_tag=PY,
        abi_tag=PY,
        platform_tag="linux_x86_64",
        files={"causal_conv1d/__init__.py": "import torch\n"},
    )
    for version in ("1.0", "1.1"):
        build_wheel(
            folder,
            "app-utils",
            version,
            files={"app_utils/__init__.py": f"VERSION = {version!r}\n"},
        )
    # not in the lock: what a layer of the user's own installs afterwards
    build_wheel(folder, "user-tool", "1.0", requires=["torch"], files={"user_tool/__init__.py": ""})
    build_wheel(
        folder,
        "needs-old-torch",
        "1.0",
        requires=["torch<2.13"],
        files={"needs_old_torch/__init__.py": ""},
    )
    write_index(folder)
    return folder


def _lock(project: Path, wheelhouse: Path, app: str, tmp: Path) -> Path:
    return lock_on_wheelhouse(
        project, wheelhouse, ["causal-conv1d==1.5.0", f"app-utils=={app}"], tmp
    )


def _bud(
    context: Path, dockerfile: Path, tag: str, sources: list[str], made: list[str]
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``buildah bud --layers``; the ids of the images it committed go to ``made``."""
    t = time.monotonic()
    r = buildah(
        "bud",
        "--isolation",
        "chroot",
        "--network",
        "host",
        "--format",
        "docker",
        "--layers",
        "--force-rm",
        *sources,
        "-f",
        str(dockerfile),
        "-t",
        tag,
        str(context),
        check=False,
        timeout=2400,
    )
    made += re.findall(r"^--> ([0-9a-f]{11,64})$", r.stdout, re.M)
    return time.monotonic() - t, r


def _remove(made: list[str]) -> None:
    """The image and the layer images its builds committed (a later run builds from a base of its
    own)."""
    buildah("rmi", TAG, check=False)
    for image in reversed(dict.fromkeys(made)):
        buildah("rmi", image, check=False)


def _steps(output: str) -> list[tuple[str, bool]]:
    """(instruction, taken from the cache) for each STEP of a ``buildah bud`` log, in order."""
    steps: list[tuple[str, bool]] = []
    for line in output.splitlines():
        m = re.match(r"STEP \d+/\d+: (.*)", line)
        if m:
            steps.append((m.group(1), False))
        elif line.startswith("--> Using cache ") and steps:
            steps[-1] = (steps[-1][0], True)
    return steps


def _index(steps: list[tuple[str, bool]], pattern: str) -> int:
    return next(i for i, (made, _) in enumerate(steps) if re.search(pattern, made))


def test_docker_lock_image_builds_verifies_and_a_rest_change_rebuilds_only_the_rest_layer(
    base: str,
    torch_wheels: Path,  # noqa: F811
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    wheelhouse = _wheelhouse(tmp_path / "wheelhouse", torch_wheels)
    project = tmp_path / "project"
    lock = _lock(project, wheelhouse, "1.0", tmp_path)
    # envbuild's source in the context, copied once: both renders then COPY the same tool source
    # (a render into a context without it copies the running checkout, which may change between
    # them)
    context = tmp_path / "context"
    shutil.copytree(
        REPO / "envbuild", context / "envbuild", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy2(REPO / "pyproject.toml", context / "pyproject.toml")

    def render() -> str:
        r = run_cli(
            [
                "docker",
                "--lock",
                str(lock),
                "--base",
                base,
                "-o",
                str(context / "Dockerfile"),
                "--context",
                str(context),
            ],
            home=tmp_path / "home",
            cwd=tmp_path,
        )
        assert r.rc == 0, r.output
        return (context / "Dockerfile").read_text()

    text = render()
    # the build's pip sources (secrets) and the wheelhouse the lock's file:// URLs name, read-only
    sources = [
        *_bud_sources(tmp_path),
        "-v",
        f"{wheelhouse}:{wheelhouse}:ro",
        "-v",
        f"{torch_wheels}:{torch_wheels}:ro",
    ]
    made: list[str] = []
    request.addfinalizer(lambda: _remove(made))
    cold_seconds, cold = _bud(context, context / "Dockerfile", TAG, sources, made)
    out = cold.stdout + cold.stderr
    assert cold.returncode == 0, out[-8000:]
    first, steps1 = layers(TAG), _steps(cold.stdout)
    assert not any(cached for _, cached in steps1), steps1  # a base of its own: every step ran
    # the smoke layer ran the checks of what the lock installed: the extension's import among them
    smoke = re.search(r"^smoke passed: .*$", out, re.M)
    assert smoke and "imports of causal-conv1d" in out, out[-4000:]
    c = Container(TAG)
    try:
        v = c.run("envbuild", "verify", "--root", "/opt/envbuild")
        assert v.returncode == 0, v.stdout + v.stderr
        assert (
            f"torch {TORCH_VERSION}" in v.stdout + v.stderr and "intact" in v.stdout + v.stderr
        ), v.stdout + v.stderr
        got = c.run(
            f"{VENV}/bin/python",
            "-c",
            "import app_utils, causal_conv1d, torch; print(app_utils.VERSION)",
        )
        assert got.returncode == 0 and got.stdout.split() == ["1.0"], got.stdout + got.stderr
    finally:
        c.remove()

    # app-utils 1.0 -> 1.1: a change in stage rest, relocked by uv; the same Dockerfile instructions
    (project / "pyproject.toml").write_text(
        (project / "pyproject.toml").read_text().replace('"app-utils==1.0"', '"app-utils==1.1"')
    )
    _run(
        [uv_bin(), "lock", "--no-cache", "--python", sys.executable],
        project,
        tmp_path,
        project_config=True,
    )
    assert 'name = "app-utils"\nversion = "1.1"' in lock.read_text()
    assert render() == text
    warm_seconds, warm = _bud(context, context / "Dockerfile", TAG, sources, made)
    out = warm.stdout + warm.stderr
    assert warm.returncode == 0, out[-8000:]
    steps2 = _steps(warm.stdout)
    assert [s for s, _ in steps2] == [s for s, _ in steps1]
    torch_run = _index(steps2, r"^RUN .*provision --lock")
    ext_copy = _index(steps2, r"^COPY \S*02-extensions\.json ")
    rest_copy = _index(steps2, r"^COPY \S*03-rest\.json ")
    assert torch_run < ext_copy < rest_copy
    cached = [i for i, (_, hit) in enumerate(steps2) if hit]
    # STEP 1 is FROM: no layer of its own
    assert cached == list(range(1, rest_copy)), (cached, rest_copy, steps2)
    second = layers(TAG)
    # by content (diff ids): the first layer that differs is the rest slice's, after the extension
    # layer
    provisions = [i for i, (_, made) in enumerate(first) if "provision --lock" in made]
    assert len(provisions) == 3, first
    diff_at = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a[0] != b[0])
    assert provisions[1] < diff_at <= provisions[2], (diff_at, provisions)
    c = Container(TAG)
    try:
        v = c.run("envbuild", "verify", "--root", "/opt/envbuild")
        assert v.returncode == 0, v.stdout + v.stderr
        got = c.run(f"{VENV}/bin/python", "-c", "import app_utils; print(app_utils.VERSION)")
        assert got.stdout.split() == ["1.1"], got.stdout + got.stderr
        # a layer of the user's own: the venv has no pip; uv (on PATH) installs into it, torch
        # frozen
        assert c.run(f"{VENV}/bin/python", "-m", "pip", "--version").returncode != 0
        here = (f"{wheelhouse}:{wheelhouse}:ro", f"{torch_wheels}:{torch_wheels}:ro")
        user = ("uv", "pip", "install", "--no-index", "--find-links", str(wheelhouse))
        old = c.run(*user, "needs-old-torch", volumes=here)
        assert old.returncode != 0 and "torch" in old.stderr, old.stdout + old.stderr
        new = c.run(*user, "user-tool", volumes=here)
        assert new.returncode == 0, new.stdout + new.stderr
        v = c.run("envbuild", "verify", "--root", "/opt/envbuild")
        assert v.returncode == 0 and "intact" in v.stdout + v.stderr, v.stdout + v.stderr
    finally:
        c.remove()

    # a planted layer reinstalls the same torch between the torch and extension layers: the
    # extension layer's provision (its ABI guard) fails the build with exit 6
    torch_wheel = next(torch_wheels.glob(f"torch-{TORCH_VERSION}*.whl"))
    plant = (
        "# planted: a reinstall of the same torch in a layer of its own\n"
        f"RUN /opt/envbuild-tool/bin/python -m pip --python {VENV}/bin/python install -q"
        " --no-index "
        # the lock's venv has no pip of its own
        f"--force-reinstall --no-deps {torch_wheel}\n\n"
    )
    at = text.index("\n# stage 2/3 extensions") + 1
    (context / "Dockerfile.planted").write_text(text[:at] + plant + text[at:])
    bad_seconds, bad = _bud(
        context, context / "Dockerfile.planted", TAG + "-planted", sources, made
    )
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0, out[-6000:]
    assert re.search(r"exit status 6\b", out), out[-6000:]
    assert re.search(r"torch \S+ was reinstalled", out), out[-6000:]
    timings = {
        "cold_seconds": round(cold_seconds, 1),
        "warm_seconds": round(warm_seconds, 1),
        "planted_seconds": round(bad_seconds, 1),
        "steps": len(steps1),
        "cached_on_warm": len(cached),
        "size": buildah("images", "--format", "{{.Size}}", TAG).stdout.strip(),
        "smoke": smoke.group(0),
    }
    (REPO / "build" / "image" / "fromlock").mkdir(parents=True, exist_ok=True)
    (REPO / "build" / "image" / "fromlock" / "timings.json").write_text(json.dumps(timings) + "\n")
    print(timings)
    print(out[out.index("ABI guard") :][:1200] if "ABI guard" in out else out[-1200:])
