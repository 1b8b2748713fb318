"""The plan: exact installer arguments per backend, golden text for the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envbuild.plan import InstallerSources, PlanOptions, make_plan
from envbuild.spec import resolve_spec

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILD_")}
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True,
                          cwd=REPO, env={**base, **(env or {})})


def check_golden(name: str, text: str) -> None:
    text = text.replace(str(REPO), "<repo>")
    path = GOLDEN / name
    if os.environ.get("ENVBUILD_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path} (ENVBUILD_UPDATE_GOLDEN=1 rewrites it)"


def test_plan_table_golden() -> None:
    out = cli("plan", "--profile", "cpu")
    assert out.returncode == 0, out.stderr
    check_golden("plan_cpu.txt", out.stdout)


def test_plan_h200_json_has_the_seed_order() -> None:
    out = cli("plan", "--profile", "h200-cu132", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    steps = {s["name"]: s for s in data["steps"]}
    assert [s["name"] for s in data["steps"]] == ["bootstrap", "torch", "prebuilt-cuda", "flash-attn-4", "fla", "rest"]
    assert steps["torch"]["role"] == "baseline"
    assert steps["torch"]["installer_args"][:2] == ["--index-url", "https://download.pytorch.org/whl/nightly/cu132"]
    assert "--pre" in steps["torch"]["installer_args"]
    assert steps["prebuilt-cuda"]["installer_args"][:3] == ["--no-index", "--find-links", "/mnt/data/wheelhouse"]
    assert "--no-deps" in steps["fla"]["installer_args"]
    assert all(steps[n]["constraints"] for n in ("prebuilt-cuda", "flash-attn-4", "fla", "rest"))
    assert not steps["bootstrap"]["constraints"] and not steps["torch"]["constraints"]


def test_uv_gets_pips_configured_sources_and_same_semantics() -> None:
    spec = resolve_spec("cpu", None, {"ENVBUILD_TORCH_INDEX": ""})
    sources = InstallerSources(index_url=None, extra_index_urls=("file:///x/simple",), find_links=("/wheels",))
    pip = make_plan(spec, PlanOptions(backend="pip", default_sources=sources))
    uv = make_plan(spec, PlanOptions(backend="uv", default_sources=sources))
    # pip reads its own config: nothing is added
    assert "--find-links" not in pip.step("torch").args
    # uv does not: the same sources are passed explicitly, searched like pip does
    args = uv.step("torch").args
    assert args[:6] == ("--extra-index-url", "file:///x/simple", "--find-links", "/wheels", "--index-strategy", "unsafe-best-match")
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
        "--pre", "--upgrade", "--upgrade-strategy", "eager", "--force-reinstall")
    assert make_plan(spec, PlanOptions(backend="uv")).step("x").args == ("--prerelease", "allow", "--upgrade", "--reinstall")
