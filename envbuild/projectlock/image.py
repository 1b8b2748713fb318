"""``envbuild docker --lock FILE``: one image layer per stage of the lock's chosen environment.

The image runs the host's code path: each layer copies a *stage slice* and runs ``envbuild
provision --lock`` on it, so every stage goes through the same installer, the same exact
hash-pinned files and the ABI guard after it. A slice (``NN-<stage>.json``, written beside the
Dockerfile) holds the stages up to its own (their requirement lines, ``name @ URL
--hash=sha256:...``, and what the guard needs: torch's version and the protected runtime); it
names no lock sha256 and no path, so its bytes change only when a stage up to its own changes.
Layer N's provision finds stages 1..N-1 done in the manifest the layers before left (the same
requirement text is the same step: verified, not installed again) and installs stage N.
A change to an application dependency (stage ``rest``) changes the ``rest`` slice and the ones
after it: the torch and extension layers stay cached.

The gate runs when the Dockerfile is rendered (a lock it fails is refused then, exit 8); the
slices carry the environment it chose. The project itself (stage ``project``) is not in the
image: its source is the build context's business (``COPY`` it and install it in a layer of
your own); the Dockerfile says so.

A stage that builds something in isolation (a plain sdist, a git pin) carries in its slice where
the builds get their ``build-system.requires`` (``projectlock.buildreqs.BuildSources``: the
project's indexes, find-links and build constraints), so its layer builds as the host does, not
with ``--no-index``; the Dockerfile names those sources in a comment.

Every value that reaches the Dockerfile goes through ``envbuild.quoting``; the slices are JSON.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict

from envbuild import layout
from envbuild.errors import ConfigError
from envbuild.images.docker import (
    CUDA_BASE_TAGS,
    SECRETS,
    SYNTAX,
    SYSTEM_PYTHON,
    DockerOptions,
    Rendered,
    choose_base,
    cuda_check,
    image_path,
)
from envbuild.images.tool import tool_dockerfile
from envbuild.projectlock.buildreqs import BuildSources, build_sources, builds_isolated, step_env
from envbuild.projectlock.stages import STAGE_WORDS, StagePlan
from envbuild.projectlock.stagestack import stack_for, stage_line, stage_pins, step_stage
from envbuild.quoting import docker_comment, docker_env, docker_path, docker_run, sh_word
from envbuild.spec import ABI, Host, Layout, StackSpec, Step, spec_digest

__all__ = ["SCHEMA", "cuda_of", "is_slice", "read_slice", "render_lock", "stage_slices"]

SCHEMA = "envbuild.lock-stages/1"
IMAGE_SLICE = "/etc/envbuild/lock-stages.json"
_HEADER = "# envbuild provision --lock: one stage, hash-pinned\n"
RUNTIME_APT = "ca-certificates git g++ make"


def cuda_of(version: str) -> str | None:
    """The CUDA a torch build names in its local tag (``+cu128`` -> ``12.8``, ``+cu130`` ->
    ``13.0``)."""
    local = version.split("+", 1)[1] if "+" in version else ""
    if not local.startswith("cu") or not local[2:].isdigit() or len(local) < 5:
        return None
    digits = local[2:]
    return f"{int(digits[:-1])}.{digits[-1]}"


# ----------------------------------------------------------------------------- stage slices


def stage_slices(
    plan: StagePlan, spec: StackSpec, build: BuildSources | None = None
) -> list[tuple[str, str]]:
    """``(stage, text)`` per stage the image installs: the stages up to it (see the module
    docstring). ``build``: where a stage's isolated builds get their requirements (by default the
    project's indexes beside the lock, ``projectlock.buildreqs.build_sources``)."""
    abi = spec.abi
    build = build or build_sources(plan.chosen.source.project)
    stages: list[dict[str, Any]] = []
    out = []
    for step in spec.steps:
        if step.name == "project":
            continue
        stage = step_stage(step.name)
        placed = stage_pins(plan, stage, adopt=abi.adopt)
        entry: dict[str, Any] = {
            "name": step.name,
            "what": STAGE_WORDS[stage],
            "packages": list(step.packages),
            "lines": [stage_line(p) for p in placed],
            "no_build_isolation": step.no_build_isolation,
        }
        if any(builds_isolated(p) for p in placed):
            entry["build"] = _build_json(build)
        stages.append(entry)
        doc = {
            "schema": SCHEMA,
            "name": spec.name,
            "environment": plan.chosen.env.name,
            "python": spec.python,
            "torch": {
                "version": abi.version,
                "local": abi.local,
                "protect": list(abi.protect),
                "triton_provider": abi.triton_provider,
            },
            "stages": stages,
        }
        out.append((step.name, json.dumps(doc, indent=2) + "\n"))
    return out


