"""``plan --lock`` on the locks ML projects commit selects what ``uv sync --frozen`` installs.

``tests/data/publocks/<name>/`` holds six public projects' ``uv.lock`` with their ``pyproject.toml``
(and their workspace members'), byte for byte at the commit ``SOURCE.txt`` names: Zyphra/Zonos
bc40d98, karpathy/nanochat 92d63d4, nvidia-cosmos/cosmos-reason2 a3b4a1d (a workspace member's
extras switched on by the root's), nvidia-cosmos/cosmos-transfer2.5 2ff49d0 (the root extra
``cu128`` pulls ``cosmos-oss[cu128_torch27]``), huggingface/lerobot 7427f31 (69 extras),
allenai/open-instruct e6c3044 (default groups ``dev`` and ``cuda12``, conflicting ``cuda13``).

For each selection, the reference is uv itself on this host: ``uv sync --frozen --dry-run`` with
the same flags (offline, nothing installed) lists every package it would install; the plan's
stages must hold exactly those, name and version. A selection uv refuses is refused with uv's
reason; one whose packages hold no torch is refused as such.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from support.fixtures import installer_env
from support.gatelocks import uv_bin
from support.syncflags import flags_of

from envbuild.errors import EnvbuildError
from envbuild.projectlock.run import LockRequest, prepare, python_for_lock
from envbuild.projectlock.stages import Placed

LOCKS = Path(__file__).resolve().parent / "data" / "publocks"

SELECTIONS: dict[str, list[list[str]]] = {
    "zonos": [[], ["--extra", "compile"], ["--all-extras"], ["--no-dev"]],
    "nanochat": [
        [],
        ["--extra", "cpu"],
        ["--extra", "gpu"],
        ["--extra", "cpu", "--extra", "gpu"],
        ["--extra", "gpu", "--group", "dev"],
    ],
    "cosmos-reason2": [
        [],
        ["--extra", "cu128"],
        ["--extra", "cu130"],
        ["--extra", "cu128", "--no-dev"],
        ["--extra", "cu128", "--extra", "cu130"],
    ],
    "cosmos-transfer2.5": [
        [],
        ["--extra", "cu128"],
        ["--extra", "cu130"],
        ["--extra", "cu128", "--extra", "gradio"],
        ["--all-extras"],
    ],
    "lerobot": [
        [],
        ["--extra", "training"],
        ["--extra", "all"],
        ["--all-extras", "--no-extra", "all"],
    ],
    "open-instruct": [
        [],
        ["--group", "cuda13", "--no-group", "cuda12"],
        ["--no-default-groups"],
        ["--all-groups"],
        ["--extra", "code", "--only-group", "cuda12"],
    ],
}

# HOME is the test's own: pyenv's shims find its interpreters through PYENV_ROOT
PYENV = {"PYENV_ROOT": os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")}
_LINE = re.compile(r"^ \+ (\S+?)(?:==(\S+?)(?: \(from .*\))?| @ (\S+))$")


def python_of(folder: Path) -> str:
    pinned = folder / ".python-version"
    if pinned.is_file():
        return ".".join(pinned.read_text().split()[0].split(".")[:2])
    return python_for_lock(folder / "uv.lock")


def uv_would_install(folder: Path, argv: list[str], python: str, tmp: Path) -> dict[str, str] | str:
    """{name: version} of ``uv sync --frozen --dry-run ARGV`` into a new venv, or uv's refusal."""
    env = installer_env(
        tmp / "home", {"UV_PROJECT_ENVIRONMENT": str(tmp / "venv"), "UV_OFFLINE": "1", **PYENV}
    )
    env.pop("UV_NO_CONFIG")
    out = subprocess.run(
        [uv_bin(), "sync", "--frozen", "--dry-run", "--python", python, *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0:
        return out.stderr
    got = {}
    for line in out.stderr.splitlines() + out.stdout.splitlines():
        m = _LINE.match(line)
        if m:  # a version, or "@ URL" for a direct URL, a git pin or a local folder
            got[str(canonicalize_name(m.group(1)))] = m.group(2) or f"@ {m.group(3)}"
    return got


def _ours(p: Placed) -> str:
    """A planned package as uv's dry run names it: its version, or ``@ URL`` where uv gives its
    source."""
    from urllib.parse import unquote

    if p.stage == "project" or p.line.startswith(("-e ", f"{p.entry.name} @ git+")):
        return "@"
    if p.artifact is not None and p.entry.url:
        return f"@ {unquote(p.artifact.url)}"
    return p.entry.version or ""


def _same(ours: str, uv: str) -> bool:
    from urllib.parse import unquote

    return ours == "@" and uv.startswith("@") or ours == uv or unquote(ours) == unquote(uv)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_public_lock_selections_equal_uv_sync(name: str, tmp_path: Path) -> None:
    folder = LOCKS / name
    python = python_of(folder)
    from envbuild.installer.python import find_interpreter

    # an interpreter of the lock's Python for uv sync (pyenv's are found here, as provision finds
    # them)
    try:
        exe = str(find_interpreter(python, require_fit=False).executable)
    except EnvbuildError:
        pytest.skip(f"no Python {python} here for uv sync (the lock's)")
    compared = 0
    for argv in SELECTIONS[name]:
        what = f"{name} {argv}"
        uv = uv_would_install(folder, argv, exe, tmp_path)
        flags = flags_of(argv)
        req = LockRequest(lock=folder / "uv.lock", sync=flags)
        try:
            ours: dict[str, str] | EnvbuildError = {
                p.entry.name: _ours(p) for p in prepare(req, python, refusing=False).plan.placed
            }
        except EnvbuildError as exc:
            ours = exc
        # refused: for uv's reason, or (a wheel for no Python here) for the lock's files
        if isinstance(uv, str):
            assert isinstance(ours, EnvbuildError), (what, uv)
            no_wheel = "wheel" in uv and "has no file that installs on Python" in ours.message
            assert no_wheel or "uv refuses this selection" in ours.message, (what, uv, ours.message)
            # uv folds a long message to the terminal's width: compare the words
            reason = " ".join(
                re.split(r"\n\s*\n|\nhint:|\nUsage:", uv[uv.rindex("error:") + len("error:") :])[
                    0
                ].split()
            )
            assert no_wheel or reason in " ".join(ours.message.split()), (
                what,
                reason,
                ours.message,
            )
            continue
        if "torch" not in uv:
            assert isinstance(ours, EnvbuildError) and "installs no torch" in ours.message, (
                what,
                ours,
            )
            continue
        assert not isinstance(ours, EnvbuildError), (what, ours.message)
        assert set(ours) == set(uv), (what, sorted(set(ours) ^ set(uv)))
        assert all(_same(ours[k], uv[k]) for k in ours), (
            what,
            {k: (ours[k], uv[k]) for k in ours if not _same(ours[k], uv[k])},
        )
        compared += 1
    assert compared >= 2, f"{name}: fewer than two selections installed torch"


def test_an_environment_with_no_torch_file_is_said_so(tmp_path: Path) -> None:
    """huggingface/lerobot 7427f31 locks torch 2.11.0, which PyPI publishes no macOS x86_64 wheel
    of: that row says "no file for this platform and Python" (a note, exit 0), and a finding where
    --environment names that platform (exit 8). Its ``requires-python >=3.12`` lets in 3.15, which
    locked files are built for (cffi's, pillow's ``cp315`` wheels) and torch 2.11.0 is not: a row of
    its own on every platform."""
    import json
    import sys

    lock = LOCKS / "lerobot" / "uv.lock"
    env = installer_env(tmp_path / "home")
    run = [sys.executable, "-m", "envbuild", "check-lock", "--offline", str(lock)]
    ok = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    rows = {r["name"]: r for r in json.loads(ok.stdout)["files"][0]["environments"]}
    assert rows["macos x86_64, python 3.12–3.15"]["installable"] is False
    assert rows["linux x86_64, python 3.12–3.14"]["installable"] is True
    assert rows["linux x86_64, python 3.15"]["installable"] is False
    table = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert "no file for this platform and Python" in table.stdout
    named = subprocess.run(
        [*run, "--environment", "macos-x86_64"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert named.returncode == 8, named.stdout + named.stderr
    assert "[no-file]" in named.stdout and "Traceback" not in named.stderr


def test_the_gate_follows_an_extra_switched_on_through_another() -> None:
    """nvidia-cosmos/cosmos-transfer2.5 2ff49d0: the root extra ``cu128`` switches on the workspace
    member's ``cosmos-oss[cu128-torch27]``. The gate's environments with ``--extra cu128`` are the
    one uv installs (torch 2.7.0+cu128), not the root extra alone (torch 2.9.0) nor beside the
    member's conflicting cu130 extra (uv refuses that). uv itself says the same (``uv sync
    --dry-run``, above).
    """
    from envbuild.gate.check import check_file
    from envbuild.gate.environments import Narrow
    from envbuild.gate.findings import Policy

    report = check_file(
        LOCKS / "cosmos-transfer2.5" / "uv.lock",
        Policy(),
        offline=True,
        narrow=Narrow(environment=("linux-x86_64",), extra=("cu128",)),
    )
    # one selection, its rows split by Python: torch 2.7.0+cu128 has no cp314 file, which the lock's
    # requires-python (>=3.10) allows; the platform was named, not that Python: a note, no finding
    rows = [(e.torch, e.installable, e.name.split(", extra")[0]) for e in report.environments]
    assert rows == [
        ("2.7.0+cu128", True, "linux x86_64, python 3.10–3.13"),
        ("2.7.0+cu128", False, "linux x86_64, python 3.14"),
    ]
    assert not report.findings
    for row in report.environments:
        assert "cosmos-oss[cu128-torch27]" in row.name and "cu130" not in row.name


def test_torchs_runtime_through_an_edge_with_extras_is_in_the_torch_stage() -> None:
    """docling e1cb2b2 locks torch 2.11.0+cu130, whose CUDA runtime comes through an edge with
    extras, ``cuda-toolkit[cublas, cudart, cufft, cufile, ...]``: those packages are torch's runtime
    and belong to its stage (the baseline frozen after it protects them). Placed in the rest stage,
    as they were, torch did not import after its own stage (``libcufile.so.0``: no such file) and a
    later stage could change them unguarded."""
    flags = flags_of(["--no-default-groups", "--all-packages"])
    req = LockRequest(lock=LOCKS / "docling" / "uv.lock", sync=flags)
    placed = prepare(req, "3.12", refusing=False).plan.placed
    stage = {p.entry.name: p.stage for p in placed}
    through_extras = {
        "nvidia-cublas",
        "nvidia-cuda-cupti",
        "nvidia-cuda-nvrtc",
        "nvidia-cuda-runtime",
        "nvidia-cufft",
        "nvidia-cufile",
        "nvidia-curand",
        "nvidia-cusolver",
        "nvidia-cusparse",
        "nvidia-nvjitlink",
        "nvidia-nvtx",
    }
    assert {n: stage.get(n) for n in through_extras} == dict.fromkeys(through_extras, "torch")
    why = {p.entry.name: p.why for p in placed}
    assert why["nvidia-cufile"] == "torch depends on it"  # through cuda-toolkit[cufile]
    # and nothing of the rest came with it: what torch's stage holds is its runtime
    assert {n for n, s in stage.items() if s == "torch"} - through_extras == {
        "cuda-bindings",
        "cuda-pathfinder",
        "cuda-toolkit",
        "filelock",
        "fsspec",
        "jinja2",
        "markupsafe",
        "mpmath",
        "networkx",
        "nvidia-cudnn-cu13",
        "nvidia-cusparselt-cu13",
        "nvidia-nccl-cu13",
        "nvidia-nvshmem-cu13",
        "setuptools",
        "sympy",
        "torch",
        "triton",
        "typing-extensions",
    }
