"""The in-image install of envbuild: one snippet (``envbuild.images.tool``) in every image.

The stack Dockerfile (``envbuild docker``), the lock Dockerfile (``envbuild docker --lock``,
checked in tests/test_fromlock_docker.py) and the Modal file (``envbuild modal``) are rendered
and read back with the real parser (dockerfile-parse; the Modal file's constants with ``ast``);
each install must be the snippet, and a drifted copy is shown to fail the same check.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from support.dockerfiles import instructions, is_the_one_snippet, tool_installs

from envbuild.images.docker import DockerOptions, render
from envbuild.images.modal import ModalOptions, render_modal
from envbuild.images.tool import tool_dockerfile, tool_shell
from envbuild.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "lockfiles" / "cpu" / "stack.toml"


def test_the_stack_dockerfile_installs_envbuild_with_the_snippet() -> None:
    text = render(
        load_spec(SPEC, os.environ), DockerOptions(lock=False, steps_dir="steps")
    ).dockerfile
    [command] = tool_installs(text)
    assert is_the_one_snippet(command), command
    copies = [v for k, v in instructions(text) if k == "COPY" and "/src/envbuild" in v]
    assert copies == ["pyproject.toml /src/envbuild/", "envbuild/ /src/envbuild/envbuild/"]


def test_the_modal_file_installs_envbuild_with_the_snippet() -> None:
    rendered = render_modal(
        load_spec(SPEC, os.environ),
        ModalOptions(
            docker=DockerOptions(lock=False, steps_dir="steps"),
            context=".",
            dockerfile="x.Dockerfile",
        ),
    )
    tree = ast.parse(rendered.source)
    values = {
        t.id: node.value
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }
    node = values["TOOL_INSTALL"]
    assert node is not None
    command = ast.literal_eval(node)
    assert isinstance(command, str) and is_the_one_snippet(command), command


def test_the_snippet_reads_back_and_a_drifted_copy_fails() -> None:
    text = "FROM ubuntu:24.04\n" + "\n".join(tool_dockerfile("tools/", "python3.12")) + "\n"
    [command] = tool_installs(text)
    assert command == tool_shell("python3.12")
    assert is_the_one_snippet(command)
    # the drift the three copies had: ln -s of envbuild only, or no uv on PATH
    for old, new in (
        (" -sf ", " -s "),
        (" /opt/envbuild-tool/bin/uv", ""),
        ("envbuild --version", "true"),
    ):
        drifted = text.replace(old, new, 1)
        assert drifted != text
        assert not is_the_one_snippet(tool_installs(drifted)[0]), old