def _build_json(build: BuildSources) -> dict[str, Any]:
    """A slice's record of where its stage's isolated builds get their requirements."""
    return {
        "index_url": build.index_url,
        "extra_index_urls": list(build.extra_index_urls),
        "find_links": list(build.find_links),
        "no_index": build.no_index,
        "constraints": list(build.constraints),
    }


def _slice_step(s: dict[str, Any]) -> Step:
    """The step of one stage of a slice: ``--no-index`` unless it carries build sources."""
    b = s.get("build")
    if b is None:
        return Step(
            name=str(s["name"]),
            packages=tuple(str(p) for p in s["packages"]),
            no_deps=True,
            no_index=True,
            no_build_isolation=bool(s["no_build_isolation"]),
        )
    sources = BuildSources(
        index_url=None if b["index_url"] is None else str(b["index_url"]),
        extra_index_urls=tuple(str(u) for u in b["extra_index_urls"]),
        find_links=tuple(str(u) for u in b["find_links"]),
        no_index=bool(b["no_index"]),
        constraints=tuple(str(c) for c in b["constraints"]),
    )
    return Step(
        name=str(s["name"]),
        packages=tuple(str(p) for p in s["packages"]),
        no_deps=True,
        no_index=sources.no_index,
        index_url=sources.index_url,
        extra_index_urls=sources.extra_index_urls,
        find_links=sources.find_links,
        env=step_env(sources),
        no_build_isolation=bool(s["no_build_isolation"]),
    )


def is_slice(path: Path) -> bool:
    if path.suffix != ".json":
        return False
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("schema") == SCHEMA


class SliceSourceJSON(TypedDict):
    """What a receipt (and ``provision --lock SLICE --json``) records of a stage slice."""

    lock_file: str  # the stage slice
    environment: str  # the lock's environment it was rendered for
    slice: bool  # always true


