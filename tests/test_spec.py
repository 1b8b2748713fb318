"""The stack spec: every bad input is one clear message naming the file and key path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import run_cli

from envbuild.errors import ConfigError, ExitCode
from envbuild.spec import available_profiles, load_spec, resolve_spec

GOOD = """\
schema = 1
name = "t"
python = "3.11"
[abi]
package = "torch"
version = "2.13.0+cpu"
local = "cpu"
[[step]]
name = "torch"
packages = ["torch==2.13.0+cpu"]
[[step]]
name = "rest"
packages = ["tqdm==4.70.1"]
no_deps = true
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "stack.toml"
    p.write_text(text)
    return p


def error_of(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_spec(write(tmp_path, text), env or {})
    return str(info.value)


def test_good_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD), {})
    assert spec.baseline_index == 0
    assert spec.steps[1].no_deps is True
    assert spec.steps[1].names == ("tqdm",)
    assert spec.digest.startswith("sha256:")


def test_shipped_profiles_load() -> None:
    assert {"cpu", "h200-cu132"} <= set(available_profiles())
    h200 = resolve_spec("h200-cu132", None, {})
    assert [s.name for s in h200.steps] == [
        "bootstrap",
        "torch",
        "prebuilt-cuda",
        "flash-attn-4",
        "fla",
        "rest",
    ]
    assert h200.abi.version == "2.12.0.dev20260405+cu132"
    prebuilt = h200.step("prebuilt-cuda")
    assert prebuilt.no_deps and prebuilt.find_links == ("/mnt/data/wheelhouse",)
    assert h200.step("fla").no_deps
    cpu = resolve_spec(None, None, {})  # the embedded default
    assert cpu.name == "cpu"
    assert any(s.no_deps for s in cpu.steps)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: t.replace("no_deps = true", 'no_deps = "yes"'),
            "step[2].no_deps: must be true or false, got 'yes'",
        ),
        (
            lambda t: t.replace("no_deps = true", "no_dep = true"),
            "step[2].no_dep: unknown key (did you mean 'no_deps'?)",
        ),
        (
            lambda t: t.replace('packages = ["tqdm==4.70.1"]', "packages = []"),
            "step[2].packages: a step must install at least one package",
        ),
        (
            lambda t: t.replace("tqdm==4.70.1", "tqdm>>=1"),
            "step[2].packages[1]: not a valid requirement",
        ),
        (
            lambda t: t.replace('packages = ["tqdm==4.70.1"]', 'packages = ["torch==2.13.0+cpu"]'),
            (
                "step[2].packages: torch is installed by two steps, 'torch' (step[1]) and 'rest'"
                " (step[2])"
            ),
        ),
        (
            lambda t: t.replace('packages = ["torch==2.13.0+cpu"]', 'packages = ["numpy"]'),
            "no step installs the ABI package 'torch': the baseline step is missing",
        ),
        (lambda t: t.replace('python = "3.11"', "python = 3.11"), "python: must be a string"),
        (
            lambda t: t.replace('python = "3.11"', 'python = "py3"'),
            "python: must be a major.minor version",
        ),
        (lambda t: t.replace("schema = 1", "schema = 7"), "schema: must be 1"),
        (lambda t: t + "\n[layot]\n", "layot: unknown key (did you mean 'layout'?)"),
        (
            lambda t: t.replace('version = "2.13.0+cpu"', 'version = "not a version"'),
            "abi.version: not a valid version",
        ),
        (
            lambda t: t.replace('packages = ["torch==2.13.0+cpu"]', 'packages = ["torch==2.12.0"]'),
            "does not admit abi.version '2.13.0+cpu'",
        ),
        (
            lambda t: t.replace('[[step]]\nname = "rest"', '[[step]]\nname = "torch"'),
            "step[2].name: duplicate step name 'torch'",
        ),
        (
            lambda t: t.replace(
                'packages = ["tqdm==4.70.1"]', 'packages = ["tqdm"]\nupgrade_strategy = "eagr"'
            ),
            (
                "step[2].upgrade_strategy: must be one of only-if-needed, eager, got 'eagr' (did"
                " you mean 'eager'?)"
            ),
        ),
        (
            lambda t: t.replace("schema = 1", "schema = 1\nname2 = 3"),
            "name2: unknown key (did you mean 'name'?)",
        ),
        (
            lambda t: t + '[[step]]\nname="x"\npackages=["a"]\nfind_links=["${WHEELS}"]\n',
            "step[3].find_links[1]: environment variable WHEELS is not set",
        ),
    ],
)
def test_bad_specs_name_the_key_path(
    tmp_path: Path, edit: Callable[[str], str], expected: str
) -> None:
    message = error_of(tmp_path, edit(GOOD))
    assert str(tmp_path / "stack.toml") in message
    assert expected in message


