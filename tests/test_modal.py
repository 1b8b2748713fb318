"""``envbuild modal``: the generated file is imported and its ``modal.Image`` built offline with the
real ``modal`` client (no account, no network), then read layer by layer.

What this cannot test here: a build on Modal (no account). The Image objects are lazy; building one
needs Modal's servers. So the test proves the definition (layers, order, files, env, Dockerfile
path and context), not that Modal's builder accepts it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envbuild.cli import main

modal = pytest.importorskip(
    "modal", reason="the modal client is a test extra (pip install -e '.[test]')"
)
from modal._utils.async_utils import synchronizer  # noqa: E402  (after the importorskip)

BUILDER = "2025.06"  # an image builder version modal 1.x knows; the layers do not depend on it here


def _cells(fn: Any) -> dict[str, Any]:
    return {
        n: c.cell_contents
        for n, c in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True)
    }


def layers(image: Any) -> list[dict[str, Any]]:
    """The layers of a (lazy) ``modal.Image``, base first: each one's Dockerfile commands and the
    files its context mount holds. Reads the client's own layer functions (``_Image._from_args``
    keeps them in its loader's closure): the same ones Modal's builder is sent."""
    out: list[dict[str, Any]] = []
    obj = synchronizer._translate_in(image)
    while obj is not None:
        cells = _cells(obj._load)
        # from_registry(add_python=): the layer this builder version uses
        if "single_layer_image" in cells:
            obj = synchronizer._translate_in(cells["single_layer_image"])
            continue
        spec = cells["dockerfile_function"](BUILDER)
        mount_fn = cells["context_mount_function"]
        mount = mount_fn(BUILDER) if mount_fn else None
        files = [
            (str(local), str(remote))
            for e in (mount._entries if mount else ()) or ()
            for local, remote in e.get_files_to_upload()
        ]
        out.append({"commands": list(spec.commands), "files": files})
        bases = list((cells["base_images"] or {}).values())
        obj = bases[0] if bases else None
    return out[::-1]


def import_file(path: Path) -> ModuleType:
    name = f"_envbuild_modal_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def plan_steps(capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["plan", "--profile", "cpu", "--json"]) == 0
    return [s["name"] for s in json.loads(capsys.readouterr().out)["steps"]]


def test_steps_mode_layers_follow_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cpu_image.py"
    assert main(["modal", "--profile", "cpu", "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    steps = plan_steps(capsys)
    assert doc["steps"] == steps and doc["mode"] == "steps" and doc["context"] == str(tmp_path)

    image = import_file(out).image()
    assert isinstance(image, modal.Image)
    lay = layers(image)
    commands = [c for layer in lay for c in layer["commands"] if c != "FROM base"]
    # debian_slim(python_version=the stack's)
    assert lay[0]["commands"][0].startswith("FROM python:3.11")
    provisions = [c for c in commands if " provision " in c]
    assert provisions == [
        "RUN envbuild provision --stack /etc/envbuild/stack.toml --root /opt/envbuild "
        f"--home /root --step {name}"
        for name in steps
    ]
    # envbuild is installed before the first step, verify and smoke run after the last
    tool = next(
        i for i, c in enumerate(commands) if "/opt/envbuild-tool/bin/python -m pip install" in c
    )
    first, last = commands.index(provisions[0]), commands.index(provisions[-1])
    assert tool < first and commands[last + 1].startswith(
        "RUN envbuild verify --stack /etc/envbuild/stack.toml"
    )
    assert commands[last + 2].startswith("RUN envbuild smoke ")

    # the env overlay, before the first step; torch pinned right after the torch step
    env = [c for c in commands[:first] if c.startswith("ENV ")]
    assert "ENV VIRTUAL_ENV=/opt/envbuild/venv" in env and "ENV TORCH_NCCL_HIGH_PRIORITY=1" in env
    path = next(c for c in env if c.startswith("ENV PATH="))
    assert path.startswith("ENV PATH=/opt/envbuild/venv/bin:") and "$PATH" not in path
    torch_at = commands.index(provisions[steps.index("torch")])
    assert commands[torch_at + 1] == "ENV PIP_CONSTRAINT=/opt/envbuild/.envbuild/constraints.txt"

    # before each step, the spec cut after it (and its lock prefix) is copied in: real files
    copies: list[tuple[str, str]] = []
    for layer in lay:
        copies += layer["files"]
        if any(" provision " in c for c in layer["commands"]):
            name = layer["commands"][-1].rsplit(" ", 1)[-1]
            spec_copy = [local for local, remote in copies if remote == "/etc/envbuild/stack.toml"][
                -1
            ]
            lock_copy = [local for local, remote in copies if remote == "/etc/envbuild/lock.json"][
                -1
            ]
            number = steps.index(name) + 1
            assert spec_copy == str(tmp_path / "cpu_image.steps" / f"{number:02d}-{name}.toml")
            assert lock_copy == str(tmp_path / "cpu_image.steps" / f"{number:02d}-{name}.lock.json")
            assert Path(spec_copy).is_file() and Path(lock_copy).is_file()
    pinned = {remote for _, remote in copies if remote.endswith(".txt")}
    assert pinned == {f"/etc/envbuild/{n:02d}-{s}.txt" for n, s in enumerate(steps, 1)}
    # envbuild's own source, copied beside the file (the output is outside the checkout)
    assert (
        str(tmp_path / "envbuild-src" / "pyproject.toml"),
        "/src/envbuild/pyproject.toml",
    ) in copies
    assert any(remote == "/src/envbuild/envbuild/cli.py" for _, remote in copies)


def test_dockerfile_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu_df.py"
    assert main(["modal", "--profile", "cpu", "--mode", "dockerfile", "-o", str(out)]) == 0
    capsys.readouterr()
    steps = plan_steps(capsys)
    dockerfile = tmp_path / "cpu_df.Dockerfile"
    text = dockerfile.read_text()
    assert [
        line.rsplit(" ", 1)[-1] for line in text.splitlines() if "envbuild provision" in line
    ] == steps
    assert "ENV VIRTUAL_ENV=/opt/envbuild/venv" in text

    image = import_file(out).image()
    assert isinstance(image, modal.Image)
    cells = _cells(synchronizer._translate_in(image)._load)
    assert Path(cells["path"]) == dockerfile
    # the Dockerfile's own layer, as from_dockerfile makes it
    layer = _cells(cells["dockerfile_image"])
    context_fn = layer["context_mount_function"]
    assert Path(_cells(context_fn)["context_dir"]) == tmp_path
    assert set(layer["build_args"]) <= {"ENVBUILD_TORCH_INDEX"}  # the spec's ${VAR}s, when set
    # the context mount Modal would upload: every COPY source of the Dockerfile, inside the context
    mount = context_fn(BUILDER)
    uploaded = {
        Path(local).relative_to(tmp_path).as_posix()
        for entry in mount._entries
        for local, _ in entry.get_files_to_upload()
    }
    for n, name in enumerate(steps, 1):
        assert f"cpu_df.steps/{n:02d}-{name}.toml" in uploaded
    assert "envbuild-src/pyproject.toml" in uploaded and "envbuild-src/envbuild/cli.py" in uploaded


def test_output_inside_the_checkout_uses_it_as_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rendered from a checkout, the default file goes under modal_images/ and reads envbuild's
    source from the checkout itself (no copy)."""
    repo = Path(__file__).resolve().parents[1]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text((repo / "pyproject.toml").read_text())
    (checkout / "envbuild").symlink_to(repo / "envbuild")
    monkeypatch.chdir(checkout)
    assert main(["modal", "--profile", "cpu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["file"] == str(checkout / "modal_images" / "cpu.py")
        and doc["module"] == "modal_images.cpu"
    )
    module = import_file(checkout / "modal_images" / "cpu.py")
    assert checkout == module.CONTEXT and module.TOOL_SRC == ""
    assert not (checkout / "modal_images" / "envbuild-src").exists()
    assert isinstance(module.image(), modal.Image)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--profile", "no-such-profile"], "no-such-profile"),
        (["-o", "{tmp}/missing/dir/image.py"], "does not exist"),
        (["-o", "{tmp}/image.txt"], "must be a .py file"),
        (["-o", "{tmp}/modal.py"], "would hide the modal package"),
        (["-o", "{tmp}/2fast.py"], "must be a .py file"),
        (["-o", "{tmp}"], "is a folder"),
    ],
)
def test_bad_input_is_one_paragraph_exit_2(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["modal", *[a.replace("{tmp}", str(tmp_path)) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "missing").exists()


def test_existing_file_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "img.py"
    out.write_text("# mine\n")
    assert main(["modal", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and "Traceback" not in err
    assert out.read_text() == "# mine\n"  # nothing lost
    assert main(["modal", "-o", str(out), "--force"]) == 0
    assert "def image(" in out.read_text()


def test_dockerfile_mode_refuses_a_wheelhouse_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A find-links step needs the wheelhouse build context, which from_dockerfile cannot give."""
    repo = Path(__file__).resolve().parents[1]
    stack = tmp_path / "stack.toml"
    text = (repo / "lockfiles" / "cpu" / "stack.toml").read_text()
    stack.write_text(
        text + '\n[[step]]\nname = "prebuilt"\npackages = ["causal-conv1d"]\n'
        'find_links = ["${ENVBUILD_WHEELHOUSE:-/mnt/data/wheelhouse}"]\nno_deps = true\n'
    )
    out = tmp_path / "w.py"
    code = main(
        ["modal", "--stack", str(stack), "--no-lock", "--mode", "dockerfile", "-o", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--mode steps" in err and "Traceback" not in err and not out.exists()
    # steps mode copies the wheelhouse in before that step
    assert main(["modal", "--stack", str(stack), "--no-lock", "-o", str(out)]) == 0
    module = import_file(out)
    with pytest.raises(ValueError, match="wheelhouse"):
        module.image()
    house = tmp_path / "wheelhouse"
    house.mkdir()
    lay = layers(module.image(wheelhouse=house))
    commands = [c for layer in lay for c in layer["commands"]]
    assert (
        "RUN ENVBUILD_WHEELHOUSE=/wheelhouse envbuild provision --stack /etc/envbuild/stack.toml "
        "--root /opt/envbuild --home /root --step prebuilt" in commands
    )


def test_cuda_stack_from_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The seed stack: its nvidia/cuda devel base with Modal's standalone Python, the CUDA tools on
    PATH, the prebuilt-wheel steps after the wheelhouse is copied in."""
    out = tmp_path / "h200.py"
    assert main(["modal", "--profile", "h200-cu132", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["plan", "--profile", "h200-cu132", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["steps"]
    house = tmp_path / "wheelhouse"
    house.mkdir()
    (house / "marker.whl").write_text("x")
    lay = layers(import_file(out).image(wheelhouse=house))
    commands = [c for layer in lay for c in layer["commands"] if c != "FROM base"]
    assert commands[0] == "FROM nvidia/cuda:13.2.0-cudnn-devel-ubuntu22.04"
    assert "COPY /python/. /usr/local" in commands  # add_python="3.13" (the stack's)
    path = next(c for c in commands if c.startswith("ENV PATH="))
    assert "/usr/local/cuda/bin" in path
    provisions = [
        c.removeprefix("RUN ").removeprefix("ENVBUILD_WHEELHOUSE=/wheelhouse ")
        for c in commands
        if " provision " in c
    ]
    assert [p.rsplit(" ", 1)[-1] for p in provisions] == [s["name"] for s in plan]
    copies = [f for layer in lay for f in layer["files"]]
    assert (str(house / "marker.whl"), "/wheelhouse/marker.whl") in copies
