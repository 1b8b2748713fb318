"""A real image: the cpu profile built with buildah (daemonless, chroot isolation, one committed
layer per instruction as Docker's classic builder does) FROM a Debian base made locally with
mmdebstrap, by docker/build-image.sh (what `make image` runs).

Inside the image: `envbuild verify` passes (the ABI guard's identity survives the layer commits),
`envbuild smoke` passes (a C++ compiler is there for Inductor), receipts are there, no build
secret is in any layer, and a reinstall of torch inside a container is still caught. A rebuild
after a change to the last step reuses every layer up to it, and no layer after torch's touches
torch's files, which are byte-identical to what its RECORD lists.

The fast tests at the bottom check the rendering rules the build relies on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from support.fixtures import run_cli
from support.twin import SeedTwin

from envbuild import guard

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "docker" / "build-image.sh"
STORE = os.environ.get("ENVBUILD_IMAGE_STORE", "/var/lib/envbuild-image")
RUNROOT = "/run/envbuild-image"
TAG = "localhost/envbuild-test/cpu:latest"
VENV = "/opt/envbuild/venv"


def _cannot_build() -> str | None:
    if os.geteuid() != 0:
        return (
            "buildah's chroot isolation needs root (mount, chroot) here; run as root or `sudo make"
            " image`"
        )
    if shutil.which("buildah") is None and shutil.which("apt-get") is None:
        return "no buildah and no apt-get to install it"
    if (
        not Path("/usr/local/share/ca-certificates").is_dir()
        and shutil.which("mmdebstrap") is None
        and shutil.which("apt-get") is None
    ):
        return "no mmdebstrap to make the base image"
    return None


def buildah(*args: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    cmd = [
        "buildah",
        "--root",
        STORE,
        "--runroot",
        RUNROOT,
        "--storage-driver",
        os.environ.get("DRIVER", "overlay"),
        *args,
    ]
    return subprocess.run(
        cmd,
        check=check,
        capture_output=True,
        text=True,
        env={**os.environ, "BUILDAH_ISOLATION": "chroot"},
        **kw,
    )


class Container:
    def __init__(self, image: str) -> None:
        self.id = buildah("from", "-q", "--pull=never", image).stdout.strip()

    def run(self, *cmd: str, volumes: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        vols = [a for v in volumes for a in ("-v", v)]
        return buildah(
            "run",
            "--isolation",
            "chroot",
            "--network",
            "host",
            *vols,
            self.id,
            "--",
            *cmd,
            check=False,
        )

    def remove(self) -> None:
        buildah("rm", self.id, check=False)


def build(stack: Path, out: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {
        **os.environ,
        "OUT": str(out),
        "STORE": STORE,
        "RUNROOT": RUNROOT,
        "ENVBUILD_TORCH_INDEX": "",
        "ENVBUILD": str(REPO / ".venv" / "bin" / "envbuild"),
    }
    env = {k: v for k, v in env.items() if not k.startswith("UV_")}
    t = time.monotonic()
    r = subprocess.run(
        ["bash", str(SCRIPT), str(stack), TAG],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return time.monotonic() - t, r


def layers(image: str) -> list[tuple[str, str]]:
    """(diff id, the instruction that made it) for each layer of ``image``, oldest first."""
    data = json.loads(buildah("inspect", "--type", "image", image).stdout)
    diff_ids = data["Docker"]["rootfs"]["diff_ids"]
    made = [h.get("created_by", "") for h in data["Docker"]["history"] if not h.get("empty_layer")]
    assert len(made) == len(diff_ids), (len(made), len(diff_ids))
    return list(zip(diff_ids, made, strict=True))


class BuiltImage(TypedDict):
    stack: Path
    out: Path
    seconds: float
    layers: list[tuple[str, str]]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuiltImage]:
    reason = _cannot_build()
    if reason:
        pytest.skip(reason)
    stack_dir = tmp_path_factory.mktemp("stack") / "cpu"
    shutil.copytree(REPO / "lockfiles" / "cpu", stack_dir)
    out = REPO / "build" / "image" / "cpu-test"
    seconds, r = build(stack_dir / "stack.toml", out)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    yield {"stack": stack_dir / "stack.toml", "out": out, "seconds": seconds, "layers": layers(TAG)}
    buildah("rmi", TAG, check=False)


@pytest.mark.slow
@pytest.mark.image
def test_verify_smoke_and_receipts_inside_the_image(image: BuiltImage) -> None:
    c = Container(TAG)
    try:
        args = ("--stack", "/etc/envbuild/stack.toml", "--root", "/opt/envbuild")
        built = _records(c)  # what the build left: its provision's receipts
        assert any(n.startswith("provision-") for n in built[0]), built
        v = c.run("envbuild", "verify", *args)
        assert v.returncode == 0, v.stdout + v.stderr  # exit 6 before the guard keyed on content
        verified = _records(c)
        s = c.run("envbuild", "smoke", *args, "--venv", VENV)
        assert s.returncode == 0, s.stdout + s.stderr
        smoked = _records(c)
        # the verify's record: a receipt, or (it found nothing new) a line confirming one there
        new_files = [n for n in verified[0] if n not in built[0]]
        new_lines = verified[1][len(built[1]) :]
        kinds = [n.split("-")[0] for n in new_files] + ["line"] * len(new_lines)
        assert kinds in (["verify"], ["line"]), (new_files, new_lines)
        assert all(json.loads(line)["confirms"] in verified[0] for line in new_lines), new_lines
        # the smoke's: one receipt, of a passing smoke
        (smoke,) = [n for n in smoked[0] if n not in verified[0]]
        receipt = json.loads(c.run("cat", f"/opt/envbuild/receipts/{smoke}").stdout)
        assert receipt["kind"] == "smoke" and receipt["payload"]["ok"] is True, receipt
        assert c.run("g++", "--version").returncode == 0
        env = c.run(
            "bash",
            "-c",
            "echo $VIRTUAL_ENV $TORCHINDUCTOR_CACHE_DIR $PIP_CONSTRAINT; command -v python",
        ).stdout
        assert env.split() == [
            VENV,
            "/opt/envbuild/cache/inductor",
            "/opt/envbuild/.envbuild/constraints.txt",
            f"{VENV}/bin/python",
        ]
        # the build's pip.conf and uv.toml were secrets: not in the image
        left = c.run(
            "bash", "-c", "ls /etc/pip.conf /etc/uv/uv.toml /run/secrets 2>/dev/null; true"
        )
        assert left.stdout.strip() == ""
    finally:
        c.remove()


def _records(c: Container) -> tuple[list[str], list[str]]:
    """The image root's receipt files, and the lines of its verified.jsonl."""
    out = c.run(
        "bash",
        "-c",
        "cd /opt/envbuild/receipts && ls *.json; echo ---; cat verified.jsonl 2>/dev/null; true",
    ).stdout
    files, _, lines = out.partition("---\n")
    return sorted(files.split()), [line for line in lines.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.image
def test_a_reinstall_of_torch_inside_the_image_is_caught(image: BuiltImage) -> None:
    wheels = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    if not wheels:
        pytest.skip("no local torch CPU wheel in /opt/wheels to reinstall from")
    c = Container(TAG)
    try:
        r = c.run(
            f"{VENV}/bin/python",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--force-reinstall",
            "--no-deps",
            str(wheels[0]),
            volumes=("/opt/wheels:/opt/wheels:ro",),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        v = c.run(
            "envbuild", "verify", "--stack", "/etc/envbuild/stack.toml", "--root", "/opt/envbuild"
        )
        assert v.returncode == 6, v.stdout + v.stderr
        assert "torch 2.13.0+cpu was reinstalled by pip (same version, same files" in v.stderr, (
            v.stderr
        )
    finally:
        c.remove()


@pytest.mark.slow
@pytest.mark.image
def test_torch_layer_is_kept_by_a_rebuild_and_untouched_by_later_layers(
    image: BuiltImage, tmp_path: Path
) -> None:
    first: list[tuple[str, str]] = image["layers"]
    torch_at = next(
        i
        for i, (_, made) in enumerate(first)
        if "--step torch" in made and "torch-users" not in made
    )
    rest_at = next(i for i, (_, made) in enumerate(first) if "--step rest" in made)

    # No layer after torch's has a file under torch/ or torch's dist-info: the final image's torch
    # files are the torch layer's bytes (and they match its RECORD, checked in full below).
    dest = tmp_path / "image"
    buildah("push", TAG, f"dir:{dest}")
    manifest = json.loads((dest / "manifest.json").read_text())
    blobs = [dest / m["digest"].split(":", 1)[1] for m in manifest["layers"]]
    assert len(blobs) == len(first)
    pattern = re.compile(r"(^|/)site-packages/(torch/|torch-[^/]*\.dist-info/)")
    for i, blob in enumerate(blobs[torch_at + 1 :], torch_at + 1):
        with tarfile.open(blob) as tar:
            touched = [m.name for m in tar if pattern.search(m.name)]
        assert touched == [], f"layer {i} ({first[i][1][:80]}) rewrote torch: {touched[:5]}"
    c = Container(TAG)
    mount = buildah("mount", c.id).stdout.strip()
    try:
        site = guard.site_packages(Path(mount + VENV))
        torch = guard.scan(site)["torch"]
        assert not torch.stamped  # nothing of envbuild's in the dist-info
        # every file, the 400 MB libraries too
        old_limit, guard.site.LAZY_HASH_LIMIT = guard.site.LAZY_HASH_LIMIT, 1 << 40
        try:
            assert guard.files_differ(torch, site) == []
        finally:
            guard.site.LAZY_HASH_LIMIT = old_limit
    finally:
        buildah("umount", c.id, check=False)
        c.remove()

    # a change to the last step: every layer before it comes from the cache
    stack: Path = image["stack"]
    text = stack.read_text()
    stack.write_text(
        text.replace(
            'name = "rest"\n', f'name = "rest"\n# rebuilt by test_image_build {time.time_ns()}\n'
        )
    )
    seconds, r = build(stack, image["out"])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    second = layers(TAG)
    users_at = next(i for i, (_, made) in enumerate(first) if "--step torch-users" in made)
    # layers are compared by content (diff id): the first that differs is the rest step's spec slice
    diff_at = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a[0] != b[0])
    assert users_at < diff_at <= rest_at, (users_at, diff_at, rest_at)
    assert second[torch_at] == first[torch_at]
    used = r.stdout.count("Using cache")
    assert used >= torch_at, r.stdout[-4000:]
    (REPO / "build" / "image" / "cpu-test" / "rebuild.json").write_text(
        json.dumps(
            {
                "first_seconds": image["seconds"],
                "rebuild_seconds": round(seconds, 1),
                "cache_hits": used,
            }
        )
    )


# ----------------------------------------------------------------------------- h200 on the stack
# twin

H200_BASE = "localhost/envbuild-test/h200-twin-base:py3.13"
H200_TAG = "localhost/envbuild-test/h200-twin:torch"
PY313 = "/root/.pyenv/versions/3.13.0"  # this host's CPython 3.13.0 (pyenv): the stack's Python
CUT = "# step 3/6 prebuilt-cuda"  # the first step that needs the GPU-built wheelhouse
# make the base and every layer again (the cold wall time)
COLD = os.environ.get("ENVBUILD_TWIN_COLD") == "1"


def _twin_base() -> None:
    """jammy (test_bootstrap's bare Ubuntu 22.04 root) + a final CPython 3.13 + ``CUDA_VERSION``.

    It stands in for ``nvidia/cuda:13.2.0-cudnn-devel-ubuntu22.04`` with deadsnakes' python3.13
    (neither is reachable from here): the Dockerfile's CUDA check reads ``CUDA_VERSION`` as it
    reads nvidia/cuda's, and its Python layer finds python3.13 with venv and ensurepip on PATH.
    The interpreter is copied to the path its RUNPATH names; ldd inside checks that jammy has
    every library it links (GLIBC <= 2.35, libssl3, libffi8, ...); Tk is left out.
    """
    if buildah("inspect", "--type", "image", H200_BASE, check=False).returncode == 0:
        if not COLD:
            return
        buildah("rmi", H200_BASE, check=False)
    from test_bootstrap import JAMMY, _make_jammy

    _make_jammy()
    ctr = buildah("from", "-q", "--pull=never", JAMMY).stdout.strip()
    try:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            tarball = Path(tmp) / "py313.tar"
            with tarfile.open(tarball, "w") as tar:
                tar.add(
                    PY313,
                    arcname=PY313.lstrip("/"),
                    filter=lambda m: (
                        None
                        if re.search(
                            r"/(test|idlelib|tkinter|turtledemo)(/|$)|/_tkinter\.|\.a$|/site-packages/.+|__pycache__",
                            m.name,
                        )
                        else m
                    ),
                )
            buildah("add", ctr, str(tarball), "/")
        check = (
            f"ln -s {PY313}/bin/python3.13 /usr/local/bin/python3.13 && "
            f"for f in {PY313}/bin/python3.13 {PY313}/lib/python3.13/lib-dynload/*.so; do "
            'if ldd "$f" | grep "not found"; then echo "MISSING in $f"; exit 1; fi; done && '
            "python3.13 -c 'import ssl, ctypes, venv, ensurepip, sys; print(sys.version)'"
        )
        r = buildah("run", "--isolation", "chroot", ctr, "--", "sh", "-c", check, check=False)
        assert r.returncode == 0 and "3.13.0" in r.stdout, r.stdout + r.stderr
        buildah("config", "--env", "CUDA_VERSION=13.2.0", ctr)
        buildah("commit", "-q", ctr, H200_BASE)
    finally:
        buildah("rm", ctr, check=False)


def _bud_sources(work: Path) -> list[str]:
    """The host's pip configuration as the build secrets the Dockerfile mounts (pip.conf,
    uv.toml) and read-only volumes for the local folders it names (as docker/build-image.sh)."""
    from test_bootstrap import _host_sources

    args = _host_sources(work)  # -v pip.conf, -v uv.toml, -v each local folder
    out = [
        "--secret",
        f"id=pip.conf,src={work / 'pip.conf'}",
        "--secret",
        f"id=uv.toml,src={work / 'uv.toml'}",
    ]
    for flag, vol in zip(args[::2], args[1::2], strict=True):
        if not vol.startswith(str(work)):
            out += [flag, vol]
    return out


def _bud(
    dockerfile: Path, context: Path, tag: str, index: str, sources: list[str], cold: bool = False
) -> tuple[float, subprocess.CompletedProcess[str]]:
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
        *(["--no-cache"] if cold else []),
        "--build-arg",
        f"ENVBUILD_TORCH_INDEX={index}",
        *sources,
        "-f",
        str(dockerfile),
        "-t",
        tag,
        str(context),
        check=False,
        timeout=2400,
    )
    return time.monotonic() - t, r


