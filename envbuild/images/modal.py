"""Render a Modal image definition (a Python file defining a ``modal.Image``) from a stack's plan.

Two modes, one plan:

- ``dockerfile``: ``modal.Image.from_dockerfile`` of the Dockerfile ``envbuild.images.docker``
  renders (written beside the Python file), with the build context the Dockerfile's ``COPY``
  lines read from. Modal's builder has no named build contexts, so a stack with a find-links step
  (the prebuilt-wheel wheelhouse, ``--build-context wheelhouse=...`` for docker) is refused here:
  use ``steps``.
- ``steps`` (default): layer for layer in Modal's own API: ``Image.debian_slim(python_version=)``
  for a stack without CUDA, else ``Image.from_registry(<the CUDA devel base>, add_python=)``;
  the run-time apt packages; envbuild's own source into its own venv; the env overlay as
  ``.env(...)``; then per step ``add_local_file(..., copy=True)`` of the spec cut after that step
  (and the lock's prefix manifest and hash-pinned step files, the same files the Dockerfile's
  ``COPY`` lines use) followed by ``.run_commands("envbuild provision ... --step NAME")``; the
  constraints that pin torch right after the baseline step; and a last layer that runs
  ``envbuild verify`` and ``envbuild smoke``. A find-links step gets the wheelhouse folder
  (``image(wheelhouse=DIR)`` or ``$ENVBUILD_WHEELHOUSE`` when the file is imported) copied to
  ``/wheelhouse`` before it. The spec's ``${VAR}`` references (the Dockerfile's build arguments)
  reach the step layers as ``run_commands(env=...)`` from the environment of whoever imports it.

The file exposes ``image()`` (the ``modal.Image``), so a user writes
``from <module> import image`` and ``modal.App(image=image())``, plus the plan as data (``STEPS``).
Modal's ``.env()`` quotes values (no ``$PATH`` expansion), so ``PATH`` is written out in full.

Every value from the spec or the command line is a Python literal (``quoting.py_literal``) or
escaped for the docstring (``quoting.py_docstring``); the shell commands the layers run quote
their words (``quoting.sh_join``). A step ``env`` value the spec takes from the environment
(``from_env``) reaches its layer as a Modal secret built from the environment of whoever imports
the file (``modal.Secret.from_local_environ``), never as ``.env()`` or a literal.

``render_modal`` is pure: it returns the text of every file; the CLI writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from envbuild import layout
from envbuild._io import parse_toml
from envbuild.errors import ConfigError
from envbuild.images.docker import (
    CPU_BASE,
    IMAGE_LOCK_DIR,
    IMAGE_SPEC,
    IMAGE_WHEELHOUSE,
    RUNTIME_APT,
    DockerOptions,
    Rendered,
    choose_base,
    render,
    spec_vars,
    stack_lock,
)
from envbuild.images.tool import tool_shell
from envbuild.plan import make_plan
from envbuild.quoting import check_env_name, py_docstring, py_literal, sh_join, sh_word
from envbuild.spec import StackSpec

Mode = Literal["dockerfile", "steps"]
MODES: tuple[Mode, ...] = ("steps", "dockerfile")
# PATH of the bases (Docker's python image, nvidia/cuda): Modal's .env() does not expand $PATH.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CUDA_PATH = "/usr/local/nvidia/bin:/usr/local/cuda/bin"


@dataclass(frozen=True, kw_only=True)
class ModalOptions:
    mode: Mode = "steps"
    docker: DockerOptions  # steps_dir and tool_src relative to the context, base, root, lock
    context: str  # the build context, relative to the Python file's folder ("." for the same)
    dockerfile: str  # dockerfile mode: the Dockerfile's name in the Python file's folder


@dataclass(frozen=True)
class StepLayer:
    name: str
    spec: str  # context-relative: the spec cut after this step
    lock: str | None  # context-relative: the lock's prefix manifest for this slice
    files: tuple[str, ...]  # context-relative: hash-pinned step files this slice adds
    wheelhouse: bool  # a find-links step: the wheelhouse goes to /wheelhouse first
    # the step's from_env names: a Modal secret from the importer's environment
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenderedModal:
    source: str  # the Python file
    dockerfile: str | None  # dockerfile mode: the Dockerfile's text
    # context-relative path -> text (slices, lock files)
    files: dict[str, str] = field(default_factory=dict)
    layers: tuple[StepLayer, ...] = ()


def step_layers(spec: StackSpec, rendered: Rendered, opts: DockerOptions) -> tuple[StepLayer, ...]:
    """What each step's layer copies, by the names ``images.docker.render`` gave its files."""
    plan = make_plan(spec)
    lock = stack_lock(spec) if opts.lock else None
    copied: set[str] = set()
    out = []
    for planned in plan.steps:
        stem = f"{opts.steps_dir}/{planned.number:02d}-{planned.name}"
        text = rendered.files[f"{stem}.toml"]
        lock_rel, new = None, []
        if lock is not None:
            lock_rel = f"{stem}.lock.json"
            count = len(parse_toml(text)["step"])
            new = [
                s.file for s in lock.steps[:count] if s.locked and s.file and s.file not in copied
            ]
            copied.update(n for n in new if n)
        out.append(
            StepLayer(
                planned.name,
                f"{stem}.toml",
                lock_rel,
                tuple(f"{opts.steps_dir}/{n}" for n in new if n),
                bool(planned.step.find_links),
                tuple(planned.step.env_from),
            )
        )
    return tuple(out)


