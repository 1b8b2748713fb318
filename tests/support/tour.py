"""The README's tour as a program: every command it shows is run as written, and what it printed is
what the README shows.

A tour block is a fenced code block whose first line starts with ``$ ``: each ``$ `` line is one
command, the lines under it its output. ``export NAME=VALUE`` lines set the environment of the
commands after them, as a shell would. Commands run one by one with ``bash -c`` from the checkout's
root (the README is read in a checkout, after ``make demo`` made ``.venv``), with ``.venv/bin`` on
PATH as ``. .venv/bin/activate`` puts it, and HOME in a scratch folder.

A page that has the reader write a file shows it as a fenced block with a title (``````toml
title="trainer/stack.toml"``, which the docs site shows as the file's name): the file is written
when the run reaches the block, and such a page's commands run in a fresh folder of the scratch
(where the reader made theirs), not in the checkout. A title with a space in it names where a
block's commands run instead (``````sh title="on a GPU host"``): those are not run, and every
shell block of a walked page is one or the other (``not_run``). ``. DIR/bin/activate`` (or
``source``) is sourced as a shell would, and the commands after it run in what it set.

The ``/tmp/NAME`` folders a page names are the reader's: every run (the tests and ``make
docs-snippets`` alike) works in private folders beside them with names of the same length
(``private_roots``), so column widths read back as the page's and no run touches another's.
What only the machine that ran it prints (a ``notice:`` about a source that does not answer
there, pip's word on its own configuration, a nested make's directory lines) is neither compared
nor written into a page.

- ``python -m support.tour --write README.md``: run the tour and write each block's output back
  (``make docs-snippets``); only the checkout's path is replaced (by ``.``), and what only this
  machine prints is left out.
- ``check(path)`` (tests/test_tour.py): run it and compare with the file, both sides normalised
  (numbers, durations, dates, hashes, interpreter paths, the host's name in receipts): a command
  that fails or output edited by hand fails the test, a second that moved does not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```[a-z]*\n(?P<body>\$ .*?)^```\n", re.S | re.M)
_FILE = re.compile(r'^```[a-z]*\s+title="(?P<path>[^" ]+)"\n(?P<body>.*?)^```\n', re.S | re.M)
_SHELL = re.compile(
    r'^```(?:sh|bash|shell|console)(?:\s+title="(?P<title>[^"]*)")?\n(?P<body>.*?)^```\n',
    re.S | re.M,
)
_SOURCE = re.compile(r"^(?:\.|source)\s+(?P<file>\S+/bin/activate)\s*$")
_ROOT = re.compile(r"(?<![\w./-])/tmp/[A-Za-z][A-Za-z0-9_-]*")
_EXPORT = re.compile(r"^export\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)  # the output the file shows
    got: list[str] = field(default_factory=list)  # the output of this run
    rc: int = 0


@dataclass
class Block:
    start: int  # offsets of the block's body in the file
    end: int
    steps: list[Step]
    file: str = ""  # a file block's path: its body is written there, nothing is run
    body: str = ""


def blocks(text: str) -> list[Block]:
    out = []
    for m in _FENCE.finditer(text):
        steps: list[Step] = []
        for line in m.group("body").splitlines():
            if line.startswith("$ "):
                steps.append(Step(line[2:]))
            elif steps:
                steps[-1].shown.append(line)
        out.append(Block(m.start("body"), m.end("body"), steps))
    for m in _FILE.finditer(text):
        out.append(
            Block(m.start("body"), m.end("body"), [], file=m.group("path"), body=m.group("body"))
        )
    return sorted(out, key=lambda b: b.start)


def commands(text: str) -> list[str]:
    """Every ``$ `` command of the page, in order."""
    return [st.command for b in blocks(text) for st in b.steps]


def roots(text: str) -> list[Path]:
    """The ``/tmp/NAME`` folders a page's commands name (the reader's: runs use private ones)."""
    found = [m.group(0) for c in commands(text) for m in _ROOT.finditer(c)]
    return [Path(r) for r in dict.fromkeys(found)]


def not_run(text: str) -> list[str]:
    """The titles of the page's shell blocks that are not run (they say where they run)."""
    return [m.group("title") for m in _SHELL.finditer(text) if m.group("title")]


def unmarked(text: str) -> list[str]:
    """Shell blocks that are neither run (``$ `` commands) nor say where they run (a title): a
    page's commands are one or the other. Each is named by its first line."""
    return [
        m.group("body").splitlines()[0] if m.group("body").strip() else "(empty)"
        for m in _SHELL.finditer(text)
        if not m.group("title") and not m.group("body").startswith("$ ")
    ]