@pytest.mark.slow
@pytest.mark.image
def test_h200_dockerfile_on_the_stack_twin_keeps_the_guard_in_its_layers(
    seed_twin: SeedTwin, tmp_path: Path
) -> None:
    """The h200-cu132 Dockerfile, rendered by envbuild, built with buildah (one committed layer per
    instruction) against the stack twin: up to the torch step (the last before the step that
    needs the GPU-built wheelhouse), `envbuild verify` inside; then the prebuilt-cuda layer's
    guard passes on plain layer commits, and fails the build (exit 6) after a planted layer that
    reinstalls the same torch."""
    reason = _cannot_build()
    if reason:
        pytest.skip(reason)
    if not Path(PY313, "bin", "python3.13").exists():
        pytest.skip(f"no CPython 3.13 at {PY313} for the base image (pyenv install 3.13.0)")
    t0 = time.monotonic()
    _twin_base()
    base_seconds = time.monotonic() - t0
    # the twin's stack spec: the profile as committed, but for this machine's data disk (it asks
    # for 60 GB free; the image's /opt/envbuild is on this host's disk) and without the lock (it
    # pins the real nightly's hashes, which the twin's stand-in torch does not have)
    stack = tmp_path / "twin" / "h200-cu132" / "stack.toml"
    stack.parent.mkdir(parents=True)
    text = (REPO / "lockfiles" / "h200-cu132" / "stack.toml").read_text()
    assert "min_free_gb = 60\n" in text
    stack.write_text(text.replace("min_free_gb = 60\n", "min_free_gb = 1\n"))
    context = tmp_path / "context"
    r = run_cli(
        [
            "docker",
            "--stack",
            str(stack),
            "--base",
            H200_BASE,
            "--no-lock",
            "-o",
            str(context / "Dockerfile"),
            "--context",
            str(context),
        ],
        home=tmp_path / "home",
        cwd=tmp_path,
    )
    assert r.rc == 0, r.output
    full = (context / "Dockerfile").read_text()
    head, tail = full[: full.index(CUT)], full[full.index(CUT) :]
    step3 = tail[: tail.index("\n\n") + 1]
    assert "--step prebuilt-cuda" in step3 and "from=wheelhouse" in step3
    assert "--step torch" in head and "PIP_CONSTRAINT=" in head and "from=wheelhouse" not in head
    # the `wheelhouse` build context (BuildKit: --build-context wheelhouse=DIR) as a stage of that
    # name, which buildah 1.28 reads the same way: the twin's stand-ins for the GPU-built wheels
    shutil.copytree(seed_twin.prebuilt, context / "twin-wheelhouse")
    stage = "\nFROM scratch AS wheelhouse\nCOPY twin-wheelhouse/ /\n\n"
    at = head.index("\nFROM ${BASE_IMAGE}")
    with_stage = head[:at] + stage + head[at:]
    sources = _bud_sources(tmp_path)
    index = seed_twin.nightly_url

    (context / "Dockerfile.torch").write_text(head)
    seconds, built = _bud(
        context / "Dockerfile.torch", context, H200_TAG, index, sources, cold=COLD
    )
    out = built.stdout + built.stderr
    assert built.returncode == 0, out[-8000:]
    assert "baseline frozen: torch==2.12.0.dev20260405+cu132" in out, out[-4000:]
    c = Container(H200_TAG)
    try:
        v = c.run(
            "envbuild", "verify", "--stack", "/etc/envbuild/stack.toml", "--root", "/opt/envbuild"
        )
        assert v.returncode == 0, v.stdout + v.stderr
        assert "torch 2.12.0.dev20260405+cu132 intact" in v.stdout + v.stderr, v.stdout + v.stderr
    finally:
        c.remove()

    # plain layer commits: the next envbuild layer's guard passes (every layer before it cached)
    (context / "Dockerfile.prebuilt").write_text(with_stage + step3)
    again_seconds, ok = _bud(
        context / "Dockerfile.prebuilt", context, H200_TAG + "-prebuilt", index, sources
    )
    out = ok.stdout + ok.stderr
    assert ok.returncode == 0, out[-8000:]
    assert "step prebuilt-cuda (" in out and out.count("Using cache") >= head.count("\nRUN "), out[
        -4000:
    ]

    # a planted layer reinstalls the twin's torch, same version: the same envbuild layer fails
    plant = (
        "# planted: a reinstall of the same torch in a layer of its own\n"
        "RUN /opt/envbuild/venv/bin/python -m pip install -q --force-reinstall --no-deps "
        '--index-url "$ENVBUILD_TORCH_INDEX" torch==2.12.0.dev20260405+cu132\n\n'
    )
    (context / "Dockerfile.planted").write_text(with_stage + plant + step3)
    bad_seconds, bad = _bud(
        context / "Dockerfile.planted", context, H200_TAG + "-planted", index, sources
    )
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0, out[-6000:]
    assert re.search(r"exit status 6\b", out), out[-6000:]
    assert "ABI guard after step 3 ('prebuilt-cuda')" in out, out[-6000:]
    assert "torch 2.12.0.dev20260405+cu132 was reinstalled" in out, out[-6000:]
    print(out[out.index("ABI guard after step 3") :][:1500])  # what the build's log shows
    timings = {
        "cold": COLD,
        "base_seconds": round(base_seconds, 1),
        "build_to_torch_seconds": round(seconds, 1),
        "prebuilt_layer_seconds": round(again_seconds, 1),
        "planted_build_seconds": round(bad_seconds, 1),
    }
    (REPO / "build" / "image").mkdir(parents=True, exist_ok=True)
    (REPO / "build" / "image" / "h200-twin.json").write_text(json.dumps(timings) + "\n")
    print(timings)
    for tag in (H200_TAG + "-prebuilt",):
        buildah("rmi", tag, check=False)


