"""envbuild installed in an image: the one snippet every image uses (``images.docker``'s stack
Dockerfile, ``projectlock.image``'s lock Dockerfile, ``images.modal``'s ``run_commands``).

envbuild goes into its own venv (``TOOL_VENV``, never the training venv) from its package code
copied to ``/src/envbuild``: the stack specs come per layer later, so a spec edit does not
reinstall envbuild (the profile folders pyproject.toml lists are made empty; the image uses
``--stack``). ``envbuild`` and the ``uv`` it depends on are linked onto ``PATH``. Where the build
context is no envbuild checkout, the running envbuild's source is copied beside the Dockerfile
(``tool_source``, ``copy_tool_source``).
"""

from __future__ import annotations

from pathlib import Path

from envbuild.errors import ConfigError
from envbuild.quoting import docker_path

__all__ = [
    "SECRETS",
    "TOOL_SRC",
    "TOOL_SRC_DIR",
    "TOOL_VENV",
    "checkout",
    "copy_tool_source",
    "tool_copies",
    "tool_dockerfile",
    "tool_shell",
    "tool_source",
    "tool_steps",
]

TOOL_VENV = "/opt/envbuild-tool"
TOOL_SRC_DIR = "/src/envbuild"
# Build-time package sources and credentials reach a RUN as secrets, never as ARG/ENV or COPY, so
# no layer keeps them: `docker build --secret id=pip.conf,src=...` (buildah: the same flag).
SECRETS = (
    "--mount=type=secret,id=pip.conf,target=/etc/pip.conf "
    "--mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml"
)


def tool_copies(tool_src: str) -> tuple[tuple[str, str], ...]:
    """(path in the build context, path in the image) of what the install reads."""
    return (
        (tool_src + "pyproject.toml", f"{TOOL_SRC_DIR}/pyproject.toml"),
        (tool_src + "envbuild", f"{TOOL_SRC_DIR}/envbuild"),
    )


def tool_steps(interpreter: str) -> tuple[str, ...]:
    """The shell commands, in order, that install envbuild with ``interpreter`` (a shell word)."""
    return (
        f"mkdir -p {TOOL_SRC_DIR}/lockfiles && touch {TOOL_SRC_DIR}/README.md",
        (
            f"grep -o '\"envbuild\\._lockfiles\\.[A-Za-z0-9_]*\"' {TOOL_SRC_DIR}/pyproject.toml |"
            f" tr -d '\"' | sed 's|^envbuild\\._lockfiles\\.|{TOOL_SRC_DIR}/lockfiles/|' | xargs -r"
            " mkdir -p"
        ),
        f"{interpreter} -m venv {TOOL_VENV}",
        f"{TOOL_VENV}/bin/python -m pip install {TOOL_SRC_DIR}",
        f"ln -sf {TOOL_VENV}/bin/envbuild {TOOL_VENV}/bin/uv /usr/local/bin/",
        "envbuild --version",
    )


def tool_shell(interpreter: str) -> str:
    """The install as one shell command line (a Modal ``run_commands`` entry)."""
    return " && ".join(tool_steps(interpreter))


def tool_dockerfile(tool_src: str, interpreter: str) -> list[str]:
    """The Dockerfile lines: a comment, the ``COPY`` lines and one ``RUN`` (pip's cache mounted,
    the package sources as secrets), then a blank line."""
    pyproject, package = tool_copies(tool_src)
    run = ["    " + step for step in tool_steps(interpreter)]
    run[1:] = ["    && " + line.lstrip() for line in run[1:]]
    return [
        "# envbuild first, in its own venv (never in the training venv). Only the package code is",
        (
            "# copied: the stack specs come per layer below, so a spec edit does not reinstall"
            " envbuild"
        ),
        "# (the profile folders pyproject.toml lists are made empty; the image uses --stack).",
        f"COPY {docker_path(pyproject[0], 'envbuild source')} {TOOL_SRC_DIR}/",
        f"COPY {docker_path(package[0] + '/', 'envbuild source')} {package[1]}/",
        f"RUN --mount=type=cache,target=/root/.cache/pip {SECRETS} \\",
        *(line + " \\" for line in run[:-1]),
        run[-1],
        "",
    ]


TOOL_SRC = "envbuild-src"


def tool_source(context: Path, beside: Path) -> Path:
    """Where the image's ``COPY`` of envbuild's own source reads from: the context itself when it
    is an envbuild checkout, else ``<Dockerfile folder>/envbuild-src`` (a copy made on write)."""
    if (context / "pyproject.toml").is_file() and (context / "envbuild" / "__init__.py").is_file():
        return context
    if checkout() is None:
        raise ConfigError(
            f"the build context {context} holds no envbuild source (pyproject.toml and envbuild/)"
            " for the image's envbuild, and this envbuild is not running from a checkout to copy"
            " it from",
            hint="Render from an envbuild checkout (cd into it, or pass --context CHECKOUT).",
        )
    return beside / TOOL_SRC


def checkout() -> Path | None:
    import envbuild

    root = Path(envbuild.__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def copy_tool_source(dest: Path) -> None:
    """Copy the running envbuild's package and pyproject.toml to ``dest`` (replacing an old
    copy)."""
    import shutil

    root = checkout()
    assert root is not None
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(
        root / "envbuild", tmp / "envbuild", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    shutil.copy2(root / "pyproject.toml", tmp / "pyproject.toml")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