def render_modal(spec: StackSpec, opts: ModalOptions) -> RenderedModal:
    docker = opts.docker
    if docker.offline:
        raise ConfigError(
            "the Modal lane has no --offline: give the wheelhouse to image(wheelhouse=DIR) instead"
        )
    rendered = render(spec, docker)
    layers = step_layers(spec, rendered, docker)
    if opts.mode == "dockerfile":
        _refuse_wheelhouse_steps(spec, layers)
    values = _values(spec, opts, layers)
    source = _SOURCE.format(
        command=py_docstring(docker.command, "the command line that renders this file"),
        summary=py_docstring(
            f"Stack {spec.name} ({spec.digest}): {spec.abi.package} {spec.abi.version}"
            + (f", CUDA {spec.abi.cuda}" if spec.abi.cuda else "")
            + f", Python {spec.python}.",
            "the stack",
        ),
        mode=opts.mode,
        values="\n".join(
            f"{k}{_ANNOTATIONS.get(k, '')} = {py_literal(v)}" for k, v in values.items()
        ),
        image_dir=IMAGE_LOCK_DIR,
        image_spec=IMAGE_SPEC,
        wheelhouse=IMAGE_WHEELHOUSE,
    )
    return RenderedModal(
        source=source,
        dockerfile=rendered.dockerfile if opts.mode == "dockerfile" else None,
        files=dict(rendered.files),
        layers=layers,
    )


def _refuse_wheelhouse_steps(spec: StackSpec, layers: tuple[StepLayer, ...]) -> None:
    """Dockerfile mode: ConfigError for steps that install from the wheelhouse, which Modal's
    from_dockerfile cannot mount."""
    needs = [s.name for s in layers if s.wheelhouse]
    if needs:
        raise ConfigError(
            f"{spec.name}: step(s) {', '.join(needs)} install from the wheelhouse, which the"
            " Dockerfile mounts as a named build context (--build-context wheelhouse=DIR);"
            " Modal's from_dockerfile has none",
            hint=("Use --mode steps: it copies the wheelhouse into the image before those steps."),
        )