# ----------------------------------------------------------------------------- rendering (fast)


@pytest.mark.parametrize(
    "base",
    [
        "localhost/debian-python:base",
        "registry.example.com:5000/team/base:2026.1",
        "debian@sha256:" + "a" * 64,
        "nvidia/cuda:latest",
    ],
)
def test_any_base_reference_renders(tmp_path: Path, base: str) -> None:
    r = run_cli(
        [
            "docker",
            "--profile",
            "cpu",
            "--base",
            base,
            "-o",
            str(tmp_path / "d" / "Dockerfile"),
            "--context",
            str(tmp_path),
        ],
        home=tmp_path / "home",
    )
    assert r.rc == 0, r.output
    text = (tmp_path / "d" / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={base}" in text and "g++" in text


def test_cuda_is_checked_in_the_build_when_the_base_tag_does_not_say(tmp_path: Path) -> None:
    r = run_cli(
        [
            "docker",
            "--profile",
            "h200-cu132",
            "--base",
            "registry.example.com/ml/cuda-base:7",
            "-o",
            str(tmp_path / "Dockerfile"),
            "--context",
            str(tmp_path),
        ],
        home=tmp_path / "home",
    )
    assert r.rc == 0, r.output
    text = (tmp_path / "Dockerfile").read_text()
    check = text[text.index('RUN have="${CUDA_VERSION:-}"') :]
    check = check[: check.index("\n\n")]
    script = check.removeprefix("RUN ").replace("\\\n", "\n")
    for cuda, rc in (("13.2.0", 0), ("12.8.1", 1), ("", 1)):
        done = subprocess.run(
            ["bash", "-c", script],
            env={"PATH": "/usr/bin:/bin", "CUDA_VERSION": cuda},
            capture_output=True,
            text=True,
        )
        assert done.returncode == rc, (cuda, done.stderr)
    assert "needs CUDA 13.2" in done.stderr


def test_default_output_does_not_overwrite_another_stacks_dockerfile(tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    shutil.copytree(REPO / "docker", work / "docker", ignore=shutil.ignore_patterns("*.sh"))
    shutil.copy2(REPO / "pyproject.toml", work / "pyproject.toml")
    shutil.copytree(REPO / "lockfiles", work / "lockfiles")
    shutil.copytree(
        REPO / "envbuild", work / "envbuild", ignore=shutil.ignore_patterns("__pycache__")
    )
    committed = (work / "docker" / "Dockerfile").read_bytes()
    r = run_cli(["docker", "--profile", "cpu"], home=tmp_path / "home", cwd=work)
    assert r.rc == 0, r.output
    assert (work / "docker" / "Dockerfile").read_bytes() == committed
    assert "# Stack cpu " in (work / "docker" / "cpu.Dockerfile").read_text()
    assert "docker/cpu.Dockerfile" in r.output


def test_output_outside_the_checkout_is_a_usable_context(tmp_path: Path) -> None:
    out = tmp_path / "ctx" / "Dockerfile"
    r = run_cli(["docker", "--profile", "cpu", "-o", str(out)], home=tmp_path / "home", cwd=REPO)
    assert r.rc == 0, r.output
    text = out.read_text()
    for src in re.findall(r"^COPY (\S+) ", text, re.M):
        assert (out.parent / src).exists(), src  # every COPY source is in the context
    assert "COPY envbuild-src/pyproject.toml /src/envbuild/" in text
