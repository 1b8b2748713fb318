"""A lock's steps are installed by moving the prepare's prefixes into the venv
(``provision.movein``), and the venv is byte for byte the one ``uv sync --frozen`` makes at the
same path.

The wheels are real (``support.wheels``) and carry what a move must get right: a console script
(its first line names the interpreter), a ``.data/scripts`` file with ``#!python`` (uv writes the
interpreter there too) and one with a shell's own ``#!``, data files (``share/``), headers
(``include/site/python3.X/<name>``), two wheels sharing a namespace folder (``nsx/``, one identical
``__init__.py``), and a torch with a script of its own. They are served over HTTP, locked by
``uv lock``, provisioned with ``provision --lock``; then the venv is moved aside, ``uv sync
--frozen`` makes its own at the same path, and the two trees are compared file by file: names,
bytes (scripts and RECORDs included), modes. Planted: a script left with the scratch's interpreter.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from support.fixtures import installer_env, run_cli
from support.gatelocks import _run, uv_bin
from support.index import IndexServer
from support.wheels import build_wheel

pytestmark = pytest.mark.slow

_CLI_DATA = "cli_like-1.0.data"


def _wheels(folder: Path) -> None:
    build_wheel(
        folder,
        "torch",
        "2.10.0",
        files={
            "torch/__init__.py": (
                "from .version import __version__ as __version__\ndef main():\n    return 0\n"
            ),
            "torch/version.py": "__version__ = '2.10.0'\ncuda = None\n",
            "torch-2.10.0.dist-info/entry_points.txt": (
                "[console_scripts]\ntorchrun = torch:main\n"
            ),
        },
    )
    build_wheel(
        folder,
        "cli-like",
        "1.0",
        files={
            "cli_like/__init__.py": "def main():\n    print('cli-like')\n",
            "cli_like-1.0.dist-info/entry_points.txt": (
                "[console_scripts]\ncli-like = cli_like:main\n"
            ),
            f"{_CLI_DATA}/scripts/cli-py": "#!python\nimport cli_like\ncli_like.main()\n",
            f"{_CLI_DATA}/scripts/cli-sh": "#!/bin/sh\necho cli-like\n",
            f"{_CLI_DATA}/data/share/cli-like/notes.txt": "notes\n",
            f"{_CLI_DATA}/headers/cli_like.h": "#define CLI_LIKE 1\n",
        },
    )
    for name in ("ns-a", "ns-b"):
        mod = name.replace("-", "_")
        build_wheel(
            folder,
            name,
            "1.0",
            files={"nsx/__init__.py": "", f"nsx/{mod}/__init__.py": f"NAME = {name!r}\n"},
        )


def _tree(venv: Path) -> dict[str, tuple[str, bytes | str]]:
    """{path under the venv: (kind and mode, bytes or link target)} of what the installs wrote:
    ``bin``, ``include``, ``share`` and site-packages; left out: bytecode (the import check's) and
    what making the venv wrote (its interpreter links and activation scripts, which name its path:
    envbuild's was moved aside)."""
    out: dict[str, tuple[str, bytes | str]] = {}
    if (venv / ".lock").is_file():  # uv's lock file, which its installs leave in the venv
        out[".lock"] = ("file", (venv / ".lock").read_bytes())
    for top in ("bin", "include", "share", "lib"):
        for folder, dirs, files in os.walk(venv / top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if top == "bin" and name.startswith(
                    ("activate", "deactivate", "pydoc", "python", "envbuild")
                ):
                    continue
                path = Path(folder) / name
                rel = str(path.relative_to(venv))
                st = path.lstat()
                if stat.S_ISLNK(st.st_mode):
                    out[rel] = ("link", os.readlink(path))
                else:
                    out[rel] = (f"file {stat.S_IMODE(st.st_mode):o}", path.read_bytes())
    return out


def test_a_moved_in_venv_is_uv_syncs_venv_byte_for_byte(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _wheels(wheels)
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    with IndexServer({"pypi": wheels}) as server:
        (project / "pyproject.toml").write_text(
            '[project]\nname = "mover"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
            'dependencies = ["torch==2.10.0", "cli-like==1.0", "ns-a==1.0", "ns-b==1.0"]\n\n'
            "[tool.uv]\npackage = false\n\n"
            f'[[tool.uv.index]]\nname = "pypi"\nurl = "{server.simple_url("pypi")}"\n'
            "default = true\n"
        )
        _run([uv_bin(), "lock", "--no-cache"], project, tmp_path, project_config=True)
        env = installer_env(home)
        env.pop("UV_NO_CONFIG", None)
        root = tmp_path / "data"
        res = run_cli(("provision", "--lock", project / "uv.lock", "--root", root), home=home)
        assert res.rc == 0, res.output
        venv = root / "venv"
        # each step was moved in (not linked again from uv's cache), the scripts among them
        for log in ("01-torch.log", "02-rest.log"):
            said = (root / "logs" / log).read_text()
            assert "moved the prepared files of" in said and "uv pip install" not in said, said
        # a new root's uv cache is empty: the prepare does not try it offline first
        for log in ("01-torch.prefetch.log", "02-rest.prefetch.log"):
            said = (root / "logs" / log).read_text()
            assert "--prefix" in said and "--offline" not in said, said
        assert (venv / "bin" / "cli-like").read_text().startswith(f"#!{venv}/bin/python\n")

        ours = venv.with_name("venv-envbuild")
        venv.rename(ours)
        sync = subprocess.run(
            [uv_bin(), "sync", "--frozen", "--python", str(ours / "bin" / "python")],
            cwd=project,
            env={**env, "UV_PROJECT_ENVIRONMENT": str(venv)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert sync.returncode == 0, sync.stderr
    got, want = _tree(ours), _tree(venv)
    assert "share/cli-like/notes.txt" in want and "bin/torchrun" in want, sorted(want)
    assert ".lock" in want, sorted(want)
    assert any(p.startswith("include/site/python3") for p in want), sorted(want)
    differ = {
        p: (got.get(p, ("-", b""))[0], want.get(p, ("-", b""))[0])
        for p in got.keys() | want.keys()
        if got.get(p) != want.get(p)
    }
    assert not differ, differ

    # planted: a script left naming the interpreter the prefix was installed with
    script = ours / "bin" / "cli-like"
    text = script.read_text().splitlines(keepends=True)
    script.unlink()
    script.write_text("#!/usr/bin/python3\n" + "".join(text[1:]))
    script.chmod(0o755)
    assert _tree(ours) != want
    shutil.rmtree(venv)


def _prefix(tmp: Path, wheels: Path, python: str, *names: str) -> Path:
    """A scratch prefix as the prepare makes it: ``uv pip install --no-deps --prefix``."""
    prefix = tmp / "prefix"
    subprocess.run(
        [uv_bin(), "pip", "install", "--no-deps", "--quiet", "--python", python]
        + ["--prefix", str(prefix), *(str(next(wheels.glob(f"{n}-*.whl"))) for n in names)],
        check=True,
        capture_output=True,
        env=installer_env(tmp / "home"),
        timeout=120,
    )
    return prefix


# uv's first two lines of a script whose interpreter path is too long for ``#!`` (or has a space)
_WRAPPER = "#!/bin/sh\n'''exec' '{python}' \"$0\" \"$@\"\n' '''\n"


@pytest.mark.parametrize("blocked", ["installed", "file", "wrapper"])
def test_a_prefix_that_would_not_be_uvs_install_is_not_moved(tmp_path: Path, blocked: str) -> None:
    """Where the move would not make what uv makes, it says why and changes nothing: a
    distribution the venv already holds (uv would remove it first), a file in the way (uv would
    overwrite it), a script in uv's ``/bin/sh`` wrapper form (a long interpreter path)."""
    from envbuild.provision.movein import move_in

    wheels = tmp_path / "wheels"
    _wheels(wheels)
    venv = tmp_path / "venv"
    subprocess.run(
        [uv_bin(), "venv", "--quiet", str(venv)], check=True, env=installer_env(tmp_path / "home")
    )
    python = str(venv / "bin" / "python")
    site = next(venv.glob("lib/python3*/site-packages"))
    prefix = _prefix(tmp_path, wheels, python, "cli_like", "ns_a")
    installed: list[str] = []
    if blocked == "installed":
        installed = ["ns-a"]
    elif blocked == "file":
        (site / "nsx").mkdir()
        (site / "nsx" / "__init__.py").write_text("# someone else's\n")
    else:
        script = prefix / "bin" / "cli-like"
        body = script.read_text().split("\n", 1)[1]
        script.unlink()
        script.write_text(_WRAPPER.format(python=python) + body)
    before_prefix, before_venv = _tree(prefix), _tree(venv)
    got = move_in(
        [prefix], venv, site, scratch_python=Path(python), venv_python=python, installed=installed
    )
    assert isinstance(got, str), got
    said = {"installed": "already in the venv", "file": "in the way", "wrapper": "plain form"}
    assert said[blocked] in got, got
    assert _tree(prefix) == before_prefix and _tree(venv) == before_venv

    if blocked == "wrapper":
        return
    # the same prefix with nothing in the way moves, scripts and all
    if blocked == "file":
        shutil.rmtree(site / "nsx")
    moved = move_in(
        [prefix], venv, site, scratch_python=Path(python), venv_python=python, installed=[]
    )
    assert not isinstance(moved, str), moved
    assert sorted(moved.names) == ["cli-like", "ns-a"]
    assert (venv / "bin" / "cli-like").read_text().startswith(f"#!{python}\n")
    assert (site / "nsx" / "ns_a" / "__init__.py").is_file()
