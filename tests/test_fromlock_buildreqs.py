"""``provision --lock`` builds a packaged project, its workspace members and plain sdists as
``uv sync`` builds them: isolated, each build's ``build-system.requires`` resolved from the
project's indexes (not ``--no-index``), under its build constraints; the installed set is uv's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.buildbackends import write_package
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import GateIndex, _run, uv_bin, uv_pip_list


def _project(
    folder: Path,
    idx: GateIndex,
    backend: str,
    *,
    deps: tuple[str, ...] = (),
    tool_uv: str = "",
    member: str | None = None,
) -> Path:
    """A packaged project ``trainer`` built by ``backend`` (and a workspace member ``helper`` built
    by ``member``), locked by real ``uv lock`` against the stand-in index."""
    folder.mkdir(parents=True)
    build = write_package(folder, "trainer", backend)
    all_deps = ["torch==2.10.0", "filelock-like==3.0", *deps]
    sources = ""
    if member is not None:
        helper = folder / "packages" / "helper"
        helper.mkdir(parents=True)
        (helper / "pyproject.toml").write_text(
            write_package(helper, "helper", member)
            + '[project]\nname = "helper"\nversion = "0.2.0"\ndescription = "A helper."\n'
            'requires-python = ">=3.10"\ndependencies = ["einops-like==0.8.1"]\n'
        )
        all_deps.append("helper")
        sources = (
            '[tool.uv.workspace]\nmembers = ["packages/helper"]\n\n'
            "[tool.uv.sources]\nhelper = { workspace = true }\n\n"
        )
    (folder / "pyproject.toml").write_text(
        build
        + '[project]\nname = "trainer"\nversion = "0.1.0"\ndescription = "A trainer."\n'
        + 'requires-python = ">=3.10"\n'
        f"dependencies = {json.dumps(all_deps)}\n\n[tool.uv]\n{tool_uv}\n\n{sources}"
        f'[[tool.uv.index]]\nname = "pypi"\nurl = "{idx.pypi_url}"\ndefault = true\n'
    )
    _run([uv_bin(), "lock", "--no-cache"], folder, folder.parent, project_config=True)
    return folder / "uv.lock"


def uv_sync(folder: Path, venv: Path, home: Path, *argv: str) -> dict[str, str]:
    """What real ``uv sync --frozen ARGV`` installs into a fresh ``venv``."""
    env = installer_env(home, {"UV_PROJECT_ENVIRONMENT": str(venv)})
    env.pop("UV_NO_CONFIG")
    out = subprocess.run(
        [uv_bin(), "sync", "--frozen", "--python", sys.executable, *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return uv_pip_list(venv)


@pytest.mark.slow
def test_packaged_root_member_and_sdist_install_as_uv_sync_installs_them(
    build_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A setuptools root, a hatchling workspace member and an sdist-only dependency (setuptools):
    each backend comes from the project's index, the build constraints of the project hold, and
    the venv holds what uv sync's holds. ``--backend pip`` on that root (made bare by the uv
    backend) is refused before anything runs (exit 2), the venv unchanged."""
    lock = _project(
        tmp_path / "p",
        build_index,
        "setuptools",
        deps=("sdist-only==1.0",),
        member="hatchling",
        tool_uv='build-constraint-dependencies = ["setuptools>=61"]',
    )
    want = uv_sync(lock.parent, tmp_path / "uv-venv", tmp_path / "home")
    assert {"trainer", "helper", "sdist-only", "torch"} <= set(want)
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    venv = tmp_path / "data" / "venv"
    assert uv_pip_list(venv) == want
    pip = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data", "--backend", "pip")
    assert pip.rc == 2, pip.output
    assert (
        "has no pip" in pip.stderr
        and "--backend uv" in pip.stderr
        and "Traceback" not in pip.output
    )
    assert uv_pip_list(venv) == want
    # a workspace member uninstalled by hand: drift for verify, put back by a re-run
    subprocess.run(
        [uv_bin(), "pip", "uninstall", "--python", str(venv / "bin" / "python"), "helper"],
        check=True,
        capture_output=True,
        env=installer_env(),
    )
    gone = run_envbuild("verify", "--root", tmp_path / "data", "--no-receipt")
    assert gone.rc == 6 and "helper is not installed" in gone.output, gone.output
    back = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert back.rc == 0 and "put back helper" in back.output, back.output
    assert uv_pip_list(venv) == want
    assert run_envbuild("verify", "--root", tmp_path / "data", "--no-receipt").rc == 0