def read_slice(path: Path, root: str) -> tuple[StackSpec, dict[str, str], SliceSourceJSON]:
    """The stack a slice describes, its stage files' text by stage, and what the receipt records."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        t = doc["torch"]
        steps = tuple(_slice_step(s) for s in doc["stages"])
        texts = {
            str(s["name"]): (
                _HEADER
                + f"# stage {s['name']}: {s['what']}\n"
                + "\n".join(map(str, s["lines"]))
                + "\n"
            )
            for s in doc["stages"]
        }
        spec = StackSpec(
            path=path,
            name=str(doc["name"]),
            description=f"{path} ({doc['environment']})",
            python=str(doc["python"]),
            abi=ABI(
                package="torch",
                version=str(t["version"]),
                local=t.get("local"),
                protect=tuple(str(p) for p in t.get("protect") or ()),
                triton_provider=t.get("triton_provider"),
            ),
            layout=Layout(root=root, links={}, min_free_gb=1.0),
            host=Host(),
            env={},
            steps=steps,
            digest=spec_digest({"slice": doc["stages"], "environment": doc["environment"]}),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{path}: not a readable stage slice of `envbuild docker --lock` ({type(exc).__name__}:"
            f" {exc})",
            hint="Render the Dockerfile again with `envbuild docker --lock FILE`.",
        ) from exc
    return (
        spec,
        texts,
        {"lock_file": str(path), "environment": str(doc["environment"]), "slice": True},
    )


# ----------------------------------------------------------------------------- the Dockerfile


BUILD_CACHE_MOUNT = "/mnt/envbuild-build-cache"


def _run_stage(stage: str, mounts: str, provision: list[str], build_cache: str | None) -> list[str]:
    """A stage's ``RUN``; the builds stage with the fleet's build cache (``--build-cache``): a URL
    as it is, a folder as the build context ``envbuild-build-cache`` mounted read only."""
    if stage != "builds" or build_cache is None:
        return [f"RUN {mounts} \\", f"    {docker_run(provision, 'the provision command')}"]
    if build_cache == "context":
        mounts += f" --mount=type=bind,from=envbuild-build-cache,target={BUILD_CACHE_MOUNT}"
        where = BUILD_CACHE_MOUNT
    else:
        where = build_cache
    argv = [*provision, "--build-cache", where]
    return [
        "# the fleet's build cache: a wheel another host published for this key is installed,"
        " checked;",
        "# what is built here is not published (in an image build the cache is read only)",
        f"RUN {mounts} \\",
        f"    {docker_run(argv, 'the provision command')}",
    ]


def render_lock(plan: StagePlan, opts: DockerOptions, command: str) -> Rendered:
    """The Dockerfile and its slices (context-relative path -> text) for ``plan``."""
    root = image_path(opts.root, "--root")
    docker_path(opts.steps_dir, "the stage slices' folder (from -o)")
    build = build_sources(plan.chosen.source.project)
    spec = stack_for(plan, root=root, build=build)
    cuda = cuda_of(spec.abi.version)
    if cuda is not None and cuda not in CUDA_BASE_TAGS and not opts.base:
        raise ConfigError(
            f"{plan.chosen.path}: torch {spec.abi.version} is built for CUDA {cuda}, which has no "
            f"nvidia/cuda base image envbuild knows (known: {', '.join(CUDA_BASE_TAGS)})",
            hint="Pass one with --base IMAGE.",
        )
    spec = replace(spec, abi=replace(spec.abi, cuda=cuda))
    base = choose_base(spec, opts)
    paths = layout.Paths(root=Path(root), venv_name=spec.layout.venv)
    venv = f"{root}/{spec.layout.venv}"
    py = sh_word(spec.python, "python")
    files: dict[str, str] = {}
    slices = stage_slices(plan, spec, build)
    out = [
        *_header(plan, spec, opts, command, base.image, base.ubuntu, py, slices),
        *_env_layer(spec, paths, venv),
        *_stage_layers(plan, slices, spec, paths, opts, root, files),
        *_smoke_layer(paths, root),
    ]
    warnings = (
        (
            (
                "the project itself is not installed in the image (its source is not in the lock):"
                " install it in a layer of your own"
            ),
        )
        if plan.stage("project")
        else ()
    )
    return Rendered(dockerfile="\n".join(out), files=files, warnings=warnings)


def _header(
    plan: StagePlan,
    spec: StackSpec,
    opts: DockerOptions,
    command: str,
    image: str,
    ubuntu: str | None,
    py: str,
    slices: list[tuple[str, str]],
) -> list[str]:
    """The Dockerfile's head: what made it and from which lock, the base image, the shell and
    the build's environment, the CUDA check, Python and envbuild itself."""
    chosen = plan.chosen
    return [
        f"# syntax={SYNTAX}",
        docker_comment(
            f"Generated by `{command}`; do not edit (render it again after a change to the lock).",
            "the command line",
        ),
        docker_comment(
            f"Lock {chosen.path.name} ({chosen.lock.format}), {chosen.env.name}: torch"
            f" {spec.abi.version}, Python {py}; one layer per stage:"
            f" {', '.join(s for s, _ in slices)}.",
            "the lock",
        ),
        (
            "# A change to a later stage (an application dependency) rebuilds that stage's layer"
            " and the ones"
        ),
        (
            "# after it; torch and the extensions stay cached. Each layer runs provision --lock on"
            " its slice:"
        ),
        "# the same hash-pinned files and ABI guard as on a host.",
        *(
            [
                "# The project itself is not installed here: COPY its source and `uv pip install`"
                " it in a layer of your own."
            ]
            if plan.stage("project")
            else []
        ),
        "",
        f"ARG BASE_IMAGE={image}",
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
        *cuda_check(spec),
        *_python(py, ubuntu),
        *tool_dockerfile(opts.tool_src, f"python{py}"),
    ]


def _env_layer(spec: StackSpec, paths: layout.Paths, venv: str) -> list[str]:
    """The environment overlay, before the first stage (the venv first on PATH)."""
    overlay = layout.overlay_env(spec, paths)
    overlay.pop("PIP_CACHE_DIR", None)
    overlay.pop("UV_CACHE_DIR", None)
    env_lines = [
        docker_env("VIRTUAL_ENV", venv, "--root"),
        f"PATH={docker_path(venv, '--root')}/bin:$PATH",
    ]
    env_lines += [docker_env(k, v, f"env.{k}") for k, v in overlay.items()]
    return [
        "# The environment overlay, before the first stage.",
        "ENV " + " \\\n    ".join(env_lines),
        "",
    ]


