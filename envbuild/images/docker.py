"""Render a Dockerfile from a stack's plan: one image layer per step, the same code path as a host.

The image runs exactly what an operator runs on a host, one ``envbuild provision --step NAME``
per layer, so every layer goes through the same installer and the same ABI guard, and a change
to a late step rebuilds only that step and the ones after it:

- each step layer is preceded by a ``COPY`` of the stack spec *cut after that step* (written
  beside the Dockerfile as ``<name>.steps/NN-<step>.toml``), so editing step 5 leaves the spec
  files of steps 1-4, and therefore their layers, byte-identical and cached; the last slice is
  the whole spec, so the finished image verifies against the profile's own digest;
- envbuild itself lives in its own venv (``/opt/envbuild-tool``), never in the training venv;
- the pip and uv caches are BuildKit cache mounts on the folders provision points them at;
- steps that read a find-links folder (the prebuilt CUDA wheels) mount the ``wheelhouse``
  named build context (``docker build --build-context wheelhouse=DIR``);
- after the baseline step the constraints file that pins torch is in the image and
  ``PIP_CONSTRAINT`` / ``UV_CONSTRAINT`` point at it through ``ENV``, so later layers and any
  later ``pip install`` by a user of the image keep torch pinned;
- when the stack has a lock (``lock.json`` beside the spec), each layer also copies a *prefix
  manifest* (``NN-<step>.lock.json``: the lock cut to the slice's steps,
  ``stacklock.serve.prefix_manifest``) to ``/etc/envbuild/lock.json`` and the hash-pinned step files
  the slice adds, so ``provision --step`` installs from the lock with ``--require-hashes`` (the
  prefix rule of ``stacklock.serve.locked_requirements`` checks the slice against the lock's
  per-step digests). The prefix manifest changes only when a step up to its own is locked anew, so
  relocking after an edit of a late step keeps the earlier layers cached. Without a lock (or with
  ``--no-lock``) the layers resolve from the spec, as on a host;
- the last layer runs ``envbuild smoke`` (its CPU-capable checks; the GPU ones need
  ``docker run --gpus all``);
- a step ``env`` value the spec takes from the environment (``{ from_env = "NAME" }``) reaches
  its layer as a build secret (``RUN --mount=type=secret,id=NAME``, set for that command only;
  ``docker build --secret id=NAME,env=NAME``), never as ``ARG``/``ENV``: no layer, history entry
  or the Dockerfile holds it. An ``[env]`` one is not in the image's ``ENV``: ``docker run -e
  NAME``.

Every value that is not envbuild's own goes through ``envbuild.quoting`` (``ENV`` values, ``RUN``
words, ``COPY`` and mount paths, comments), so what the Dockerfile parser and the shell read back
is exactly the value: a value they cannot carry is refused with exit 2.

``render`` is pure: it returns the text of every file; the CLI writes them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from envbuild import layout
from envbuild._io import atomic_write_text, parse_toml
from envbuild.errors import ConfigError
from envbuild.images.tool import SECRETS as SECRETS  # re-exported: projectlock.image's RUN lines
from envbuild.images.tool import TOOL_VENV as TOOL_VENV
from envbuild.images.tool import copy_tool_source, tool_dockerfile
from envbuild.plan import make_plan
from envbuild.quoting import (
    check_env_name,
    docker_comment,
    docker_env,
    docker_path,
    docker_run,
    sh_word,
)
from envbuild.spec import SECRET_NAME, StackSpec, parse_spec
from envbuild.spec._toml import read_bounded
from envbuild.stacklock.model import Lock, lock_dir, read_stack_lock
from envbuild.stacklock.serve import locked_requirements, prefix_manifest

DEFAULT_ROOT = "/opt/envbuild"
IMAGE_SPEC = "/etc/envbuild/stack.toml"
# lock_dir of IMAGE_SPEC: lock.json and the step files go beside it
IMAGE_LOCK_DIR = "/etc/envbuild"
STEP_FILE_GLOBS = ("*.toml", "*.lock.json", "*.txt")  # what a rendered steps folder holds
IMAGE_WHEELHOUSE = "/wheelhouse"
# where RUN --mount=type=secret,id=NAME puts a secret (BuildKit, buildah)
SECRETS_DIR = "/run/secrets"
WHEELHOUSE_CONTEXT = "wheelhouse"
SYNTAX = "docker/dockerfile:1.7"
# What the image needs at run time besides Python: a C++ compiler (torch.compile's Inductor
# compiles its CPU kernels with it) and git (git-pinned steps).
RUNTIME_APT = "ca-certificates git g++ make"

# CUDA major.minor -> the newest nvidia/cuda patch release with a cudnn devel image.
CUDA_BASE_TAGS: Mapping[str, str] = {
    "12.4": "12.4.1",
    "12.6": "12.6.3",
    "12.8": "12.8.1",
    "12.9": "12.9.1",
    "13.0": "13.0.2",
    "13.1": "13.1.1",
    "13.2": "13.2.0",
}
DEFAULT_UBUNTU = "22.04"  # the seed's OS (gcc 11.4)
CPU_BASE = f"ubuntu:{DEFAULT_UBUNTU}"

# Interpreters apt can give each Ubuntu release: its own python3, and the deadsnakes PPA's.
SYSTEM_PYTHON: Mapping[str, str] = {"22.04": "3.10", "24.04": "3.12"}
DEADSNAKES: Mapping[str, tuple[str, ...]] = {
    "22.04": ("3.7", "3.8", "3.9", "3.11", "3.12", "3.13", "3.14"),
    "24.04": ("3.7", "3.8", "3.9", "3.10", "3.11", "3.13", "3.14"),
}

# A docker image reference: [registry[:port]/]path[:tag][@sha256:digest]
_REF = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9.-]+(?::\d+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@sha256:[0-9a-f]{64})?$"
)
_CUDA_TAG = re.compile(
    r"^(?P<cuda>\d+\.\d+)(?:\.\d+)?-(?:cudnn\d*-)?(?P<flavor>devel|runtime|base)-ubuntu(?P<ubuntu>\d\d\.\d\d)$"
)
_UBUNTU_TAG = re.compile(r"^(?P<ubuntu>\d\d\.\d\d)$")
_STEP_HEADER = re.compile(r"^\s*\[\[\s*step\s*\]\]\s*(?:#.*)?$")


@dataclass(frozen=True, kw_only=True)
class DockerOptions:
    base: str | None = None  # --base IMAGE; None: the nvidia/cuda devel image of the stack's CUDA
    venv: str | None = None  # adopt: the environment inside the base image that holds torch
    root: str = DEFAULT_ROOT  # the image's data root (venv, caches, state, receipts)
    offline: bool = False  # every step from the wheelhouse build context (--offline --wheelhouse)
    steps_dir: str = "docker/steps"  # where the spec slices go, relative to the build context
    # install from the stack's lock when it has one (False: resolve from the spec)
    lock: bool = True
    command: str = "envbuild docker"  # the command line that renders this file, for its header
    # context-relative folder holding envbuild's pyproject.toml and envbuild/ ("": the root)
    tool_src: str = ""
    # docker --lock --build-cache: an http(s) URL, or "context" (the build context
    # envbuild-build-cache, mounted read only); None: none
    build_cache: str | None = None


@dataclass(frozen=True)
class Base:
    image: str
    ubuntu: str | None  # None: not an Ubuntu image envbuild knows: Python comes from its own apt
    cuda: str | None  # what the tag says (nvidia/cuda style); the build also reads CUDA_VERSION


@dataclass(frozen=True)
class Rendered:
    dockerfile: str
    # slices (+ lock): context-relative path -> text
    files: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # for the CLI to say (a secret-looking build argument)


# ----------------------------------------------------------------------------- base image


def parse_base(image: str) -> Base:
    """Validate an image reference (any: ``registry[:port]/name:tag``, ``name@sha256:...``,
    ``localhost/name:tag``); read the CUDA and Ubuntu versions from its tag where it tells."""
    m = _REF.match(image)
    if not m:
        raise ConfigError(
            f"--base {image!r} is not a valid image reference "
            "(expected [registry[:port]/]name[:tag][@sha256:<64 hex>])"
        )
    tag = m.group("tag") or "latest"
    name = m.group("path").rsplit("/", 1)[-1]
    if (c := _CUDA_TAG.match(tag)) is not None:
        return Base(image, c.group("ubuntu"), c.group("cuda"))
    if name == "ubuntu" and (u := _UBUNTU_TAG.match(tag)) is not None:
        return Base(image, u.group("ubuntu"), None)
    return Base(image, None, None)


def _default_base(spec: StackSpec) -> str:
    cuda = spec.abi.cuda
    if cuda is None:
        return CPU_BASE
    full = CUDA_BASE_TAGS.get(cuda)
    if full is None:
        raise ConfigError(
            f"{spec.path}: abi.cuda = {cuda!r} has no matching nvidia/cuda base image "
            f"(known: {', '.join(CUDA_BASE_TAGS)})",
            hint=(
                "Pass one with --base IMAGE (an nvidia/cuda:<version>-cudnn-devel-ubuntu22.04 style"
                " tag)."
            ),
        )
    return f"nvidia/cuda:{full}-cudnn-devel-ubuntu{DEFAULT_UBUNTU}"


def choose_base(spec: StackSpec, opts: DockerOptions) -> Base:
    """The base image for ``spec``, checked against its CUDA and Python; ``ConfigError`` if
    unusable."""
    if spec.abi.adopt:
        if not opts.base:
            raise ConfigError(
                f"{spec.name}: abi.adopt = true takes {spec.abi.package} from the base environment,"
                " so the image needs a base that holds it",
                hint=(
                    "Pass --base IMAGE (e.g. an NVIDIA PyTorch container) and --venv PATH (its"
                    " environment)."
                ),
            )
        if not opts.venv:
            raise ConfigError(
                f"{spec.name}: abi.adopt = true: say which environment inside {opts.base} holds "
                f"{spec.abi.package} with --venv PATH (a venv or conda prefix with bin/python)"
            )
        if not PurePosixPath(opts.venv).is_absolute():
            raise ConfigError(f"--venv {opts.venv!r} must be an absolute path inside the image")
        return parse_base(opts.base)
    if opts.venv:
        raise ConfigError(
            "--venv is for stacks that adopt torch from the base image (abi.adopt = true); "
            f"{spec.name} installs its own {spec.abi.package} into a new venv"
        )
    base = parse_base(opts.base or _default_base(spec))
    if spec.abi.cuda is not None and base.cuda is not None:
        if base.cuda != spec.abi.cuda:
            raise ConfigError(
                f"--base {base.image!r} is CUDA {base.cuda}, but {spec.name} needs abi.cuda ="
                f" {spec.abi.cuda}"
            )
        if "devel" not in base.image.rsplit(":", 1)[-1]:
            raise ConfigError(
                f"--base {base.image!r} is not a devel image; CUDA extensions need nvcc and"
                " headers",
                hint="Use the -devel- variant of the tag.",
            )
    if spec.abi.cuda is not None and base.cuda is None and base.ubuntu is not None:
        raise ConfigError(
            f"--base {base.image!r} has no CUDA toolkit, but {spec.name} is built for CUDA"
            f" {spec.abi.cuda}"
        )
    if base.ubuntu is None:
        # a base envbuild does not know: its CUDA and Python are checked by the build itself
        return base
    if base.ubuntu not in DEADSNAKES:
        raise ConfigError(
            f"--base {base.image!r}: Ubuntu {base.ubuntu} is not supported "
            f"(supported: {', '.join(DEADSNAKES)})"
        )
    if spec.python != SYSTEM_PYTHON[base.ubuntu] and spec.python not in DEADSNAKES[base.ubuntu]:
        raise ConfigError(
            f"{spec.name}: Python {spec.python} is not available on Ubuntu {base.ubuntu} (its own"
            f" python{SYSTEM_PYTHON[base.ubuntu]}, deadsnakes:"
            f" {', '.join(DEADSNAKES[base.ubuntu])}); this profile cannot run in that container",
            hint="Choose another Ubuntu release with --base, or change the stack's python.",
        )
    return base


def cuda_check(spec: StackSpec) -> list[str]:
    """A build step that stops the build when the base declares another CUDA than the stack's:
    ``CUDA_VERSION`` (what nvidia/cuda and NGC images set), else ``nvcc --version``."""
    want = spec.abi.cuda
    if want is None:
        return []
    need = f"stack {spec.name} needs CUDA {want}: use a CUDA {want} devel base"
    return [
        docker_comment(
            f"CUDA: {spec.name} needs {want}. The base declares its CUDA with CUDA_VERSION "
            "(nvidia/cuda, NGC)",
            "abi.cuda",
        ),
        "# or has nvcc; a base that declares another CUDA, or none, stops the build here.",
        'RUN have="${CUDA_VERSION:-}"; have="${have%.*}"; \\',
        '    if [ -z "$have" ] && command -v nvcc >/dev/null 2>&1; then \\',
        (
            "        have=$(nvcc --version | sed -n 's/.*release \\([0-9]*\\.[0-9]*\\).*/\\1/p');"
            " fi; \\"
        ),
        f'    if [ "$have" != {docker_run([want], "abi.cuda")} ]; then \\',
        (
            '        echo "envbuild: the base image declares CUDA ${have:-none} (CUDA_VERSION or'
            f' nvcc);" {docker_run([need], "abi.cuda")} >&2; \\'
        ),
        "        exit 1; fi",
        "",
    ]


# ----------------------------------------------------------------------------- spec slices


def slice_spec(spec: StackSpec) -> list[str]:
    """The spec file's text cut after each step (``[[step]]`` tables must come last).

    A slice keeps the file's own text (comments, ``${VAR}`` references) so its bytes change
    only when something up to that step changes. Each slice is checked to parse to the same
    data as the full spec with the later steps dropped.
    """
    text = read_bounded(spec.path, "stack spec").decode("utf-8")
    lines = text.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if _STEP_HEADER.match(line)]
    full = parse_toml(text)
    cuts = []
    for h in headers[1:]:
        start = h
        while start > 0 and (
            lines[start - 1].lstrip().startswith("#") or not lines[start - 1].strip()
        ):
            start -= 1
        cuts.append(start)
    cuts.append(len(lines))
    # a spec without its baseline step does not load: steps before it carry the spec up to it
    first = (spec.baseline_index or 0) + 1
    slices = []
    for n in range(1, len(cuts) + 1):
        n_cut = max(n, first)
        piece = "".join(lines[: cuts[n_cut - 1]]).rstrip("\n") + "\n"
        expected = dict(full, step=full["step"][:n_cut])
        if len(headers) != len(spec.steps) or parse_toml(piece) != expected:
            raise ConfigError(
                f"{spec.path}: cannot cut the spec after step {n_cut}; put every [[step]] table"
                " last, after the other tables, so each image layer can carry the spec up to its"
                " step"
            )
        parse_spec(expected, spec.path, os.environ)  # each slice is a valid spec on its own
        slices.append(piece)
    return slices


def spec_vars(spec: StackSpec) -> list[str]:
    """``${VAR}`` names the spec reads from the environment: build arguments of the image."""
    text = read_bounded(spec.path, "stack spec").decode("utf-8")
    names = re.findall(
        r"\$\{([A-Za-z_][A-Za-z0-9_]*)",
        "".join(
            line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#")
        ),
    )
    return sorted(set(names))


def stack_lock(spec: StackSpec) -> Lock | None:
    """The stack's lock, checked against the spec (``LockError`` when stale or broken); None
    without."""
    manifest = read_stack_lock(lock_dir(spec))
    if manifest is None:
        return None
    locked_requirements(spec)  # stale, missing or edited files fail here, not in a layer
    return manifest


# ----------------------------------------------------------------------------- rendering


def render(spec: StackSpec, opts: DockerOptions) -> Rendered:
    base = choose_base(spec, opts)
    plan = make_plan(spec)
    root = image_path(opts.root, "--root")
    if opts.venv:
        image_path(opts.venv, "--venv")
    docker_path(opts.steps_dir, "the spec slices' folder (from -o)")
    if opts.tool_src:
        docker_path(opts.tool_src, "envbuild's source folder in the build context")
    slices = slice_spec(spec)
    lock = stack_lock(spec) if opts.lock else None
    paths = layout.Paths(root=Path(root), venv_name=opts.venv or spec.layout.venv)
    venv = opts.venv or f"{root}/{spec.layout.venv}"
    constraints = str(paths.constraints)
    cache = paths.cache_env()
    py = sh_word(spec.python, "python")
    files: dict[str, str] = {}
    wheelhouse_vars = {"ENVBUILD_WHEELHOUSE"}
    secret_names = list(dict.fromkeys(k for s in spec.steps for k in s.env_from))
    out: list[str] = [
        f"# syntax={SYNTAX}",
        docker_comment(
            f"Generated by `{opts.command}`; do not edit (CI re-renders it and fails when it is"
            " stale).",
            "the command line that renders this file",
        ),
        docker_comment(
            f"Stack {spec.name} ({spec.digest}): {spec.abi.package} {spec.abi.version}"
            + (f", CUDA {spec.abi.cuda}" if spec.abi.cuda else "")
            + f", Python {py}"
            + (" (adopted from the base image)" if spec.abi.adopt else "")
            + ".",
            "the stack",
        ),
        "#",
        "# Build (BuildKit):",
        docker_comment(
            "  docker build -f <this file> --build-context"
            f" {WHEELHOUSE_CONTEXT}=/mnt/data/wheelhouse -t envbuild/{spec.name} .",
            "the stack",
        ),
        (
            f"#   (the `{WHEELHOUSE_CONTEXT}` context holds the prebuilt wheels: `envbuild"
            " wheelhouse build` / `mirror`)"
        ),
        *(
            [
                docker_comment(
                    "  the spec takes these from the environment (from_env), given as build"
                    " secrets: " + " ".join(f"--secret id={n},env={n}" for n in secret_names),
                    "env",
                )
            ]
            if secret_names
            else []
        ),
        "# The last layer runs the CPU-capable smoke checks; run the GPU ones on a GPU host:",
        docker_comment(
            f"  docker run --rm --gpus all --ipc=host envbuild/{spec.name} \\", "the stack"
        ),
        docker_comment(
            f"      envbuild smoke --stack {IMAGE_SPEC} --root {root} --venv {venv}", "--root"
        ),
        *(
            [
                "# Every step installs from the stack's lock (hash-pinned): each layer copies the"
                " part it needs."
            ]
            if lock
            else []
        ),
        "",
        f"ARG BASE_IMAGE={base.image}",
        "FROM ${BASE_IMAGE}",
        "",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        "# no bytecode written, by envbuild's proofs either: a later layer never adds to torch's",
        "ENV DEBIAN_FRONTEND=noninteractive \\",
        "    PYTHONDONTWRITEBYTECODE=1 \\",
        "    ENVBUILD_PROOF_BYTECODE=0 \\",
        "    PIP_DISABLE_PIP_VERSION_CHECK=1 \\",
        "    UV_LINK_MODE=copy",
        "",
    ]
    apt_cache = (
        "--mount=type=cache,target=/var/cache/apt,sharing=locked "
        "--mount=type=cache,target=/var/lib/apt,sharing=locked"
    )
    out += cuda_check(spec)
    if spec.abi.adopt:
        tool_python = sh_word(f"{venv}/bin/python")
        out += [
            (
                f"# {spec.abi.package} comes from the base image's environment {venv}; no step"
                " installs it."
            ),
            "# hadolint ignore=DL3008",
            f"RUN {apt_cache} \\",
            "    rm -f /etc/apt/apt.conf.d/docker-clean \\",
            f"    && apt-get update && apt-get install -y --no-install-recommends {RUNTIME_APT}",
            "",
        ]
    elif base.ubuntu is None:
        tool_python = f"python{py}"
        out += [
            (
                f"# Python {py} with its headers (Inductor's C++ wrappers include Python.h), from"
                " the base"
            ),
            (
                "# image's apt (Debian and Ubuntu name them alike); a base whose apt has none must"
                " already"
            ),
            f"# hold python{py} with venv on PATH.",
            "# hadolint ignore=DL3008",
            f"RUN {apt_cache} \\",
            "    rm -f /etc/apt/apt.conf.d/docker-clean \\",
            f"    && apt-get update && apt-get install -y --no-install-recommends {RUNTIME_APT} \\",
            f"    && if apt-cache show python{py}-dev >/dev/null 2>&1; then \\",
            (
                f"        apt-get install -y --no-install-recommends python{py} python{py}-venv"
                f" python{py}-dev; \\"
            ),
            f"    elif ! python{py} -c 'import venv, ensurepip' >/dev/null 2>&1; then \\",
            (
                f'        echo "envbuild: the base image has no python{py} (with venv) and its apt'
                ' offers none" >&2; exit 1; fi'
            ),
            "",
        ]
    else:
        tool_python = f"python{py}"
        packages = f"python{py} python{py}-venv python{py}-dev"
        if py == SYSTEM_PYTHON[base.ubuntu]:
            out += [f"# Python {py}: Ubuntu {base.ubuntu}'s own."]
            ppa = ""
        else:
            out += [
                f"# Python {py} from the deadsnakes PPA (Ubuntu {base.ubuntu}'s own is"
                f" {SYSTEM_PYTHON[base.ubuntu]})."
            ]
            ppa = (
                " \\\n    && apt-get install -y --no-install-recommends software-properties-common"
                " gpg-agent \\\n    && add-apt-repository -y ppa:deadsnakes/ppa && apt-get update"
            )
        out += [
            "# hadolint ignore=DL3008",
            f"RUN {apt_cache} \\",
            "    rm -f /etc/apt/apt.conf.d/docker-clean \\",
            (
                "    && apt-get update && apt-get install -y --no-install-recommends"
                f" {RUNTIME_APT}{ppa} \\"
            ),
            f"    && apt-get install -y --no-install-recommends {packages}",
            "",
        ]
    out += [
        *tool_dockerfile(opts.tool_src, tool_python),
    ]
    overlay = layout.overlay_env(spec, paths)
    overlay.pop("PIP_CACHE_DIR", None)
    overlay.pop("UV_CACHE_DIR", None)  # cache mounts at build time; the image itself stays small
    env_lines = [
        docker_env("VIRTUAL_ENV", venv, "--venv"),
        f"PATH={docker_path(venv, '--venv')}/bin:$PATH",
    ]
    env_lines += [docker_env(k, v, f"{spec.path}: env.{k}") for k, v in overlay.items()]
    out += [
        (
            "# The environment overlay (what the venv's activate sources on a host): set before the"
            " first"
        ),
        "# step, so every RUN below and every `docker run` has it."
        + (
            " The spec's from_env values are not here: `docker run -e NAME`."
            if spec.env_from
            else ""
        ),
        "ENV " + " \\\n    ".join(env_lines),
        "",
    ]
    build_args = [
        check_env_name(v, "a ${VAR} of the spec")
        for v in spec_vars(spec)
        if v not in wheelhouse_vars
    ]
    if build_args:
        out += [
            "# The spec's ${VAR} references, settable with --build-arg.",
            *[f"ARG {v}" for v in build_args],
            "",
        ]
    warnings = [
        f"{spec.path}: ${{{v}}} becomes the build argument {v}, and build arguments are kept in"
        " the "
        "image's history; give a secret to the image as a build secret instead: { from_env ="
        f' "{v}" }} '
        "in the step's env"
        for v in build_args
        if SECRET_NAME.search(v)
    ]
    cache_mounts = (
        f"--mount=type=cache,target={cache['PIP_CACHE_DIR']} "
        f"--mount=type=cache,target={cache['UV_CACHE_DIR']}"
    )
    wheelhouse_mount = f"--mount=type=bind,from={WHEELHOUSE_CONTEXT},target={IMAGE_WHEELHOUSE}"
    provision = ["envbuild", "provision", "--stack", IMAGE_SPEC, "--root", root, "--home", "/root"]
    if spec.abi.adopt:
        provision += ["--venv", venv]
    if opts.offline:
        provision += ["--offline", "--wheelhouse", IMAGE_WHEELHOUSE]
    pinned_after = (
        0 if spec.abi.adopt else next(s.number for s in plan.steps if s.role == "baseline")
    )
    total = len(plan.steps)
    copied: set[str] = set()  # step files already in the image
    for planned, text in zip(plan.steps, slices, strict=True):
        rel = docker_path(
            f"{opts.steps_dir}/{planned.number:02d}-{planned.name}.toml", "a spec slice"
        )
        files[rel] = text
        lock_copies: list[str] = []
        if lock is not None:
            count = len(parse_toml(text)["step"])
            rel_lock = docker_path(
                f"{opts.steps_dir}/{planned.number:02d}-{planned.name}.lock.json", "a lock slice"
            )
            files[rel_lock] = json.dumps(prefix_manifest(lock, count), indent=2) + "\n"
            lock_copies.append(f"COPY {rel_lock} {IMAGE_LOCK_DIR}/lock.json")
            new = [
                s.file for s in lock.steps[:count] if s.locked and s.file and s.file not in copied
            ]
            for name in new:
                assert name is not None
                files[f"{opts.steps_dir}/{name}"] = (lock.folder / name).read_text(encoding="utf-8")
                copied.add(name)
            if new:
                step_files = " ".join(
                    docker_path(f"{opts.steps_dir}/{n}", "a lock step file") for n in new
                )
                lock_copies.append(f"COPY {step_files} {IMAGE_LOCK_DIR}/")
        mounts = [cache_mounts, SECRETS]
        env_prefix = ""
        if opts.offline or planned.step.find_links:
            mounts.append(wheelhouse_mount)
            if planned.step.find_links and not opts.offline:
                env_prefix = f"ENVBUILD_WHEELHOUSE={IMAGE_WHEELHOUSE} "
        secrets = [check_env_name(k, f"step[{planned.number}].env") for k in planned.step.env_from]
        mounts += [f"--mount=type=secret,id={k}" for k in secrets]
        out += [
            docker_comment(
                f"step {planned.number}/{total} {planned.name} ({planned.role}): "
                f"{', '.join(planned.step.names)}",
                f"step[{planned.number}]",
            ),
            f"COPY {rel} {IMAGE_SPEC}",
            *lock_copies,
            f"RUN {' '.join(mounts)} \\",
            *[f"    {secret_line(k)} \\" for k in secrets],
            (
                f"    {env_prefix}"
                f"{docker_run([*provision, '--step', planned.name], 'the provision command')}"
            ),
            "",
        ]
        if planned.number == max(pinned_after, 1):
            out += [
                docker_comment(
                    f"{spec.abi.package} is frozen from here on: every later layer, and every "
                    "`pip install` /",
                    "abi.package",
                ),
                "# `uv pip install` a user of this image runs, reads the constraints file.",
                f"ENV {docker_env('PIP_CONSTRAINT', constraints, '--root')} \\",
                f"    {docker_env('UV_CONSTRAINT', constraints, '--root')}",
                "",
            ]
    runtime_caches = [
        str(paths.cache / sub)
        for var, sub in layout.CACHE_DIRS.items()
        if var not in ("PIP_CACHE_DIR", "UV_CACHE_DIR")
    ]
    smoke = ["envbuild", "smoke", "--stack", IMAGE_SPEC, "--root", root, "--venv", venv]
    out += [
        (
            "# Smoke: the checks that run without a GPU; the rest with `docker run --gpus all` (see"
            " the top)."
        ),
        (
            "# Then the run-time caches (Triton, Inductor, HF) are opened to any user: the image"
            " runs as"
        ),
        (
            "# root by default and also as `docker run --user UID:GID` (the venv stays read-only to"
            " it)."
        ),
        f"RUN {docker_run(smoke, '--root')} \\",
        f"    && {docker_run(['chmod', '1777', *runtime_caches], '--root')}",
        "",
        "WORKDIR /root",
        'CMD ["/bin/bash"]',
        "",
    ]
    return Rendered(dockerfile="\n".join(out), files=files, warnings=tuple(warnings))


def image_path(path: str, what: str) -> str:
    """An absolute path inside the image, of the characters a Dockerfile takes bare."""
    if not PurePosixPath(path).is_absolute():
        raise ConfigError(f"{what} {path!r} must be an absolute path inside the image")
    return docker_path(path, what)


def secret_line(name: str) -> str:
    """Shell that sets ``name`` from its build secret for this one ``RUN`` (a file under
    /run/secrets: BuildKit and buildah alike); unset without the secret, as on a host without it."""
    file = f"{SECRETS_DIR}/{check_env_name(name, 'env')}"
    return f'if [ -f {file} ]; then {name}="$(cat {file})"; export {name}; fi;'


DOCKERIGNORE = """\
# Generated by envbuild docker: the image needs envbuild's code and the rendered spec slices only.
*
!pyproject.toml
!envbuild/
!docker/
**/__pycache__
**/*.pyc
"""


def stale_files(rendered: Rendered, dockerfile: Path, context: Path, steps_dir: str) -> list[str]:
    """Files that differ from what ``rendered`` would write (missing, changed or left over)."""
    stale: list[str] = []
    if not dockerfile.is_file() or dockerfile.read_text(encoding="utf-8") != rendered.dockerfile:
        stale.append(str(dockerfile))
    for rel, text in rendered.files.items():
        p = context / rel
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            stale.append(str(p))
    folder = context / steps_dir
    if folder.is_dir():
        wanted = {context / rel for rel in rendered.files}
        stale += [
            str(p)
            for p in sorted({p for g in STEP_FILE_GLOBS for p in folder.glob(g)})
            if p not in wanted
        ]
    return stale


def write_build_files(
    files: Mapping[str, str], context: Path, steps_folder: Path, tool_src: Path
) -> None:
    """The spec slices and lock files a rendered image reads (``files``, relative to ``context``),
    in ``steps_folder`` with nothing stale left beside them; and envbuild's source at ``tool_src``
    when the context is outside a checkout."""
    steps_folder.mkdir(parents=True, exist_ok=True)
    wanted = {context / rel for rel in files}
    for old in {p for g in STEP_FILE_GLOBS for p in steps_folder.glob(g)}:
        if old not in wanted:
            old.unlink()
    for rel, text in files.items():
        atomic_write_text(context / rel, text)
    if tool_src != context:
        copy_tool_source(tool_src)