@pytest.mark.slow
def test_prefetched_builds_are_the_ones_installed(
    build_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """``--prefetch yes``: the hatchling root, the setuptools member and the sdist-only dependency
    are built while torch installs (as ``uv sync`` builds beside its downloads), under the
    project's build constraints and nothing of envbuild's; their real steps then move the prepared
    files in (``provision.movein``) without building again, and the venv holds what uv sync's
    holds."""
    lock = _project(
        tmp_path / "p",
        build_index,
        "hatchling",
        deps=("sdist-only==1.0",),
        member="setuptools",
        tool_uv='build-constraint-dependencies = ["setuptools>=61"]',
    )
    want = uv_sync(lock.parent, tmp_path / "uv-venv", tmp_path / "home")
    data = tmp_path / "data"
    res = run_envbuild("provision", "--lock", lock, "--root", data, "--prefetch", "yes")
    assert res.rc == 0, res.output
    assert uv_pip_list(data / "venv") == want
    logs = data / "logs"
    for stage in ("rest", "project"):
        prefetched = next(logs.glob(f"*-{stage}.prefetch.log")).read_text()
        assert "[envbuild] exit status 0" in prefetched, prefetched
        real = next(logs.glob(f"[0-9][0-9]-{stage}.log")).read_text()
        assert real.startswith("[envbuild] moved the prepared files of"), real
        assert "uv pip install" not in real and "Building" not in real and "Built" not in real, real
    # built as uv sync builds them: under the project's build constraints, never the baseline's
    # pins (torch, its runtime and what torch's stage holds, setuptools among them)
    assert not (data / "cache" / "prefetch" / "baseline-pins.txt").exists()
    # an index whose files say ``no-store`` leaves uv's cache nothing it may use offline; the
    # prepared prefix holds the files all the same: the step moves them in, nothing is fetched twice
    build_index.server.immutable_files = False
    try:
        again = run_envbuild(
            "provision", "--lock", lock, "--root", tmp_path / "data2", "--prefetch", "yes"
        )
    finally:
        build_index.server.immutable_files = True
    assert again.rc == 0, again.output
    assert uv_pip_list(tmp_path / "data2" / "venv") == want
    real = next((tmp_path / "data2" / "logs").glob("[0-9][0-9]-rest.log")).read_text()
    assert real.startswith("[envbuild] moved the prepared files of"), real
    assert not [ln for ln in real.splitlines() if ln.startswith("$ ")], real


@pytest.mark.slow
def test_build_constraints_bind_the_build_requirements(
    build_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """``--build-constraints FILE`` and ``[tool.uv] build-constraint-dependencies`` constrain the
    backend: one no index serves stops the project stage (exit 5) with a hint a lock user can act
    on; one that is served builds."""
    lock = _project(tmp_path / "p", build_index, "flit-core")
    bad = tmp_path / "bad.txt"
    bad.write_text("flit-core<1  # no such flit-core\n")
    res = run_envbuild(
        "provision", "--lock", lock, "--root", tmp_path / "data", "--build-constraints", bad
    )
    assert res.rc == 5, res.output
    assert (
        "could not get its build requirements" in res.stderr
        and "build-constraint-dependencies" in res.stderr
    )
    assert "Traceback" not in res.output
    good = tmp_path / "good.txt"
    good.write_text("flit-core>=3.4\n")
    ok = run_envbuild(
        "provision", "--lock", lock, "--root", tmp_path / "data", "--build-constraints", good
    )
    assert ok.rc == 0, ok.output
    assert "trainer" in uv_pip_list(tmp_path / "data" / "venv")
    pinned = _project(
        tmp_path / "q",
        build_index,
        "pdm-backend",
        tool_uv='build-constraint-dependencies = ["pdm-backend<0.1"]',
    )
    no = run_envbuild("provision", "--lock", pinned, "--root", tmp_path / "data2")
    assert no.rc == 5 and "could not get its build requirements" in no.stderr, no.output


@pytest.mark.slow
@pytest.mark.thorough  # a minute on 2 loaded cores: make test-thorough
def test_offline_builds_from_the_mirrored_build_requirements(
    build_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """``wheelhouse mirror --lock`` carries the backends of the root (setuptools), the member
    (hatchling, and the `editables` its editable build asks for) and the sdist, recorded in
    wheelhouse.json; the offline provision builds from them and asks no index. A wheelhouse that
    lacks one is refused before anything is made (exit 5), naming the package and the command."""
    lock = _project(
        tmp_path / "p", build_index, "setuptools", deps=("sdist-only==1.0",), member="hatchling"
    )
    house = tmp_path / "house"
    mirrored = run_envbuild("wheelhouse", "mirror", "--lock", lock, "--out", house)
    assert mirrored.rc == 0, mirrored.output
    doc = json.loads((house / "wheelhouse.json").read_text())
    builds = {b["package"]: b for b in doc["builds"].values()}
    assert set(builds) == {"trainer", "helper", "sdist-only"}
    assert any(f.startswith("editables-") for f in builds["helper"]["files"]), builds["helper"]
    recorded = {a["filename"]: a["sha256"] for a in doc["artifacts"]}
    assert all(f in recorded for b in builds.values() for f in b["files"])
    setuptools = next(f for f in builds["trainer"]["files"] if f.startswith("setuptools-"))
    # planted: the setuptools wheel is gone
    (house / setuptools).rename(tmp_path / setuptools)
    bad = run_envbuild(
        "provision", "--lock", lock, "--root", tmp_path / "bad", "--offline", "--wheelhouse", house
    )
    assert bad.rc == 5, bad.output
    assert f"trainer: {setuptools}" in bad.stderr and "wheelhouse mirror --lock" in bad.stderr
    assert not (tmp_path / "bad").exists() and "Traceback" not in bad.output
    (tmp_path / setuptools).rename(house / setuptools)
    want = uv_sync(lock.parent, tmp_path / "uv-venv", tmp_path / "home")
    build_index.server.clear_requests()
    res = run_envbuild(
        "provision", "--lock", lock, "--root", tmp_path / "data", "--offline", "--wheelhouse", house
    )
    assert res.rc == 0, res.output
    assert build_index.server.requested() == []
    assert uv_pip_list(tmp_path / "data" / "venv") == want


def test_build_sources_are_the_projects_indexes(tmp_path: Path) -> None:
    """The default index, the others in order, flat ones as find-links (a relative path the
    project's), explicit ones left out (they serve only what is pinned to them), and the build
    constraints of the project and of ``--build-constraints``; without any: the user's config."""
    from envbuild.projectlock.buildreqs import build_sources, step_env

    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "1"\n[tool.uv]\n'
        'build-constraint-dependencies = ["setuptools<80"]\n'
        '[[tool.uv.index]]\nname = "cu128"\nurl = "https://example.org/cu128"\nexplicit = true\n'
        '[[tool.uv.index]]\nname = "extra"\nurl = "https://example.org/extra/simple"\n'
        '[[tool.uv.index]]\nname = "local"\nurl = "./wheels"\nformat = "flat"\n'
        '[[tool.uv.index]]\nname = "mirror"\nurl = "https://example.org/simple"\ndefault = true\n'
    )
    more = tmp_path / "more.txt"
    more.write_text("hatchling==1.27.0  # pinned\n\n")
    got = build_sources(tmp_path / "uv.lock", (more,))
    assert got.index_url == "https://example.org/simple"
    assert got.extra_index_urls == ("https://example.org/extra/simple",)
    assert got.find_links == (str(tmp_path / "wheels"),)
    assert got.constraints == ("setuptools<80", "hatchling==1.27.0")
    path = Path(step_env(got)["UV_BUILD_CONSTRAINT"])
    assert path.read_text() == "setuptools<80\nhatchling==1.27.0\n"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n')
    plain = build_sources(tmp_path / "uv.lock")
    assert plain.index_url is None and not plain.constraints
    assert step_env(plain) == {"UV_INDEX_STRATEGY": "first-index"}  # uv sync's
    assert "user's index configuration" in plain.where


def test_one_pyproject_reader_one_error_rule(
    tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """Every reader of the project's pyproject.toml refuses a malformed one (exit 2, naming the
    file), where four readers had three rules (one raised, three read it as empty)."""
    from envbuild.errors import ConfigError
    from envbuild.gate.accept import load_for
    from envbuild.gate.formats.uvlock import _default_groups
    from envbuild.gate.project import read_pyproject
    from envbuild.projectlock.buildreqs import build_sources
    from envbuild.projectlock.stages import build_settings

    lock = tmp_path / "requirements.txt"
    lock.write_text("filelock==3.0.0\n")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\n[tool.uv]\ndefault-groups = ["tools"]\n'
        'no-build-isolation-package = ["Flash_Attn"]\n'
    )
    assert read_pyproject(tmp_path)["project"]["name"] == "p"
    assert _default_groups(lock) == ("tools",)
    assert build_settings(lock).no_isolation == {"flash-attn"}
    assert load_for(lock) == []
    assert read_pyproject(tmp_path / "nowhere") == {}
    (tmp_path / "pyproject.toml").write_text('[project\nname = "p"\n')
    for reader in (
        read_pyproject,
        lambda _: _default_groups(lock),
        lambda _: build_settings(lock),
        lambda _: load_for(lock),
        lambda _: build_sources(lock),
    ):
        with pytest.raises(ConfigError, match="pyproject.toml is not valid TOML"):
            reader(tmp_path)
    res = run_envbuild("check-lock", lock)
    assert res.rc == 2, res.output
    assert "pyproject.toml is not valid TOML" in res.stderr and "Traceback" not in res.output


@pytest.mark.slow
def test_an_image_layer_builds_its_sdist_from_the_projects_index(
    build_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """``docker --lock``: the rest stage's slice carries where its isolated builds get their
    requirements, so the layer's ``provision --lock SLICE`` (run here as the layer runs it) builds
    the sdist-only dependency with its backend from the project's index; the same slice without
    them (the old ``--no-index``) stops the stage (exit 5)."""
    lock = _project(tmp_path / "p", build_index, "setuptools", deps=("sdist-only==1.0",))
    out = tmp_path / "render"
    out.mkdir()
    res = run_envbuild("docker", "--lock", lock, "-o", out / "Dockerfile", "--json", cwd=out)
    assert res.rc == 0, res.output
    dockerfile = (out / "Dockerfile").read_text()
    assert f"build requirements from {build_index.pypi_url}" in dockerfile
    last = sorted((out / "Dockerfile.stages").glob("*.json"))[-1]
    doc = json.loads(last.read_text())
    rest = next(s for s in doc["stages"] if s["name"] == "rest")
    assert any("sdist-only" in line for line in rest["lines"])
    assert rest["build"]["index_url"] == build_index.pypi_url and not rest["build"]["no_index"]
    assert all("build" not in s for s in doc["stages"] if s["name"] == "torch")

    for s in doc["stages"]:
        s.pop("build", None)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc, indent=2) + "\n")
    no = run_envbuild("provision", "--lock", bare, "--root", tmp_path / "bad")
    assert no.rc == 5 and "Traceback" not in no.output, no.output
    assert "could not get its build requirements" in no.stderr, no.output
    # prepared before the venv is touched: the failed build left no venv behind (uv sync's order)
    assert not (tmp_path / "bad" / "venv").exists()

    ok = run_envbuild("provision", "--lock", last, "--root", tmp_path / "data")
    assert ok.rc == 0, ok.output
    assert uv_pip_list(tmp_path / "data" / "venv")["sdist-only"] == "1.0"


@pytest.mark.slow
def test_an_index_nothing_needs_is_a_note(
    build_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """A project that lists, after the index its builds are served from, a non-explicit index whose
    host does not answer (an accelerator index the selection never uses): uv sync installs it, never
    asking that index, and so does provision --lock (a note, not exit 3); the venvs are the same,
    dist-info for dist-info."""
    from support.gatelocks import dist_infos

    lock = _project(tmp_path / "p", build_index, "hatchling", deps=("sdist-only==1.0",))
    pyproject = lock.parent / "pyproject.toml"
    dead = "http://127.0.0.1:9/simple"
    pyproject.write_text(
        pyproject.read_text().replace("default = true\n", "")
        + f'\n[[tool.uv.index]]\nname = "cu-dead"\nurl = "{dead}"\n'
    )
    want = uv_sync(lock.parent, tmp_path / "uv-venv", tmp_path / "home")
    res = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data")
    assert res.rc == 0, res.output
    assert f"note: {dead} does not answer" in res.output, res.output
    assert uv_pip_list(tmp_path / "data" / "venv") == want
    assert dist_infos(tmp_path / "data" / "venv") == dist_infos(tmp_path / "uv-venv")
    # planted: the dead index first, asked before the one that answers: refused before install
    pyproject.write_text(
        pyproject.read_text()
        .replace(f'\n[[tool.uv.index]]\nname = "cu-dead"\nurl = "{dead}"\n', "")
        .replace(
            "[[tool.uv.index]]",
            f'[[tool.uv.index]]\nname = "cu-dead"\nurl = "{dead}"\n\n[[tool.uv.index]]',
            1,
        )
    )
    bad = run_envbuild("provision", "--lock", lock, "--root", tmp_path / "data2")
    assert bad.rc == 3, bad.output
    assert "do not answer" in bad.stderr and dead in bad.stderr and "Traceback" not in bad.output


_TORCHY_SETUP = """\
import pathlib
from setuptools import setup
try:
    import torch
    seen = torch.__version__
except ImportError:
    seen = None
pathlib.Path("torchy_ext", "_built_with.py").write_text(f"TORCH = {seen!r}\\n")
setup()
"""


def _torchy_sdist(tmp: Path) -> Path:
    """A real sdist made by ``build`` (setuptools): ``torchy-ext`` 0.3, whose pyproject.toml names
    torch in ``[build-system] requires`` and whose build records the torch it saw."""
    src = tmp / "torchy-src"
    (src / "torchy_ext").mkdir(parents=True)
    (src / "torchy_ext" / "__init__.py").write_text("")
    (src / "setup.py").write_text(_TORCHY_SETUP)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61", "torch"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "torchy-ext"\nversion = "0.3"\nrequires-python = ">=3.10"\n\n'
        '[tool.setuptools]\npackages = ["torchy_ext"]\n'
    )
    out = tmp / "torchy"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "--no-isolation",
            "--skip-dependency-check",
            "--outdir",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
        env=installer_env(tmp / "home"),
    )
    return next(out.glob("torchy[-_]ext-0.3.tar.gz"))