def _stage_layers(
    plan: StagePlan,
    slices: list[tuple[str, str]],
    spec: StackSpec,
    paths: layout.Paths,
    opts: DockerOptions,
    root: str,
    files: dict[str, str],
) -> list[str]:
    """One layer per stage: its slice copied in (added to ``files``), then provision --lock on it;
    torch frozen for every later layer right after the torch stage's."""
    out: list[str] = []
    cache = paths.cache_env()
    mounts = (
        f"--mount=type=cache,target={cache['PIP_CACHE_DIR']}"
        f" --mount=type=cache,target={cache['UV_CACHE_DIR']} {SECRETS}"
    )
    provision = ["envbuild", "provision", "--lock", IMAGE_SLICE, "--root", root, "--home", "/root"]
    for n, (stage, text) in enumerate(slices, 1):
        rel = docker_path(f"{opts.steps_dir}/{n:02d}-{stage}.json", "a stage slice")
        files[rel] = text
        names = [p.entry.name for p in stage_pins(plan, step_stage(stage), adopt=spec.abi.adopt)]
        out += [
            docker_comment(
                f"stage {n}/{len(slices)} {stage}: {', '.join(names)}", "the stage's packages"
            ),
            *_build_comment(text),
            f"COPY {rel} {IMAGE_SLICE}",
            *_run_stage(stage, mounts, provision, opts.build_cache),
            "",
        ]
        if stage == "torch":
            constraints = str(paths.constraints)
            out += [
                (
                    "# torch is frozen from here on, for every later layer and every `uv pip"
                    " install` in the image"
                ),
                (
                    "# (uv installs into $VIRTUAL_ENV; the venv holds the lock's packages only, no"
                    " pip)."
                ),
                f"ENV {docker_env('PIP_CONSTRAINT', constraints, '--root')} \\",
                f"    {docker_env('UV_CONSTRAINT', constraints, '--root')}",
                "",
            ]
    return out


def _smoke_layer(paths: layout.Paths, root: str) -> list[str]:
    """The last layer: smoke (what runs without a GPU), the run-time caches opened to all."""
    runtime_caches = [
        str(paths.cache / sub)
        for var, sub in layout.CACHE_DIRS.items()
        if var not in ("PIP_CACHE_DIR", "UV_CACHE_DIR")
    ]
    return [
        (
            "# Smoke: the checks of what the lock installed that run without a GPU (`docker run"
            " --gpus all` for the rest)."
        ),
        f"RUN {docker_run(['envbuild', 'smoke', '--root', root], '--root')} \\",
        f"    && {docker_run(['chmod', '1777', *runtime_caches], '--root')}",
        "",
        "WORKDIR /root",
        'CMD ["/bin/bash"]',
        "",
    ]


def _build_comment(text: str) -> list[str]:
    """A comment naming where the slice's own stage builds get their requirements (none: the
    stage installs wheels only, ``--no-index``). Credentials in a URL are not shown."""
    from envbuild.index.redaction import redact

    b = json.loads(text)["stages"][-1].get("build")
    if b is None:
        return []
    urls = [u for u in [b["index_url"], *b["extra_index_urls"], *b["find_links"]] if u]
    where = ", ".join(redact(str(u)) for u in urls) or "the image's uv / pip configuration"
    return [
        docker_comment(
            f"it builds in isolation, as on the host: build requirements from {where}",
            "the stage's build sources",
        )
    ]


def _python(py: str, ubuntu: str | None) -> list[str]:
    apt_cache = (
        "--mount=type=cache,target=/var/cache/apt,sharing=locked "
        "--mount=type=cache,target=/var/lib/apt,sharing=locked"
    )
    # a base envbuild does not know (NGC, a PyTorch image): its apt, else its own python
    if ubuntu is None:
        return [
            (
                f"# Python {py} with its headers and venv, from the base image's apt where it has"
                " them."
            ),
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
    ppa = ""
    if py != SYSTEM_PYTHON.get(ubuntu):
        ppa = (
            " \\\n    && apt-get install -y --no-install-recommends software-properties-common"
            " gpg-agent \\\n    && add-apt-repository -y ppa:deadsnakes/ppa && apt-get update"
        )
    return [
        f"# Python {py} with its headers and venv, from the base image's apt.",
        "# hadolint ignore=DL3008",
        f"RUN {apt_cache} \\",
        "    rm -f /etc/apt/apt.conf.d/docker-clean \\",
        (
            "    && apt-get update && apt-get install -y --no-install-recommends"
            f" {RUNTIME_APT}{ppa} \\"
        ),
        (
            f"    && apt-get install -y --no-install-recommends python{py} python{py}-venv"
            f" python{py}-dev"
        ),
        "",
    ]