def environment(scratch: Path, venv: Path | None = None) -> dict[str, str]:
    """What a reader's shell has after ``. .venv/bin/activate`` (or another ``venv`` with
    envbuild), HOME in ``scratch``."""
    # PIP_*/UV_* go as the tests' own set-up drops them, so that make docs-snippets and make test
    # run alike; the reader's pip.conf comes along below
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENVBUILD_", "PYTEST_", "PIP_", "UV_"))
    }
    venv = venv or REPO / ".venv"
    env.update(
        {
            "VIRTUAL_ENV": str(venv),
            "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "HOME": str(scratch / "home"),
            "NO_COLOR": "1",
            "COLUMNS": "100",
            "TERM": "dumb",
        }
    )
    (scratch / "home").mkdir(parents=True, exist_ok=True)
    # the reader's own pip configuration comes along (the sources it names are the reader's
    # sources: a mirror, a find-links folder); the rest of their HOME stays out
    for conf in (".config/pip/pip.conf", ".pip/pip.conf"):
        mine = Path.home() / conf
        if mine.is_file():
            (scratch / "home" / conf).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(mine, scratch / "home" / conf)
    return env


@contextlib.contextmanager
def private_roots(roots: Sequence[Path]) -> Iterator[dict[str, str]]:
    """For each folder a page's commands name (``/tmp/tour``), a new empty folder beside it with a
    name of the same length (``/tmp/qzkf``): the commands run there and the output reads back as
    the page's, column widths included. A tour never touches a folder a user (or another run) has
    at the page's path; the private folders are removed afterwards."""
    import random
    import string

    made: dict[str, str] = {}
    try:
        for root in roots:
            for _ in range(1000):
                mine = root.parent / "".join(
                    random.choices(string.ascii_lowercase, k=len(root.name))
                )
                try:
                    mine.mkdir()
                except FileExistsError:
                    continue
                made[str(root)] = str(mine)
                break
        yield made
    finally:
        for folder in made.values():
            shutil.rmtree(folder, ignore_errors=True)


def run(
    text: str,
    scratch: Path,
    timeout: float = 900,
    overrides: dict[str, dict[str, str]] | None = None,
    paths: Mapping[str, str] | None = None,
    venv: Path | None = None,
) -> list[Block]:
    """Every command of every tour block, in order, in one environment; ``overrides`` adds variables
    to the commands that match a pattern (what a page says to set on a machine like this one);
    ``paths`` ({page's folder: private folder}, ``private_roots``) runs the commands in private
    folders and reads their output back with the page's."""
    paths = dict(paths or {})
    env = environment(scratch, venv)
    found = blocks(text)
    cwd = REPO
    if any(b.file for b in found):
        cwd = scratch / "work"
        shutil.rmtree(cwd, ignore_errors=True)
        cwd.mkdir(parents=True)
    for block in found:
        if block.file:
            (cwd / block.file).parent.mkdir(parents=True, exist_ok=True)
            (cwd / block.file).write_text(block.body)
        for step in block.steps:
            command = step.command
            for page, mine in paths.items():
                command = command.replace(page, mine)
            m = _EXPORT.match(command)
            if m:
                env[m.group("name")] = shlex.split(m.group("value"))[0] if m.group("value") else ""
                continue
            if _SOURCE.match(command):  # the shell's environment after sourcing it
                env = _sourced(command, cwd, env)
                continue
            extra = {
                k: v
                for pattern, more in (overrides or {}).items()
                if re.search(pattern, step.command)
                for k, v in more.items()
            }
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=cwd,
                env=env | extra,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            step.rc = proc.returncode
            output = proc.stdout + proc.stderr
            for page, mine in paths.items():
                output = output.replace(mine, page)
            step.got = _shown(output)
    return found


def _sourced(command: str, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    proc = subprocess.run(
        ["bash", "-c", f"{command} && env -0"], cwd=cwd, env=env, capture_output=True, timeout=60
    )
    if proc.returncode != 0:
        raise RuntimeError(f"$ {command}: exit {proc.returncode}\n{proc.stderr.decode()}")
    pairs = (item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in pairs if k not in ("_", "SHLVL", "PWD", "OLDPWD")}


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def overrides(path: Path) -> dict[str, dict[str, str]]:
    """What a page tells a reader on a machine like this one to set, by command. your-stack.md:
    where the PyTorch CPU index does not answer, ``ENVBUILD_TORCH_INDEX=`` (empty) for ``envbuild
    lock``, which resolves torch by name from pip's configured sources (the mirror), as its error
    says; the other commands need nothing, since a locked file comes by sha256 from whichever
    configured source serves it."""
    if path.name != "your-stack.md" or _answers(TORCH_CPU_INDEX + "/torch/"):
        return {}
    return {r"^envbuild lock\b": {"ENVBUILD_TORCH_INDEX": ""}}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except (OSError, ValueError):
        return False


def _shown(output: str) -> list[str]:
    return [line.rstrip().replace(str(REPO), ".") for line in output.rstrip("\n").splitlines()]


_RULES = [
    # a receipt names its host
    (re.compile(r"(\d{8}T\d{6}Z)-[A-Za-z0-9._-]+?\.json"), r"\1-<host>.json"),
    # receipt diff: the receipt's host
    (re.compile(r"\.json \([A-Za-z0-9._-]+\):"), ".json (<host>):"),
    (re.compile(r"\d{8}T\d{6}Z"), "<stamp>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}Z?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{12,64}\b"), "<hash>"),
    (re.compile(r"/\S*/python3(\.\d+)?\b"), "<python>"),
    (re.compile(r"\d+(\.\d+)?"), "0"),
    (re.compile(r"[ ─━│┃]+"), " "),
]