def test_invalid_toml(tmp_path: Path) -> None:
    assert "not valid TOML" in error_of(tmp_path, GOOD + "\n[[step]\n")


def test_variables_expand_with_defaults(tmp_path: Path) -> None:
    text = GOOD.replace(
        'packages = ["tqdm==4.70.1"]',
        'packages = ["tqdm==4.70.1"]\nfind_links = ["${A:-/a}", "${B-/b}", "${C}"]\nindex_url ='
        ' "${D-}"',
    )
    spec = load_spec(write(tmp_path, text), {"B": "", "C": "/c"})
    # ":-" falls back when empty or unset; "-" only when unset; an empty index_url means pip's own
    # sources
    assert spec.steps[1].find_links == ("/a", "/c")
    assert spec.steps[1].index_url is None
    spec = load_spec(write(tmp_path, text), {"A": "/x", "C": "/c", "D": "http://i/simple"})
    assert spec.steps[1].find_links == ("/x", "/b", "/c")
    assert spec.steps[1].index_url == "http://i/simple"


def test_the_torch_index_variable_has_one_name_and_an_alias(tmp_path: Path) -> None:
    """ENVBUILD_TORCH_INDEX is the name; TORCH_INDEX its alias: a spec naming either reads the
    other when only that one is set, the one it names first; the step knows where its sources came
    from (what an unreachable source's error names)."""
    for named in ("ENVBUILD_TORCH_INDEX", "TORCH_INDEX"):
        text = GOOD.replace(
            'packages = ["tqdm==4.70.1"]',
            f'packages = ["tqdm==4.70.1"]\nindex_url = "${{{named}-https://default/simple}}"',
        )
        path = write(tmp_path, text)
        assert load_spec(path, {}).steps[1].index_url == "https://default/simple"
        for given in ("ENVBUILD_TORCH_INDEX", "TORCH_INDEX"):
            assert load_spec(path, {given: "http://m/"}).steps[1].index_url == "http://m/"
            assert load_spec(path, {given: ""}).steps[1].index_url is None
        both = {
            named: "http://named/",
            ({"TORCH_INDEX", "ENVBUILD_TORCH_INDEX"} - {named}).pop(): "x",
        }
        spec = load_spec(path, both)
        assert spec.steps[1].index_url == "http://named/"
        assert spec.steps[1].source_vars == (named,) and spec.steps[0].source_vars == ()


def test_digest_ignores_environment(tmp_path: Path) -> None:
    text = GOOD.replace(
        'packages = ["tqdm==4.70.1"]', 'packages = ["tqdm==4.70.1"]\nfind_links = ["${W:-/w}"]'
    )
    a = load_spec(write(tmp_path, text), {"W": "/one"})
    b = load_spec(write(tmp_path, text), {"W": "/two"})
    assert a.digest == b.digest


def test_protected_package_in_a_later_step(tmp_path: Path) -> None:
    text = GOOD.replace('local = "cpu"', 'local = "cpu"\nprotect = ["pytorch-triton"]').replace(
        "tqdm==4.70.1", "pytorch-triton==3.7.0"
    )
    assert "step[2].packages[1]: pytorch-triton is in the protected set" in error_of(tmp_path, text)


def test_cli_config_errors_have_no_traceback(tmp_path: Path) -> None:
    bad = write(tmp_path, GOOD.replace("no_deps = true", "no_deps = 1"))
    out = run_cli(["plan", "--stack", bad], home=tmp_path / "home")
    assert out.rc == ExitCode.CONFIG
    assert "Traceback" not in out.stderr
    assert out.stderr.strip() == f"error: {bad}: step[2].no_deps: must be true or false, got 1"

    out = run_cli(["plan", "--profile", "cpuu"], home=tmp_path / "home")
    assert out.rc == ExitCode.CONFIG
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith(
        "error: unknown profile 'cpuu' (did you mean 'cpu'?); known profiles:"
    )
