"""The plan: exact installer arguments per backend, golden text for the table."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from lockhelpers import lock_env
from support.fixtures import EnvbuildResult

from envbuild.plan import InstallerSources, PlanOptions, make_plan
from envbuild.spec import resolve_spec

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILD_")}
    return subprocess.run(
        [sys.executable, "-m", "envbuild", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**base, **(env or {})},
    )


def check_golden(name: str, text: str) -> None:
    text = text.replace(str(REPO), "<repo>")
    path = GOLDEN / name
    if os.environ.get("ENVBUILD_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), (
        f"output differs from {path} (ENVBUILD_UPDATE_GOLDEN=1 rewrites it)"
    )


GOLDEN_STACK = Path("/tmp/envbuild-golden/cpu")


def test_plan_table_golden() -> None:
    # The table's column widths follow the lock files' paths, so the profile is copied to a path of
    # one fixed length: the golden text must not depend on where the checkout lives. The folder is a
    # private one beside /tmp/envbuild-golden (same length), read back as that path: two runs on one
    # machine never share it.
    from support import tour

    with tour.private_roots([GOLDEN_STACK.parent]) as paths:
        mine = Path(paths[str(GOLDEN_STACK.parent)]) / GOLDEN_STACK.name
        shutil.copytree(REPO / "lockfiles" / "cpu", mine)
        # --backend pip: uv's arguments carry the host's pip configuration (its sources)
        out = cli("plan", "--stack", str(mine / "stack.toml"), "--backend", "pip")
    assert out.returncode == 0, out.stderr
    out.stdout = out.stdout.replace(str(mine.parent), str(GOLDEN_STACK.parent))
    check_golden("plan_cpu.txt", out.stdout)


def test_plan_h200_json_has_the_seed_order() -> None:
    out = cli("plan", "--profile", "h200-cu132", "--backend", "pip", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    steps = {s["name"]: s for s in data["steps"]}
    assert [s["name"] for s in data["steps"]] == [
        "bootstrap",
        "torch",
        "prebuilt-cuda",
        "flash-attn-4",
        "fla",
        "rest",
    ]
    assert steps["torch"]["role"] == "baseline"
    assert steps["torch"]["installer_args"][:2] == [
        "--index-url",
        "https://download.pytorch.org/whl/nightly/cu132",
    ]
    assert "--pre" in steps["torch"]["installer_args"]
    assert steps["prebuilt-cuda"]["installer_args"][:3] == [
        "--no-index",
        "--find-links",
        "/mnt/data/wheelhouse",
    ]
    assert "--no-deps" in steps["fla"]["installer_args"]
    assert all(steps[n]["constraints"] for n in ("prebuilt-cuda", "flash-attn-4", "fla", "rest"))
    assert not steps["bootstrap"]["constraints"] and not steps["torch"]["constraints"]


def test_uv_gets_pips_configured_sources_and_same_semantics() -> None:
    spec = resolve_spec("cpu", None, {"ENVBUILD_TORCH_INDEX": ""})
    sources = InstallerSources(
        index_url=None, extra_index_urls=("file:///x/simple",), find_links=("/wheels",)
    )
    pip = make_plan(spec, PlanOptions(backend="pip", default_sources=sources))
    uv = make_plan(spec, PlanOptions(backend="uv", default_sources=sources))
    # pip reads its own config: nothing is added
    assert "--find-links" not in pip.step("torch").args
    # uv does not: the same sources are passed explicitly, searched like pip does
    args = uv.step("torch").args
    assert args[:6] == (
        "--extra-index-url",
        "file:///x/simple",
        "--find-links",
        "/wheels",
        "--index-strategy",
        "unsafe-best-match",
    )
    assert "--no-deps" in uv.step("fla").args and "--no-deps" in pip.step("fla").args


def test_offline_wheelhouse_replaces_every_source() -> None:
    spec = resolve_spec("h200-cu132", None, {})
    plan = make_plan(spec, PlanOptions(backend="pip", wheelhouse="/srv/wh"))
    for s in plan.steps:
        assert s.args[:3] == ("--no-index", "--find-links", "/srv/wh")
        assert "--index-url" not in s.args and "--extra-index-url" not in s.args
    assert plan.sources() == ["/srv/wh"]


def test_eager_upgrade_and_reinstall_flags(tmp_path: Path) -> None:
    stack = tmp_path / "s.toml"
    stack.write_text("""schema = 1
name = "t"
python = "3.11"
[abi]
version = "2.13.0"
[[step]]
name = "torch"
packages = ["torch==2.13.0"]
[[step]]
name = "x"
packages = ["x"]
upgrade = true
upgrade_strategy = "eager"
reinstall = true
pre = true
""")
    spec = resolve_spec(None, stack, {})
    assert make_plan(spec, PlanOptions(backend="pip")).step("x").args[:5] == (
        "--pre",
        "--upgrade",
        "--upgrade-strategy",
        "eager",
        "--force-reinstall",
    )
    assert make_plan(spec, PlanOptions(backend="uv")).step("x").args == (
        "--prerelease",
        "allow",
        "--upgrade",
        "--reinstall",
    )


# ----------------------------------------------------------------------------- plan == provision


def _ran(log: Path) -> list[list[str]]:
    """The commands a step's log recorded (``$ argv`` lines, written by envbuild.run)."""
    return [shlex.split(line[2:]) for line in log.read_text().splitlines() if line.startswith("$ ")]


@pytest.mark.slow
@pytest.mark.parametrize("backend", [None, "pip"], ids=["default", "pip"])
def test_plan_json_argv_is_what_provision_runs(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    backend: str | None,
) -> None:
    """`plan --json`, then a real lock and provision of a small stack: the argv in each step's log
    is the plan's, word for word (default backend, lock, paths, constraints)."""
    stack = write_stack(
        [
            {"name": "helpers", "packages": ["fla-core-like==0.4.2"]},
            {"name": "fla", "packages": ["needs-fla-core==1.0"], "no_deps": True},
        ]
    )
    locked = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert locked.rc == 0, locked.output
    where = ["--stack", str(stack), "--root", str(tmp_path / "data")]
    chosen = ["--backend", backend] if backend else []
    planned = run_envbuild("plan", *where, *chosen, "--json")
    assert planned.rc == 0, planned.output
    data = json.loads(planned.stdout)
    assert data["backend"] == (backend or "uv")  # provision's default: uv, a dependency of envbuild
    assert all(s["locked_file"] for s in data["steps"])  # the same lock provision installs from
    provisioned = run_envbuild(
        "provision", *where, *chosen, "--home", str(tmp_path / "home"), "--python", sys.executable
    )
    assert provisioned.rc == 0, provisioned.output
    for step in data["steps"]:
        log = tmp_path / "data" / "logs" / f"{step['number']:02d}-{step['name']}.log"
        assert _ran(log) == step["argv"], (
            f"step {step['name']}: provision ran something else than planned"
        )
    guarded = data["steps"][-1]["argv"][0]
    assert guarded[-2:] == ["-c", str(tmp_path / "data" / ".envbuild" / "constraints.txt")]
    assert ("--verify-hashes" if backend is None else "--require-hashes") in guarded