def normal(line: str) -> str:
    for pattern, repl in _RULES:
        line = pattern.sub(repl, line)
    return line.strip()


def differences(found: list[Block]) -> list[str]:
    """What a run disagrees with the file on: failures, and output that is not what it shows."""
    out = []
    for block in found:
        for step in block.steps:
            if _EXPORT.match(step.command):
                continue
            elided = any(x.strip() == "..." for x in step.shown)
            shown = [normal(x) for x in step.shown if _compared(x)]
            got = [normal(x) for x in step.got if _compared(x)]
            if _expected_rc(step) != step.rc:
                out.append(f"$ {step.command}: exit {step.rc}\n" + "\n".join(step.got[-30:]))
            elif not (_matches(shown, got) if elided else shown == got):
                out.append(
                    f"$ {step.command}: the output differs from what the file shows\n--- shown\n"
                    + "\n".join(step.shown)
                    + "\n--- this run\n"
                    + "\n".join(step.got)
                )
    return out


_EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")


def _compared(line: str) -> bool:
    """Lines a comparison reads: not blank, not the elision mark, not what only this machine
    prints (``machine_only``)."""
    text = line.strip()
    return bool(text) and text != "..." and not machine_only(text)


def machine_only(line: str) -> bool:
    """What only the machine that ran a command prints, which a page never shows: a ``notice:``
    (which source answered depends on the machine's network: a mirror here, the named index
    elsewhere), pip's word on an index location of the machine's own pip configuration that has
    no page for a name (``WARNING: Location 'file:///...' is ignored``), a nested make's directory
    line (there only when the page runs under ``make``)."""
    text = line.strip()
    return (
        text.startswith("notice:")
        or (text.startswith("WARNING: Location '") and "is ignored" in text)
        or bool(re.match(r"make\[\d+\]: (Entering|Leaving) directory ", text))
    )


def _expected_rc(step: Step) -> int:
    """0, or what the command's own comment says (``$ envbuild check-lock BAD.lock  # exit 8``)."""
    m = _EXIT.search(step.command)
    return int(m.group(1)) if m else 0


def _matches(shown: list[str], got: list[str]) -> bool:
    """Every shown line, in order, among this run's lines (where a shown ``...`` line elides
    output)."""
    it = iter(got)
    return all(any(line == g for g in it) for line in shown)


def write(path: Path, found: list[Block], text: str) -> str:
    """``text`` with each block's outputs replaced by this run's."""
    pieces, last = [], 0
    for block in found:
        if block.file:
            continue
        body = []
        for step in block.steps:
            body.append(f"$ {step.command}")
            body += _kept(step)
        pieces += [text[last : block.start], "\n".join(body) + "\n"]
        last = block.end
    pieces.append(text[last:])
    return "".join(pieces)


def _kept(step: Step) -> list[str]:
    """This run's output as the file shows it: where the file elides (a ``...`` line), the same
    number of lines before and after it."""
    got = [x for x in step.got if not machine_only(x)]
    marks = [i for i, x in enumerate(step.shown) if x.strip() == "..."]
    if not marks:
        return got
    head, tail = marks[0], len(step.shown) - marks[0] - 1
    return got[:head] + ["..."] + (got[-tail:] if tail else [])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--write", action="store_true", help="write this run's output into the files")
    ap.add_argument("--scratch", type=Path, help="HOME and the work folder (default: a new one)")
    args = ap.parse_args()
    bad = 0
    for path in args.files:
        text = path.read_text()
        with contextlib.ExitStack() as stack:
            scratch = args.scratch or Path(stack.enter_context(tempfile.TemporaryDirectory()))
            paths = stack.enter_context(private_roots(roots(text)))
            found = run(text, scratch, overrides=overrides(path), paths=paths)
        problems = [
            f"$ {s.command}: exit {s.rc}\n" + "\n".join(s.got[-30:])
            for b in found
            for s in b.steps
            if not _EXPORT.match(s.command) and s.rc != _expected_rc(s)
        ]
        if problems:
            print("\n\n".join(problems), file=sys.stderr)
            bad += 1
            continue
        if args.write:
            path.write_text(write(path, found, text))
            print(f"wrote {path}")
        else:
            print(
                "\n\n".join(differences(found))
                or f"{path}: every command ran and printed what it shows"
            )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