def _values(
    spec: StackSpec, opts: ModalOptions, layers: tuple[StepLayer, ...]
) -> dict[str, object]:
    """The plan as the file's data: each name, the Python literal written for it."""
    docker = opts.docker
    base = choose_base(spec, docker)
    paths = layout.Paths(root=Path(docker.root), venv_name=docker.venv or spec.layout.venv)
    venv = docker.venv or f"{docker.root}/{spec.layout.venv}"
    overlay = layout.overlay_env(spec, paths)
    overlay.pop("PIP_CACHE_DIR", None)
    overlay.pop("UV_CACHE_DIR", None)
    path = f"{venv}/bin:" + (f"{CUDA_PATH}:" if base.cuda or spec.abi.cuda else "") + BASE_PATH
    env = {"VIRTUAL_ENV": venv, "PATH": path, **overlay}
    plan = make_plan(spec)
    pin_after = None if spec.abi.adopt else next(s.name for s in plan.steps if s.role == "baseline")
    return {
        "STACK": spec.name,
        "SPEC_DIGEST": spec.digest,
        "MODE": opts.mode,
        "PYTHON": spec.python,
        "BASE": None if (base.image == CPU_BASE and not docker.base) else base.image,
        "CONTEXT_REL": opts.context,
        "DOCKERFILE_NAME": opts.dockerfile if opts.mode == "dockerfile" else None,
        "TOOL_SRC": docker.tool_src,
        "APT": RUNTIME_APT.split(),
        "ENV": env,
        "CONSTRAINTS": str(paths.constraints),
        "PIN_AFTER": pin_after,
        "STEPS": [(s.name, s.spec, s.lock, list(s.files), s.wheelhouse) for s in layers],
        "SECRETS": {
            s.name: [check_env_name(k, f"step {s.name} env") for k in s.secrets]
            for s in layers
            if s.secrets
        },
        "PROVISION": _provision_line(spec, docker, venv),
        "SPEC_VARS": [v for v in spec_vars(spec) if v != "ENVBUILD_WHEELHOUSE"],
        "TOOL_INSTALL": _tool_install(spec.python if not spec.abi.adopt else None, venv),
        "VERIFY": _verify_lines(docker, paths, venv),
    }


def _provision_line(spec: StackSpec, docker: DockerOptions, venv: str) -> str:
    """The provision command each step's layer runs (``--step NAME`` is added per layer)."""
    provision = [
        "envbuild",
        "provision",
        "--stack",
        IMAGE_SPEC,
        "--root",
        docker.root,
        "--home",
        "/root",
    ]
    if spec.abi.adopt:
        provision += ["--venv", venv]
    return sh_join(provision, "--root")


def _verify_lines(docker: DockerOptions, paths: layout.Paths, venv: str) -> list[str]:
    """The last layer's commands: verify, then smoke and the run-time caches opened to all."""
    runtime_caches = [
        str(paths.cache / sub)
        for var, sub in layout.CACHE_DIRS.items()
        if var not in ("PIP_CACHE_DIR", "UV_CACHE_DIR")
    ]
    target = ["--stack", IMAGE_SPEC, "--root", docker.root, "--venv", venv]
    return [
        sh_join(["envbuild", "verify", *target], "--root"),
        sh_join(["envbuild", "smoke", *target], "--root")
        + " && "
        + sh_join(["chmod", "1777", *runtime_caches], "--root"),
    ]


_ANNOTATIONS = {
    "STEPS": ": list[tuple[str, str, str | None, list[str], bool]]",
    "SPEC_VARS": ": list[str]",
    "SECRETS": ": dict[str, list[str]]",
    "BASE": ": str | None",
    "DOCKERFILE_NAME": ": str | None",
    "PIN_AFTER": ": str | None",
}


def _tool_install(python: str | None, venv: str) -> str:
    """envbuild in its own venv, as in the Dockerfile (``images.tool``: the one snippet)."""
    return tool_shell(sh_word(f"python{python}" if python else f"{venv}/bin/python", "--venv"))


def module_name_ok(path: Path) -> bool:
    """Can ``from <folder>.<stem> import image`` name this file (and not shadow ``modal``)?"""
    return path.suffix == ".py" and path.stem.isidentifier() and path.stem != "modal"


