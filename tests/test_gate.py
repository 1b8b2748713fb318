"""The gate (``check-lock FILE...``) on lockfiles made by the real tools, in the shapes ML projects
commit: uv's PyTorch guide (torch per platform; torch per accelerator through conflicting extras),
Poetry with a torch source per marker, ``uv pip compile --universal``, pip-compile and ``pip lock``.

Every lock is written by the tool itself against the local fixture index (``support.gatelocks``);
each healthy lock passes, and each planted fault (a downgrade in one fork only, a re-tag, an
extension built for another torch minor / CUDA major / C++ ABI, a missing runtime requirement) is
caught, named with its environment, and located on its lock line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import (
    GateIndex,
    pip_compile_requirements,
    pip_lock,
    poetry_lock,
    uv_groups_lock,
    uv_platform_lock,
    uv_runtime_missing_lock,
    uv_universal_requirements,
)

from envbuild.errors import ExitCode
from envbuild.gate import Policy, check_file

pytestmark = pytest.mark.slow
Run = Callable[..., EnvbuildResult]


def _json(result: EnvbuildResult) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _rules(doc: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    return sorted(
        (f["rule"], f["package"], tuple(f["environments"])) for f in doc["files"][0]["findings"]
    )


def _envs(doc: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e["torch"] for e in doc["files"][0]["environments"]}


def _git(repo: Path, *args: str) -> None:
    env = {
        **installer_env(repo.parent / "home"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)


def _repo_with(tmp: Path, base: Path, name: str = "uv.lock") -> Path:
    """A git repository whose main branch holds ``base`` as ``name``; returns the file's path."""
    repo = tmp / "repo"
    repo.mkdir()
    shutil.copy(base, repo / name)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", name)
    _git(repo, "commit", "-q", "-m", "base")
    return repo / name


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# ----------------------------------------------------------------------------- uv.lock, torch per
# platform


