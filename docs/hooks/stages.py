"""The stages of the package, in import order, and the stage of every module: the one list.

``tests/test_layers.py`` holds every import to it (a module imports its own stage and the ones
before it); ``make docs-reference`` shows it in docs/architecture.md and docs/development.md
(``reference.py``'s stage table) and orders the file table by it (``architecture.py``). It lives
beside the hooks, not in the tests, so that the docs build needs only the ``docs`` extra.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "envbuild"

# The one stage list: (stage, what it holds), in import order. docs/architecture.md shows it,
# generated from here by `make docs-reference` (docs/hooks/reference.py);
# tests/test_layers.py's test_the_pages_show_these_stages fails when the page's copy is stale.
STAGES_DOC = (
    (
        "foundation",
        (
            "errors, events, I/O (atomic writes, hashes, the one TOML parser), quoting, the one "
            "runner, the NVIDIA driver's answers, the package sources (`index/`: the index client, the one downloader, its "
            "network and its caches), the ABI-label parser; they import no later stage"
        ),
    ),
    (
        "spec",
        (
            "the stack spec and its readers: `stack.toml` (bounded, dotted-path errors), the step"
            " files"
        ),
    ),
    ("plan", "spec (+ options, + lock) to ordered steps with their installer argv"),
    ("installer", "pip and uv behind one protocol; the data root and `$HOME` links"),
    ("guard", "the ABI guard: reading site-packages, the baseline, the rules"),
    ("stacklock", "envbuild's own locks of a stack spec: made, relocked, exported"),
    ("gate", "`check-lock`: any lockfile judged (envbuild's own too)"),
    ("wheelhouse", "extension wheels built, every locked file mirrored"),
    ("proof", "preflight, smoke, the distributed step, receipts"),
    (
        "orchestrators",
        (
            "provision, provision --lock (`projectlock/`: a project's lock), images: libraries"
            " that return results; "
            "they import no front end"
        ),
    ),
    (
        "top",
        (
            "the front ends (`commands/`, and `cli.py`, the console script on"
            " `commands/parser.py`): they parse, call the orchestrators and print; no command"
            " imports `cli.py`"
        ),
    ),
)
STAGES = tuple(name for name, _ in STAGES_DOC)

# Module or package -> stage; a module takes the entry of its nearest listed parent package.
STAGE_OF = {
    "envbuild": "foundation",  # the package itself (__version__)
    "envbuild.errors": "foundation",
    "envbuild.events": "foundation",
    "envbuild._io": "foundation",
    "envbuild.quoting": "foundation",
    "envbuild.run": "foundation",
    # the driver's answers: nvidia-smi and the GPU list (preflight, smoke, dist-step, wheelhouse)
    "envbuild.nvidia": "foundation",
    "envbuild.index": "foundation",  # client, net, metacache, wheeltags: every package source
    # the gate reads ABI claims, the wheelhouse writes them, the guard checks them
    "envbuild.abitag": "foundation",
    # stack.py, stepfile.py (the plan writes step files, the lock makes them), _toml.py
    "envbuild.spec": "spec",
    "envbuild.plan": "plan",
    "envbuild.installer": "installer",
    "envbuild.layout": "installer",  # the data root and $HOME links the venv goes into
    "envbuild.guard": "guard",  # site, buildrecord (the wheelhouse writes it), baseline, rules
    "envbuild.stacklock": "stacklock",
    # any lockfile; envbuild's own locks too (rules.ownlock reads stacklock.model)
    "envbuild.gate": "gate",
    "envbuild.wheelhouse": "wheelhouse",
    "envbuild.host": "proof",  # preflight: the host's part of the proof (receipts record it)
    "envbuild.proof": "proof",
    "envbuild.provision": "orchestrators",
    # provision --lock FILE (a project's lock): the gate chooses, provision installs
    "envbuild.projectlock": "orchestrators",
    "envbuild.images": "orchestrators",
    "envbuild.commands": "top",
    "envbuild.cli": "top",
    "envbuild.__main__": "top",
}


def stage_of(module: str) -> str | None:
    """The stage of ``module``: its own entry, else its nearest listed parent package's."""
    if module in STAGE_OF:
        return STAGE_OF[module]
    parts = module.split(".")
    # never the bare package: a new top-level module needs a stage
    for n in range(len(parts) - 1, 1, -1):
        if ".".join(parts[:n]) in STAGE_OF:
            return STAGE_OF[".".join(parts[:n])]
    return None


def stage_table() -> str:
    """The stage list as docs/architecture.md shows it (docs/hooks/reference.py writes it there)."""
    rows = ["| stage | modules and packages | holds |", "| --- | --- | --- |"]
    for n, (stage, what) in enumerate(STAGES_DOC, 1):
        mods = [
            m.removeprefix("envbuild.") or "envbuild" for m, s in STAGE_OF.items() if s == stage
        ]
        shown = ", ".join(
            f"`{m}/`" if (PACKAGE / m.replace(".", "/")).is_dir() and m != "envbuild" else f"`{m}`"
            for m in mods
        )
        rows.append(f"| {n}. {stage} | {shown} | {what} |")
    return "\n".join(rows) + "\n"
