"""What a rendered Dockerfile says, read back with dockerfile-parse (the real parser)."""

from __future__ import annotations

import io
import re

import dockerfile_parse

from envbuild.images.tool import TOOL_VENV, tool_shell

_MOUNTS = re.compile(r"^(--mount=\S+\s+)+")


def instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, value) of each instruction, comments left out; a RUN's continuation lines
    joined as the parser joins them."""
    parser = dockerfile_parse.DockerfileParser(fileobj=io.BytesIO())  # type: ignore[arg-type]  # the stub says IO[str]; it reads bytes
    parser.content = text
    return [
        (i["instruction"], i["value"]) for i in parser.structure if i["instruction"] != "COMMENT"
    ]


def tool_installs(text: str) -> list[str]:
    """The commands of the RUN instructions that install envbuild (``-m venv TOOL_VENV``), without
    their ``--mount`` options, spaces as a shell reads them."""
    runs = [v for k, v in instructions(text) if k == "RUN" and f" -m venv {TOOL_VENV}" in v]
    return [" ".join(_MOUNTS.sub("", v).split()) for v in runs]


def is_the_one_snippet(command: str) -> bool:
    """Whether ``command`` is ``images.tool``'s install, with whatever interpreter it names."""
    m = re.search(rf"&& (\S+) -m venv {re.escape(TOOL_VENV)} &&", command)
    return m is not None and command == " ".join(tool_shell(m.group(1)).split())