def test_uv_platform_forks_pass_and_a_downgrade_in_one_fork_is_named(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    healthy = uv_platform_lock(tmp_path, gate_index)
    ok = run_envbuild("check-lock", str(healthy), "--json")
    assert ok.rc == 0, ok.output  # two torch entries, one per fork: no "pinned 2 times"
    doc = _json(ok)
    envs = _envs(doc)
    assert envs["linux x86_64"] == "2.10.0+cu128" and envs["macos arm64"] == "2.10.0"
    assert envs["windows amd64"] == "2.10.0"
    assert (
        doc["files"][0]["torches"] == ["2.10.0", "2.10.0+cu128"]
        and doc["files"][0]["torch"] is None
    )
    assert not doc["files"][0]["unchecked"] and doc["schema"] == 1
    # online (the fixture index): torch's runtime was read and found complete in every fork
    notices = doc["files"][0]["notices"]
    assert not any("runtime requirements" in n for n in notices), notices

    # the branch moves linux to 2.9.1+cu128 only; macOS/Windows keep 2.10.0
    lock = _repo_with(tmp_path, healthy)
    shutil.copy(uv_platform_lock(tmp_path, gate_index, linux_torch="2.9.1"), lock)
    bad = run_envbuild("check-lock", str(lock), "--base", "main", "--offline")
    assert bad.rc == ExitCode.LOCK, bad.output
    line = _line_of(lock, 'version = "2.9.1+cu128"')
    assert (
        f"{lock}:{line}: torch: torch 2.10.0+cu128 at main -> 2.9.1+cu128 here: a downgrade "
        "[torch-downgrade] in linux x86_64; linux aarch64" in bad.stdout
    ), bad.output
    assert "macos" not in bad.stdout.split("[torch-downgrade]")[1].splitlines()[0]


def test_uv_platform_retag_is_a_swap(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    lock = _repo_with(tmp_path, uv_platform_lock(tmp_path, gate_index, linux_index="cu130"))
    shutil.copy(uv_platform_lock(tmp_path, gate_index, linux_index="cu128"), lock)
    r = run_envbuild("check-lock", str(lock), "--base", "main", "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    assert _rules(_json(r)) == [("torch-swap", "torch", ("linux x86_64", "linux aarch64"))]
    assert (
        "torch 2.10.0+cu130 at main -> 2.10.0+cu128 here"
        in _json(r)["files"][0]["findings"][0]["reason"]
    )


@pytest.mark.parametrize(
    ("extension", "kind"),
    [
        (
            "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE",
            "built for torch 2.9, locked with torch 2.10.0+cu128",
        ),
        ("flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE", "built for CUDA 13"),
        ("flash_attn-2.8.3+cu12torch2.10cxx11abiFALSE", "built with cxx11abiFALSE"),
    ],
)
def test_uv_extension_built_for_another_torch_is_caught_on_its_line(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path, extension: str, kind: str
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index, extension=extension)
    r = run_envbuild("check-lock", str(lock), "--offline", "--annotations", "github")
    assert r.rc == ExitCode.LOCK, r.output
    line = _line_of(lock, 'version = "2.8.3+')
    assert f"{lock}:{line}: flash-attn: flash-attn 2.8.3+" in r.stdout and kind in r.stdout, (
        r.output
    )
    assert "[extension-abi] in linux x86_64; linux aarch64" in r.stdout
    assert (
        f"::error file={lock},line={line},title=envbuild check-lock [extension-abi]::flash-attn:"
        in r.stdout
    )


def test_uv_healthy_extensions_pass_and_explain_lists_what_it_could_not_verify(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    for ext in (
        "flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE",
        "flash_attn_3-3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61",
        "mamba_ssm-2.2.4+cu12torch2.10cxx11abiTRUE",
    ):
        lock = uv_platform_lock(tmp_path, gate_index, extension=ext)
        r = run_envbuild("check-lock", str(lock), "--offline", "--explain")
        assert r.rc == 0, (ext, r.output)
    # a prebuilt extension beside PyPI's torch (no local tag) locked without its nvidia runtime
    # (--no-deps): nothing says its CUDA major, so it cannot be compared (with the runtime it is:
    # tests/test_gate_tags.py)
    lock = uv_universal_requirements(
        tmp_path,
        gate_index,
        linux_torch="2.10.0",
        linux_index="plain",
        no_deps=True,
        extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE",
    )
    r = run_envbuild("check-lock", str(lock), "--offline", "--explain")
    assert r.rc == 0, r.output
    assert (
        "not verified:" in r.stdout
        and "carries no local CUDA tag, so the CUDA major was not compared" in r.stdout
    )


# ----------------------------------------------------------------------------- uv.lock, conflicting
# extras


def test_uv_conflicting_accelerator_extras(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    healthy = uv_groups_lock(tmp_path, gate_index, cu130_torch="2.11.0")
    ok = run_envbuild("check-lock", str(healthy), "--json")
    assert ok.rc == 0, ok.output
    envs = _envs(_json(ok))
    assert envs["linux x86_64, extra cpu"] == "2.10.0+cpu"
    assert envs["linux x86_64, extra cu128"] == "2.10.0+cu128"
    assert envs["linux x86_64, extra cu130"] == "2.11.0+cu130"
    # no torch there: listed in a note only
    assert not any("no conflicting extra" in name for name in envs)

    # --group and --environment narrow what is judged
    narrow = run_envbuild(
        "check-lock",
        str(healthy),
        "--offline",
        "--json",
        "--group",
        "cu128",
        "--environment",
        "linux-x86_64",
    )
    assert list(_envs(_json(narrow))) == ["linux x86_64, extra cu128"], narrow.output
    by_marker = run_envbuild(
        "check-lock",
        str(healthy),
        "--offline",
        "--json",
        "--environment",
        "sys_platform == 'darwin' and platform_machine == 'arm64'",
    )
    assert {n.split(",")[0] for n in _envs(_json(by_marker))} == {"macos arm64"}

    # the cu130 extra moves back to 2.10.0 in the branch: a downgrade in that extra only
    lock = _repo_with(tmp_path, healthy)
    shutil.copy(uv_groups_lock(tmp_path, gate_index, cu130_torch="2.10.0"), lock)
    bad = run_envbuild("check-lock", str(lock), "--base", "main", "--offline", "--json")
    assert bad.rc == ExitCode.LOCK, bad.output
    (finding,) = _json(bad)["files"][0]["findings"]
    assert (
        finding["rule"] == "torch-downgrade"
        and "2.11.0+cu130 at main -> 2.10.0+cu130" in finding["reason"]
    )
    assert (
        all(env.endswith("extra cu130") for env in finding["environments"])
        and len(finding["environments"]) == 5
    )


def test_uv_extension_in_one_extra_follows_the_lock_edge(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    ok = uv_groups_lock(
        tmp_path,
        gate_index,
        extension_group="cu128",
        extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE",
    )
    assert run_envbuild("check-lock", str(ok), "--offline").rc == 0
    # the cu12 build in the cu130 extra: judged against that extra's torch, and only there
    bad = uv_groups_lock(
        tmp_path,
        gate_index,
        extension_group="cu130",
        extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE",
    )
    r = run_envbuild("check-lock", str(bad), "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    rules = _rules(_json(r))
    assert [x[:2] for x in rules] == [("extension-abi", "flash-attn")]
    assert all(env.endswith("extra cu130") for env in rules[0][2])


# ----------------------------------------------------------------------------- torch's runtime


@pytest.mark.parametrize("how", ["override", "exclude", "metadata"])
def test_torch_without_its_runtime(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path, how: str
) -> None:
    lock = uv_runtime_missing_lock(tmp_path, gate_index, how=how)
    r = run_envbuild("check-lock", str(lock), "--json")
    assert r.rc == ExitCode.LOCK, r.output
    found = _json(r)["files"][0]["findings"]
    assert [(f["rule"], f["package"]) for f in found] == [("torch-runtime", "torch")], found
    assert (
        "torch 2.10.0+cu128 requires nvidia-nccl-cu12==2.27.5 here, which the lock does not install"
        in found[0]["reason"]
    )
    # the marker: platform_system == "Linux"
    assert found[0]["environments"] == ["linux x86_64", "linux aarch64"]
    # offline with an empty cache it cannot know, and says so instead of passing silently
    offline = run_envbuild(
        "check-lock", str(lock), "--offline", env={"ENVBUILD_CACHE_DIR": str(tmp_path / "empty")}
    )
    assert offline.rc == 0 and "torch's runtime requirements were not checked" in offline.output


# ----------------------------------------------------------------------------- requirements,
# Poetry, pylock


def test_uv_pip_compile_universal(run_envbuild: Run, gate_index: GateIndex, tmp_path: Path) -> None:
    healthy = uv_universal_requirements(tmp_path, gate_index)
    ok = run_envbuild("check-lock", str(healthy), "--offline", "--json")
    assert ok.rc == 0, ok.output
    envs = _envs(_json(ok))
    assert envs["linux x86_64"] == "2.10.0+cu128" and envs["windows amd64"] == "2.10.0"
    lock = _repo_with(tmp_path, healthy, "requirements.txt")
    shutil.copy(uv_universal_requirements(tmp_path, gate_index, linux_torch="2.9.1+cu128"), lock)
    bad = run_envbuild("check-lock", str(lock), "--offline", "--base", "main")
    assert bad.rc == ExitCode.LOCK, bad.output
    line = _line_of(lock, "torch==2.9.1+cu128")
    assert (
        f"{lock}:{line}: torch: torch 2.10.0+cu128 at main -> 2.9.1+cu128 here: a downgrade"
        " [torch-downgrade] in linux x86_64; linux aarch64" in bad.stdout
    )


def test_pip_compile_with_a_prebuilt_extension(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    ok = pip_compile_requirements(
        tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE"
    )
    r = run_envbuild("check-lock", str(ok), "--offline")
    assert r.rc == 0, r.output
    assert "judged for linux x86_64" in r.output  # one machine's resolution: said, not guessed
    bad = pip_compile_requirements(
        tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE"
    )
    r = run_envbuild("check-lock", str(bad), "--offline")
    assert r.rc == ExitCode.LOCK and "[extension-abi] in linux x86_64" in r.stdout, r.output


@pytest.mark.pip_sources  # Poetry, installed from pip's sources once into .cache/tests
def test_poetry_torch_per_marker(run_envbuild: Run, gate_index: GateIndex, tmp_path: Path) -> None:
    healthy = poetry_lock(
        tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE"
    )
    ok = run_envbuild("check-lock", str(healthy), "--offline", "--json")
    assert ok.rc == 0, ok.output
    envs = _envs(_json(ok))
    assert envs["linux x86_64"] == "2.10.0+cu128" and envs["macos arm64"] == "2.10.0"
    # offline and still complete: poetry.lock records torch's own requirements
    assert not any("runtime requirements" in n for n in _json(ok)["files"][0]["notices"])
    bad = poetry_lock(tmp_path, gate_index, extension="flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE")
    r = run_envbuild("check-lock", str(bad), "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    assert [x[:2] for x in _rules(_json(r))] == [("extension-abi", "flash-attn")]


def test_pip_lock_pylock(run_envbuild: Run, gate_index: GateIndex, tmp_path: Path) -> None:
    healthy = pip_lock(tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE")
    ok = run_envbuild("check-lock", str(healthy), "--json")
    assert ok.rc == 0, ok.output
    assert _envs(_json(ok)) == {"linux x86_64": "2.10.0+cu128"}
    bad = pip_lock(tmp_path, gate_index, extension="flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE")
    r = run_envbuild("check-lock", str(bad), "--offline")
    assert r.rc == ExitCode.LOCK and "built for CUDA 13" in r.stdout, r.output
    # torch locked without its dependencies (pip lock --no-deps): the runtime is missing
    bare = pip_lock(tmp_path, gate_index, no_deps=True)
    r = run_envbuild("check-lock", str(bare), "--json")
    assert r.rc == ExitCode.LOCK, r.output
    assert {f["rule"] for f in _json(r)["files"][0]["findings"]} == {"torch-runtime"}


# ----------------------------------------------------------------------------- exceptions and
# output


def test_reviewed_exception_in_pyproject(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    lock = uv_platform_lock(
        tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE"
    )
    pyproject = lock.parent / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        + """
[[tool.envbuild.check-lock.accept]]
rule = "extension-abi"
package = "flash-attn"
environment = "linux x86_64*"
reason = "the image rebuilds flash-attn from source; this wheel is for the dev container"
"""
    )
    r = run_envbuild("check-lock", str(lock), "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output  # linux aarch64 is not covered by the exception
    f = _json(r)["files"][0]
    assert [x["environments"] for x in f["findings"]] == [["linux aarch64"]]
    assert [x["environments"] for x in f["accepted"]] == [["linux x86_64"]]
    assert f["accepted"][0]["accepted"].startswith("the image rebuilds")
    comment = tmp_path / "comment.md"
    narrowed = run_envbuild(
        "check-lock",
        str(lock),
        "--offline",
        "--environment",
        "linux-x86_64",
        "--markdown-file",
        str(comment),
    )
    assert narrowed.rc == 0, narrowed.output
    md = comment.read_text()
    assert md.startswith("### envbuild check-lock: ✅ ok, 1 accepted\n"), md
    assert (
        "| linux x86_64 | 2.10.0+cu128 | ok |" in md
        and "~~extension-abi~~ flash-attn: accepted: the image" in md
    )
    assert "linux x86_64" in narrowed.stdout  # the console table is still printed
    # a typo in the exceptions is a usage error with a did-you-mean, not a silent pass
    pyproject.write_text(
        pyproject.read_text().replace('rule = "extension-abi"', 'rule = "extension-ab"')
    )
    typo = run_envbuild("check-lock", str(lock), "--offline")
    assert typo.rc == ExitCode.CONFIG and "did you mean 'extension-abi'" in typo.stderr, typo.output


def test_the_check_in_process_matches_the_cli(gate_index: GateIndex, tmp_path: Path) -> None:
    lock = uv_groups_lock(tmp_path, gate_index)
    report = check_file(lock, Policy(python="3.12"), offline=True)
    assert report.ok and len(report.environments) == 15
    assert {r.torch for r in report.environments} == {"2.10.0+cpu", "2.10.0+cu128", "2.10.0+cu130"}


def test_an_environment_that_disappears_is_named(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    lock = _repo_with(tmp_path, uv_platform_lock(tmp_path, gate_index))
    # the branch limits the project to Linux (`[tool.uv] environments`): macOS and Windows lose
    # torch
    shutil.copy(
        uv_platform_lock(tmp_path, gate_index, environments=["sys_platform == 'linux'"]), lock
    )
    r = run_envbuild("check-lock", str(lock), "--base", "main", "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    (finding,) = _json(r)["files"][0]["findings"]
    assert (
        finding["rule"] == "torch-gone"
        and "torch 2.10.0 at main; this lock no longer covers" in finding["reason"]
    )
    assert finding["environments"] == ["macos arm64", "macos x86_64", "windows amd64"]


def test_requirements_a_project_supplies_by_hand_are_read(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    """``[[tool.uv.dependency-metadata]]`` (common for flash-attn, mamba-ssm): uv resolves with it
    and records it in the lock; forced past it with an override, the gate reads it offline."""
    lock = uv_platform_lock(
        tmp_path,
        gate_index,
        extension="flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE",
        overrides=["torch==2.10.0"],
        extra_toml="""
[[tool.uv.dependency-metadata]]
name = "flash-attn"
version = "2.8.3+cu12torch2.10cxx11abitrue"
requires-dist = ["torch>=2.11", "einops-like"]
""",
    )
    assert "[[manifest.dependency-metadata]]" in lock.read_text()
    r = run_envbuild("check-lock", str(lock), "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    assert [x[:2] for x in _rules(_json(r))] == [("torch-requirement", "flash-attn")]
    assert (
        "requires torch>=2.11, which the locked torch 2.10.0+cu128 does not satisfy"
        in _json(r)["files"][0]["findings"][0]["reason"]
    )
    # the same with a package whose metadata is on its index (read from the fixture index, cached)
    forced = uv_platform_lock(
        tmp_path, gate_index, deps=["needs-torch-211==1.0"], overrides=["torch==2.10.0"]
    )
    r = run_envbuild("check-lock", str(forced), "--json")
    assert r.rc == ExitCode.LOCK, r.output
    assert {(f["rule"], f["package"]) for f in _json(r)["files"][0]["findings"]} == {
        ("torch-requirement", "needs-torch-211")
    }


def test_a_narrowing_that_matches_nothing_is_a_usage_error(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    """A typo in --group must not turn the gate green by judging no environment at all."""
    lock = uv_groups_lock(tmp_path, gate_index)
    r = run_envbuild("check-lock", str(lock), "--offline", "--group", "cuda13")
    assert r.rc == ExitCode.CONFIG, r.output
    assert (
        "no environment of this lock matches" in r.stderr
        and "extra cpu, extra cu128, extra cu130" in r.stderr
    )
    assert "Traceback" not in r.output


def test_a_torch_no_environment_installs_is_named_as_locked(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    """Megatron-LM's pattern (d98e8a64dd): ``override-dependencies = ["torch; sys_platform ==
    'never'"]`` keeps the base image's torch; uv still locks a torch package that no environment
    installs. The gate passes and says so, instead of claiming torch is not in the lock."""
    lock = uv_platform_lock(tmp_path, gate_index, overrides=["torch; sys_platform == 'never'"])
    res = run_envbuild("check-lock", str(lock), "--offline")
    assert res.rc == 0, res.output
    assert "is locked but no environment installs it" in res.output, res.output
    # nothing to adopt or install
    res = run_envbuild("plan", "--lock", str(lock), "--environment", "linux-x86_64")
    assert res.rc == 2 and "leaves torch to a base image" in res.stderr, res.output


def test_base_findings_are_filed_under_the_heads_rows(
    run_envbuild: Run, gate_index: GateIndex, tmp_path: Path
) -> None:
    """The head splits linux by Python (a dependency only 3.12+ takes), the base did not: the
    downgrade found in the base's environments is named by the head's rows, counted in them, and no
    row of a downgraded environment says ok (PipelineRL 101c31a against 2f2d2ac did)."""
    lock = _repo_with(tmp_path, uv_platform_lock(tmp_path, gate_index))
    shutil.copy(
        uv_platform_lock(
            tmp_path,
            gate_index,
            linux_torch="2.9.1",
            deps=["einops-like==0.8.1; python_version >= '3.12'"],
        ),
        lock,
    )
    r = run_envbuild("check-lock", str(lock), "--base", "main", "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    doc = _json(r)["files"][0]
    rows = {e["name"]: e for e in doc["environments"]}
    (finding,) = [f for f in doc["findings"] if f["rule"] == "torch-downgrade"]
    assert finding["environments"] and set(finding["environments"]) <= set(rows), (
        finding,
        sorted(rows),
    )
    linux = [name for name in rows if name.startswith("linux")]
    assert linux and all(rows[name]["findings"] >= 1 for name in linux), rows
    table = run_envbuild("check-lock", str(lock), "--base", "main", "--offline")
    assert not [
        ln
        for ln in table.stdout.splitlines()
        if ln.lstrip().startswith("linux") and ln.rstrip().endswith(" ok")
    ]
