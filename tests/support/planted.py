"""Planted failures for ``provision --lock`` against ``uv sync --frozen``: real projects, locked by
the real ``uv lock`` against the gate's stand-in index (``support.gatelocks``) and a second local
index of the planted packages, each with one thing that makes the install fail or collide.

``planted_project(tmp, idx, kind)`` writes a uv project (torch 2.10.0 from the PyPI stand-in,
``trainer-utils`` and its ``einops-like``: the healthy part) plus the planted dependency, locks it,
and returns a ``Planted``:

- ``"sdist"``: ``broken-build 1.0``, an sdist only (its metadata is static, so ``uv lock`` reads it
  without building); its build backend raises, as a C extension whose compiler fails does.
- ``"git"``: ``gitdep``, a git source locked from a real repository (``git+file://``), then moved
  in the lock to a URL where nothing answers (``127.0.0.1`` on a closed port), as a private git
  host that is down.
- ``"overlap"``: ``cvlike`` and ``cvlike-headless``, two wheels that both install ``cvlike/``
  (``opencv-python`` and ``opencv-python-headless`` both own ``cv2/``).
- ``"overlap-torch"``: ``torchpatch``, a wheel that installs ``torch/version.py`` over torch's.
- ``"breaks-import"``: ``sitebreaker``, a wheel whose ``.pth`` file ends every interpreter that
  starts in the venv (``os._exit(7)``): it installs, and then ``import torch`` fails.
- ``"healthy"``: nothing planted.

The planted packages' index is served for the project's lifetime (``Planted.server``); the
caller closes it (``with planted_project(...) as p``).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.fixtures import installer_env
from support.gatelocks import GateIndex, uv_bin
from support.index import IndexServer, UnreachablePort
from support.wheels import build_sdist, build_wheel

__all__ = ["KINDS", "Planted", "planted_project"]

KINDS = ("healthy", "sdist", "git", "overlap", "overlap-torch", "breaks-import")

# the file ``broken-build``'s sdist lists in its build but does not ship: the build fails reading it
_MISSING = "broken_build/generated.py"


@dataclass
class Planted:
    kind: str
    folder: Path  # the project: pyproject.toml, uv.lock
    server: IndexServer  # the planted packages' index
    closed: UnreachablePort | None = None  # the git host that does not answer

    @property
    def lock(self) -> Path:
        return self.folder / "uv.lock"


def _planted_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _broken_sdist(folder)
    for name in ("cvlike", "cvlike-headless"):
        build_wheel(
            folder,
            name,
            "1.0",
            files={
                "cvlike/__init__.py": f"WHO = {name!r}\n",
                f"{name.replace('-', '_')}_marker.py": "",
            },
        )
    build_wheel(folder, "torchpatch", "1.0", files={"torch/version.py": "__version__ = 'x'\n"})
    build_wheel(
        folder,
        "sitebreaker",
        "1.0",
        files={"sitebreaker.pth": "import os; os._exit(7)\n", "sitebreaker/__init__.py": ""},
    )


def _broken_sdist(folder: Path) -> None:
    """``broken-build``'s sdist: the inline backend's, less a file its build reads (the build
    raises, as a compiler error does; the metadata stays static and readable)."""
    import gzip
    import io
    import tarfile

    made = build_sdist(
        folder / "x", "broken-build", "1.0", files={"broken_build/__init__.py": "", _MISSING: ""}
    )
    buf = io.BytesIO()
    with tarfile.open(made) as src, tarfile.open(fileobj=buf, mode="w") as dst:
        for member in src.getmembers():
            if not member.name.endswith(_MISSING):
                dst.addfile(member, src.extractfile(member))
    with gzip.GzipFile(folder / made.name, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue())
    made.unlink()
    made.parent.rmdir()


def _git_repo(at: Path, env: dict[str, str]) -> str:
    """A git repository of the ``gitdep`` project (static metadata, the inline backend's build);
    returns its commit."""
    src = at / "gitdep-src"
    tarball = build_sdist(at / "gitdep-sdist", "gitdep", "1.0")
    import tarfile

    with tarfile.open(tarball) as tar:
        tar.extractall(at / "gitdep-x", filter="data")
    (at / "gitdep-x" / "gitdep-1.0").rename(src)
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "gitdep"],
    ):
        subprocess.run(argv, cwd=src, check=True, env=env, capture_output=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=src, check=True, env=env, capture_output=True, text=True
    ).stdout.strip()


@contextlib.contextmanager
def planted_project(tmp: Path, idx: GateIndex, kind: str) -> Iterator[Planted]:
    """The project of ``kind`` (see the module docstring), locked; its index served meanwhile."""
    assert kind in KINDS, kind
    files = tmp / "planted-files"
    if not files.is_dir():
        _planted_files(files)
    folder = tmp / f"project-{kind}"
    folder.mkdir(parents=True)
    env = installer_env(tmp / "home")
    env.pop("UV_NO_CONFIG")
    deps = ["torch==2.10.0", "trainer-utils==1.0"]
    sources = ""
    commit = ""
    if kind == "sdist":
        deps.append("broken-build==1.0")
        sources = 'broken-build = { index = "planted" }\n'
    elif kind == "overlap":
        deps += ["cvlike==1.0", "cvlike-headless==1.0"]
        sources = 'cvlike = { index = "planted" }\ncvlike-headless = { index = "planted" }\n'
    elif kind == "overlap-torch":
        deps.append("torchpatch==1.0")
        sources = 'torchpatch = { index = "planted" }\n'
    elif kind == "breaks-import":
        deps.append("sitebreaker==1.0")
        sources = 'sitebreaker = { index = "planted" }\n'
    elif kind == "git":
        commit = _git_repo(tmp, env)
        deps.append("gitdep")
        sources = f'gitdep = {{ git = "file://{tmp / "gitdep-src"}", rev = "{commit}" }}\n'
    with IndexServer({"planted": files}) as server, contextlib.ExitStack() as stack:
        dep_list = ", ".join(f'"{d}"' for d in deps)
        (folder / "pyproject.toml").write_text(
            f'[project]\nname = "planted"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
            f"dependencies = [{dep_list}]\n\n[tool.uv]\npackage = false\n"
            "environments = [\"sys_platform == 'linux'\"]\n\n"
            f"[tool.uv.sources]\n{sources}\n"
            f'[[tool.uv.index]]\nname = "planted"\nurl = "{server.simple_url("planted")}"\n'
            "explicit = true\n\n"
            f'[[tool.uv.index]]\nname = "pypi"\nurl = "{idx.pypi_url}"\ndefault = true\n'
        )
        subprocess.run(
            [uv_bin(), "lock", "--no-cache"],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
        planted = Planted(kind=kind, folder=folder, server=server)
        if kind == "git":
            planted.closed = stack.enter_context(UnreachablePort())
            closed = f"http://127.0.0.1:{planted.closed.port}/gitdep.git"
            for f in (folder / "uv.lock", folder / "pyproject.toml"):
                f.write_text(f.read_text().replace(f"file://{tmp / 'gitdep-src'}", closed))
        yield planted