_SOURCE = '''\
"""Modal image of an envbuild stack; do not edit. Generated by
`{command}`.

{summary}
Mode: {mode}. Use it from a Modal app:

    from <this module> import image
    app = modal.App("train", image=image())

The spec slices and lock files this file reads lie in the build context beside it; re-render
after a change to the stack or its lock.
"""

from __future__ import annotations

import os
from pathlib import Path

import modal

HERE = Path(__file__).resolve().parent

{values}

CONTEXT = (HERE / CONTEXT_REL).resolve()


def image(wheelhouse: str | os.PathLike[str] | None = None) -> modal.Image:
    """The ``modal.Image`` of stack ``STACK``. ``wheelhouse``: the folder of prebuilt wheels the
    find-links steps install from (default: ``$ENVBUILD_WHEELHOUSE``)."""
    # the spec's ${{VAR}} references (build arguments of the Dockerfile), from this environment
    build_env: dict[str, str | None] = {{var: os.environ[var] for var in SPEC_VARS if var in os.environ}}
    if MODE == "dockerfile":
        assert DOCKERFILE_NAME is not None
        return modal.Image.from_dockerfile(HERE / DOCKERFILE_NAME, context_dir=CONTEXT,
                                           build_args={{k: v for k, v in build_env.items() if v is not None}},
                                           secrets=_secrets(sorted({{n for names in SECRETS.values() for n in names}})))
    if BASE is None:
        img = modal.Image.debian_slim(python_version=PYTHON)
    else:
        img = modal.Image.from_registry(BASE, add_python=PYTHON)
    img = (
        img.apt_install(*APT)
        .add_local_file(CONTEXT / TOOL_SRC / "pyproject.toml", "/src/envbuild/pyproject.toml", copy=True)
        .add_local_dir(CONTEXT / TOOL_SRC / "envbuild", "/src/envbuild/envbuild", copy=True,
                       ignore=["**/__pycache__", "**/*.pyc"])
        .run_commands(TOOL_INSTALL)
        .env(ENV)
    )
    house = wheelhouse if wheelhouse is not None else os.environ.get("ENVBUILD_WHEELHOUSE")
    copied = False
    for name, spec_file, lock_file, step_files, finds_links in STEPS:
        img = img.add_local_file(CONTEXT / spec_file, "{image_spec}", copy=True)
        if lock_file is not None:
            img = img.add_local_file(CONTEXT / lock_file, "{image_dir}/lock.json", copy=True)
        for rel in step_files:
            img = img.add_local_file(CONTEXT / rel, "{image_dir}/" + Path(rel).name, copy=True)
        prefix = ""
        if finds_links:
            if house is None:
                raise ValueError(
                    f"step {{name}} of {{STACK}} installs prebuilt wheels from a wheelhouse: pass "
                    "image(wheelhouse=DIR) or set ENVBUILD_WHEELHOUSE (envbuild wheelhouse build / mirror)")
            if not copied:
                img = img.add_local_dir(Path(house), "{wheelhouse}", copy=True)
                copied = True
            prefix = "ENVBUILD_WHEELHOUSE={wheelhouse} "
        img = img.run_commands(f"{{prefix}}{{PROVISION}} --step {{name}}", env=build_env or None,
                               secrets=_secrets(SECRETS.get(name, [])))
        if name == PIN_AFTER:
            img = img.env({{"PIP_CONSTRAINT": CONSTRAINTS, "UV_CONSTRAINT": CONSTRAINTS}})
    return img.run_commands(*VERIFY).workdir("/root")


def _secrets(names: list[str]) -> list[modal.Secret] | None:
    """The stack's from_env values of a step, from this environment: a build secret of its layer
    (never an .env() value, so no image layer holds them). Unset ones are left to envbuild
    provision, which refuses to run a step without a required one."""
    present = [n for n in names if os.environ.get(n)]
    return [modal.Secret.from_local_environ(present)] if present else None
'''  # noqa: E501 - code written out or run as it is