@pytest.mark.slow
def test_an_sdist_whose_build_requires_torch_builds_against_the_installed_torch(
    build_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """An sdist from an index whose own pyproject.toml names torch in ``[build-system] requires``
    (uv sync builds it isolated, with a torch of its own from the index): read from the sdist, it
    goes to the builds stage, the plan saying why, and is built against the torch of stage 1, its
    other build requirement (setuptools) installed beside the venv for the build."""
    from envbuild.projectlock.torchbuilds import WHY

    sdist = _torchy_sdist(tmp_path)
    build_index.server.add_repo("torchy", sdist.parent)
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        '[project]\nname = "trainer"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["torch==2.10.0", "filelock-like==3.0", "torchy-ext==0.3"]\n\n'
        "[tool.uv]\npackage = false\n\n"
        '[tool.uv.sources]\ntorchy-ext = { index = "torchy" }\n\n'
        f'[[tool.uv.index]]\nname = "torchy"\nurl = "{build_index.url("torchy")}"\n'
        "explicit = true\n\n"
        f'[[tool.uv.index]]\nname = "pypi"\nurl = "{build_index.pypi_url}"\ndefault = true\n'
    )
    _run([uv_bin(), "lock", "--no-cache"], folder, tmp_path, project_config=True)
    lock = folder / "uv.lock"
    build_index.server.clear_requests()
    plan = run_envbuild("plan", "--lock", lock, "--json")
    assert plan.rc == 0, plan.output
    # the sdist is fetched once for its build requirements
    assert len(build_index.server.requested(f"*/{sdist.name}")) == 1, build_index.server.requests
    stages = {
        s["name"]: {p["name"]: p for p in s["packages"]} for s in json.loads(plan.stdout)["stages"]
    }
    assert stages["builds"]["torchy-ext"]["why"] == WHY
    assert stages["builds"]["torchy-ext"]["build"] == "against torch"
    # setuptools for the build comes from pip's sources, as a wheelhouse build's requirements do
    res = run_envbuild(
        "provision",
        "--lock",
        lock,
        "--root",
        tmp_path / "data",
        env={"PIP_INDEX_URL": build_index.pypi_url},
    )
    assert res.rc == 0, res.output
    venv = tmp_path / "data" / "venv" / "bin" / "python"
    seen = subprocess.run(
        [
            str(venv),
            "-c",
            "import torch, torchy_ext._built_with as b; print(b.TORCH, torch.__version__)",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert seen[0] == seen[1] != "None", seen


def test_an_sdists_build_requirements_are_read_from_the_sdist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index.sdistreqs``: ``[build-system] requires`` of the sdist's own pyproject.toml (tar.gz
    and zip), PEP 517's default without one, cached by sha256 once read; a damaged file or one whose
    bytes are not the lock's is an error, not a guess."""
    import hashlib
    import io
    import tarfile
    import zipfile

    from envbuild.index.net import SourceError
    from envbuild.index.sdistreqs import DEFAULT_REQUIRES, build_requires, cached_build_requires

    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    pyproject = b'[build-system]\nrequires = ["scikit-build-core>=0.9", "torch>=2.4"]\n'

    def tar(name: str, files: dict[str, bytes]) -> Path:
        out = tmp_path / name
        with tarfile.open(out, "w:gz") as tf:
            for rel, data in files.items():
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        return out

    def sha(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    modern = tar("m-1.0.tar.gz", {"m-1.0/PKG-INFO": b"", "m-1.0/pyproject.toml": pyproject})
    want = ("scikit-build-core>=0.9", "torch>=2.4")
    assert build_requires(modern.as_uri(), sha(modern), modern.name) == want
    assert cached_build_requires(sha(modern)) == want
    legacy = tar("l-1.0.tar.gz", {"l-1.0/setup.py": b"", "l-1.0/sub/pyproject.toml": pyproject})
    assert build_requires(str(legacy), None, legacy.name) == DEFAULT_REQUIRES
    with zipfile.ZipFile(tmp_path / "z-1.0.zip", "w") as zf:
        zf.writestr("z-1.0/pyproject.toml", pyproject)
    assert build_requires(str(tmp_path / "z-1.0.zip"), None, "z-1.0.zip") == want
    broken = tmp_path / "b-1.0.tar.gz"
    broken.write_bytes(b"not a tar")
    with pytest.raises(ValueError, match="not a readable sdist"):
        build_requires(str(broken), None, broken.name)
    with pytest.raises(SourceError, match="sha256"):
        build_requires(legacy.as_uri(), "0" * 64, legacy.name)
