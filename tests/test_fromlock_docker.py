"""``envbuild docker --lock FILE``: one layer per stage, read back with dockerfile-parse and
hadolint.

The lock is a real ``uv lock`` (torch, a prebuilt flash-attn, trainer-utils and an application
package ``app-utils``); relocking with another ``app-utils`` (a change in stage ``rest``) must
leave the Dockerfile's text up to the rest layer, and the slices of the torch and extension
layers, byte-identical, so their layers stay cached. Each slice provisions on the host as the
layer would (the second layer finds the first one's stage done).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support.dockerfiles import is_the_one_snippet, tool_installs
from support.fixtures import EnvbuildResult
from support.gatelocks import GateIndex, _uv_lock, uv_platform_lock
from support.wheels import build_wheel
from test_fromlock import HEALTHY

dockerfile_parse = pytest.importorskip(
    "dockerfile_parse", reason="dockerfile-parse is a test extra"
)


def _app_lock(tmp: Path, idx: GateIndex) -> Path:
    """The lock with ``app-utils==1.0``; its pyproject's pin is what the test edits and relocks."""
    folder = tmp / "app-wheels"
    for version in ("1.0", "1.1"):
        build_wheel(
            folder,
            "app-utils",
            version,
            files={"app_utils/__init__.py": f"VERSION = {version!r}\n"},
        )
    repo = f"app-{tmp.name}".replace("_", "-")
    idx.server.add_repo(repo, folder)
    extra = (
        f'[[tool.uv.index]]\nname = "app"\nurl = "{idx.url(repo)}"\nexplicit = true\n\n'
        '[tool.uv.sources.app-utils]\nindex = "app"\n'
    )
    return uv_platform_lock(tmp, idx, extension=HEALTHY, deps=["app-utils==1.0"], extra_toml=extra)


def _render(
    run_envbuild: Callable[..., EnvbuildResult], lock: Path, out: Path
) -> tuple[str, dict[str, str]]:
    res = run_envbuild("docker", "--lock", lock, "-o", out / "Dockerfile", "--json", cwd=out)
    assert res.rc == 0, res.output
    doc = json.loads(res.stdout)
    files = {Path(f).name: (out / f).read_text() for f in doc["files"]}
    return (out / "Dockerfile").read_text(), files


def _layers(text: str) -> list[tuple[str, str]]:
    """The instructions, as dockerfile-parse reads them (comments are no part of a layer's cache
    key)."""
    parser = dockerfile_parse.DockerfileParser(fileobj=io.BytesIO())
    parser.content = text
    return [
        (i["instruction"], i["value"]) for i in parser.structure if i["instruction"] != "COMMENT"
    ]


def test_docker_lock_renders_one_layer_per_stage_and_a_rest_change_keeps_the_earlier_layers(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    lock = _app_lock(tmp_path, gate_index)
    text1, files1 = _render(run_envbuild, lock, first)
    project = lock.parent / "pyproject.toml"
    project.write_text(project.read_text().replace("app-utils==1.0", "app-utils==1.1"))
    _uv_lock(lock.parent, tmp_path)  # the application dependency moves; nothing else does
    text2, files2 = _render(run_envbuild, lock, second)
    assert sorted(files1) == ["01-torch.json", "02-extensions.json", "03-rest.json"]

    [install] = tool_installs(text1)  # envbuild installed by images.tool's one snippet
    assert is_the_one_snippet(install), install
    layers = _layers(text1)
    copies = [v for k, v in layers if k == "COPY" and "/etc/envbuild/lock-stages.json" in v]
    assert [c.split()[0].rsplit("/", 1)[1] for c in copies] == sorted(files1)
    runs = [
        v
        for k, v in layers
        if k == "RUN" and "provision --lock /etc/envbuild/lock-stages.json" in v
    ]
    assert (
        len(runs) == 3
        and layers[-3][0] == "RUN"
        and "envbuild smoke --root /opt/envbuild" in layers[-3][1]
    )
    assert (
        dict(layers)["FROM"] == "${BASE_IMAGE}"
        and "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04" in text1
    )
    torch_slice = json.loads(files1["01-torch.json"])
    assert [s["name"] for s in torch_slice["stages"]] == ["torch"]
    assert any(
        line.startswith("torch @ http") and "--hash=sha256:" in line
        for line in torch_slice["stages"][0]["lines"]
    )
    assert [s["name"] for s in json.loads(files1["03-rest.json"])["stages"]] == [
        "torch",
        "extensions",
        "rest",
    ]

    # app-utils 1.0 -> 1.1 (stage rest): the torch and extension slices and the text up to the rest
    # layer are equal
    assert files1["01-torch.json"] == files2["01-torch.json"]
    assert files1["02-extensions.json"] == files2["02-extensions.json"]
    assert (
        files1["03-rest.json"] != files2["03-rest.json"]
        and "app-utils==1.1" in files2["03-rest.json"]
    )
    # the same instructions: only the rest layer's input (its slice) changed
    assert _layers(text2) == layers

    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if Path(hadolint).exists():
        out = subprocess.run(
            [hadolint, "--no-color", "-"], input=text1, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_the_slices_provision_layer_by_layer(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """What each layer's RUN does, on the host: slice 1 installs torch and its runtime, slice 2
    (torch verified, not installed again) the extension, slice 3 the rest: after each, the venv
    holds exactly what the slices so far name (its stage's packages)."""
    out = tmp_path / "render"
    out.mkdir()
    lock = uv_platform_lock(tmp_path, gate_index, extension=HEALTHY)
    _render(run_envbuild, lock, out)
    slices = sorted((out / "Dockerfile.stages").glob("*.json"))
    assert [s.name for s in slices] == ["01-torch.json", "02-extensions.json", "03-rest.json"]
    # each slice's own stage (the last of its stages): the names its lines install
    stages = [json.loads(s.read_text())["stages"][-1] for s in slices]
    assert [s["name"] for s in stages] == ["torch", "extensions", "rest"]
    named = [{_name(line) for line in s["lines"]} for s in stages]
    assert "torch" in named[0] and "flash-attn" in named[1] and "trainer-utils" in named[2]
    root = tmp_path / "data"
    ran, added, before = [], [], set[str]()
    for s in slices:
        res = run_envbuild("provision", "--lock", s, "--root", root, "--python", sys.executable)
        assert res.rc == 0, res.output
        ran.append(res.output.count("==> step "))
        now = _installed(root / "venv")
        added.append(now - before)
        before = now
    assert ran == [1, 1, 1]  # each layer installs its own stage only
    assert added == named, (added, named)
    res = run_envbuild(
        "provision", "--lock", slices[-1], "--root", root, "--python", sys.executable
    )
    assert res.rc == 0 and "0 stages run, 3 already done" in res.output, res.output
    assert _installed(root / "venv") == before  # the re-run installs nothing


def _name(line: str) -> str:
    """The canonical name of a slice's requirement line (``name @ url --hash=...``)."""
    return canonicalize_name(Requirement(line.split(" --hash=")[0]).name)


def _installed(venv: Path) -> set[str]:
    """The canonical names of the distributions in ``venv``'s site-packages."""
    (site,) = venv.glob("lib/python3*/site-packages")
    return {canonicalize_name(d.metadata["Name"]) for d in distributions(path=[str(site)])}
