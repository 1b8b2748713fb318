"""check-lock: locks that must pass and locks that must fail, one per rule, with the exact
finding."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lockhelpers import lock_env, manifest, resync, save_manifest, step_file
from support.fixtures import NIGHTLY_TORCH, EnvbuildResult, installer_env

GOOD = [
    {"name": "helpers", "packages": ["fla-core-like==0.4.2"]},
    {"name": "fla", "packages": ["needs-fla-core==1.0"], "no_deps": True},
]


def _lock(run_envbuild: Callable[..., EnvbuildResult], stack: Path, tmp_path: Path) -> Path:
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    return stack.parent


@pytest.fixture
def good(stack_locks: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """``write_stack(GOOD)`` and its lock (made once per worker, copied: ``stack_locks``)."""
    stack = stack_locks(GOOD, tmp_path)
    return stack, stack.parent


def check(
    run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path, stack: Path, *extra: str
) -> tuple[int, list[dict[str, Any]], list[str]]:
    r = run_envbuild("check-lock", "--stack", stack, "--json", *extra, env=lock_env(tmp_path))
    assert "Traceback" not in r.output, r.output
    data = json.loads(r.stdout)
    findings = [f for rep in data["reports"] for f in rep["findings"]]
    notices = [n for rep in data["reports"] for n in rep["notices"]]
    return r.rc, findings, notices


def test_a_good_lock_passes_static_and_dry_run(
    good: tuple[Path, Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack, _ = good
    rc, findings, notices = check(run_envbuild, tmp_path, stack)
    assert (rc, findings) == (0, [])
    rc, findings, notices = check(run_envbuild, tmp_path, stack, "--offline")
    assert (rc, findings) == (0, [])
    assert any("dry-run resolution skipped" in n for n in notices)


def _culprit(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    package: str,
) -> tuple[Path, Path]:
    """A step with dependencies whose lock was made by hand: locked as no_deps, then flipped."""
    stack = write_stack([{"name": "culprit", "packages": [package], "no_deps": True}])
    folder = _lock(run_envbuild, stack, tmp_path)
    stack.write_text(stack.read_text().replace("no_deps = true\n", ""))

    def flip(data: dict[str, Any]) -> None:
        data["steps"][1]["flags"]["no_deps"] = False

    resync(folder, stack, flip)
    return stack, folder


@pytest.mark.parametrize(
    "package, rule, reason",
    [
        (
            "needs-torch-212==1.0",
            "torch-requirement",
            (
                f"needs-torch-212 1.0 requires torch>=2.12, which the pinned torch {NIGHTLY_TORCH}"
                " does not satisfy"
            ),
        ),
        (
            "vision-pin==1.0",
            "torch-requirement",
            (
                f"vision-pin 1.0 requires torch==2.12.0, which the pinned torch {NIGHTLY_TORCH}"
                " does not satisfy"
            ),
        ),
        (
            "mamba-like==1.0",
            "pypi-triton",
            (
                "mamba-like 1.0 requires triton (PyPI triton), which installs next to"
                " pytorch-triton from the baseline"
            ),
        ),
    ],
)
def test_static_rules_on_torch_requirements(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    package: str,
    rule: str,
    reason: str,
) -> None:
    stack, _ = _culprit(write_stack, run_envbuild, tmp_path, package)
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline")
    assert rc == 8
    assert [f["rule"] for f in findings] == [rule]
    assert findings[0]["package"] == package.split("==")[0]
    assert findings[0]["file"].endswith("02-culprit.txt")
    assert findings[0]["reason"].startswith(reason)


@pytest.mark.parametrize(
    "package, installs",
    [("needs-torch-212==1.0", "torch 2.13.0"), ("mamba-like==1.0", "PyPI triton 3.8.0")],
)
def test_dry_run_finds_what_the_resolver_would_install(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    package: str,
    installs: str,
) -> None:
    stack, _ = _culprit(write_stack, run_envbuild, tmp_path, package)
    rc, findings, _ = check(run_envbuild, tmp_path, stack)
    assert rc == 8
    dry = [f["reason"] for f in findings if f["rule"] == "dry-run-protected"]
    assert any(f"would install {installs}" in r for r in dry), findings


def _add_line(folder: Path, step: str, line: str) -> None:
    path = step_file(folder, step)
    path.write_text(path.read_text() + line + "\n")
    resync(folder)


def test_torch_in_a_later_step(
    good: tuple[Path, Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack, folder = good
    torch = step_file(folder, "torch").read_text()
    block = re.search(r"^torch==.*?(?=^\S|\Z)", torch, re.M | re.S)
    assert block
    _add_line(folder, "helpers", block.group(0).rstrip())
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline")
    assert rc == 8
    assert [(f["rule"], f["package"]) for f in findings] == [("protected-after-baseline", "torch")]
    assert findings[0]["reason"].startswith(
        f"torch {NIGHTLY_TORCH} is in step 'helpers', after the baseline"
    )


def test_torch_pinned_twice_differently(
    good: tuple[Path, Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack, folder = good
    _add_line(folder, "helpers", "torch==2.13.0 --hash=sha256:" + "0" * 64)
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline")
    assert rc == 8
    reasons = {(f["rule"], f["reason"]) for f in findings}
    assert (
        "protected-pin-mismatch",
        f"pinned to 2.13.0, but abi.version is {NIGHTLY_TORCH}",
    ) in reasons
    assert any(
        r == "protected-pin-mismatch"
        and t.startswith(f"pinned to 2.13.0 here but to {NIGHTLY_TORCH} in ")
        for r, t in reasons
    )
    assert "protected-after-baseline" in {f["rule"] for f in findings}


def test_stale_lock_missing_hash_and_missing_file(
    good: tuple[Path, Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack, folder = good
    helpers = step_file(folder, "helpers")
    text = re.sub(
        r"(einops-like==0\.8\.1) \\\n(\s+--hash=\S+ \\\n)*\s+--hash=\S+\n",
        r"\1\n",
        helpers.read_text(),
    )
    helpers.write_text(text)
    resync(folder)
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline")
    assert rc == 8 and [(f["rule"], f["package"]) for f in findings] == [
        ("missing-hash", "einops-like")
    ]

    helpers.unlink()
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline")
    assert [(f["rule"], f["file"].endswith("02-helpers.txt")) for f in findings] == [
        ("missing-file", True)
    ]

    stack.write_text(
        stack.read_text().replace(
            '"needs-fla-core==1.0"', '"needs-fla-core==1.0", "einops-like==0.8.1"'
        )
    )
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline")
    assert "stale-lock" in {f["rule"] for f in findings}
    assert any("run `envbuild lock" in f["reason"] for f in findings if f["rule"] == "stale-lock")


def test_hand_edited_file_is_stale(
    good: tuple[Path, Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack, folder = good
    path = step_file(folder, "fla")
    path.write_text(path.read_text() + "\n")
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline")
    assert rc == 8 and [f["rule"] for f in findings] == ["stale-lock"]
    assert "changed after `envbuild lock` wrote it" in findings[0]["reason"]


def _git(folder: Path, *args: str) -> str:
    env = {
        **installer_env(folder / ".home"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", *args], cwd=folder, check=True, capture_output=True, text=True, env=env
    ).stdout


@pytest.mark.parametrize(
    "base_version, rule, words",
    [
        ("2.12.0", "torch-downgrade", "a downgrade"),
        ("2.12.0.dev20260405+cu130", "torch-swap", "another local tag (+cu130 -> +cu132)"),
        ("2.11.0", None, None),
    ],
)
def test_base_ref_downgrade_or_swap(
    good: tuple[Path, Path],
    run_envbuild: Callable[..., EnvbuildResult],
    tmp_path: Path,
    base_version: str,
    rule: str | None,
    words: str | None,
) -> None:
    stack, folder = good
    real = (folder / "lock.json").read_text()
    data = manifest(folder)
    data["abi"]["version"] = base_version
    for p in data["steps"][0]["packages"]:
        if p["name"] == "torch":
            p["version"] = base_version
    save_manifest(folder, data)
    _git(folder, "init", "-q", "-b", "main")
    _git(folder, "add", "lock.json")
    _git(folder, "commit", "-q", "-m", "base")
    (folder / "lock.json").write_text(real)
    rc, findings, _ = check(run_envbuild, tmp_path, stack, "--offline", "--base", "HEAD")
    if rule is None:
        assert (rc, findings) == (0, [])
        return
    assert rc == 8 and [f["rule"] for f in findings] == [rule] and words is not None
    assert findings[0]["reason"] == (
        f"torch {base_version} at HEAD -> {NIGHTLY_TORCH} here: "
        + (
            words
            if rule == "torch-downgrade"
            else f"the same version with {words}, a swapped build"
        )
    )


def test_base_ref_that_does_not_exist(
    good: tuple[Path, Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack, folder = good
    _git(folder, "init", "-q", "-b", "main")
    r = run_envbuild(
        "check-lock", "--stack", stack, "--offline", "--base", "nope", env=lock_env(tmp_path)
    )
    assert r.rc == 2 and "no such git revision" in r.stderr and "Traceback" not in r.output


def test_text_output_is_one_line_per_finding(
    write_stack: Callable[..., Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    stack, _ = _culprit(write_stack, run_envbuild, tmp_path, "vision-pin==1.0")
    r = run_envbuild("check-lock", "--stack", stack, "--offline", env=lock_env(tmp_path))
    assert r.rc == 8
    lines = [ln for ln in r.stdout.splitlines() if "[torch-requirement]" in ln]
    assert lines == [
        "02-culprit.txt: vision-pin: vision-pin 1.0 requires torch==2.12.0, "
        f"which the pinned torch {NIGHTLY_TORCH} does not satisfy (it would replace it; make the "
        "step no_deps or pin another version) [torch-requirement]"
    ]


def test_shipped_profiles_pass_offline(tmp_path: Path) -> None:
    """``check-lock --offline`` passes the shipped profiles with no network at all: run in a
    network namespace without an interface where ``unshare -rn`` works (how fast the check is,
    bench/bench_check_lock.py measures)."""
    from support.fixtures import REPO_ROOT

    netns = ["unshare", "-rn"]
    if not shutil.which("unshare") or subprocess.run([*netns, "true"], check=False).returncode:
        netns = []
    out = subprocess.run(
        [*netns, sys.executable, "-m", "envbuild", "check-lock", "--offline"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=installer_env(tmp_path / "home", lock_env(tmp_path)),
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cpu: lock ok" in out.stdout + out.stderr


def test_own_lock_findings_go_through_the_gate_writers(
    good: tuple[Path, Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    """A line without a hash is named by file and line, in the console line, the GitHub annotation
    and the markdown report, the same writers as for any lockfile's findings."""
    stack, folder = good
    helpers = step_file(folder, "helpers")
    text = re.sub(
        r"(einops-like==0\.8\.1) \\\n(\s+--hash=\S+ \\\n)*\s+--hash=\S+\n",
        r"\1\n",
        helpers.read_text(),
    )
    helpers.write_text(text)
    resync(folder)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("einops-like=="))
    report = tmp_path / "report.md"
    r = run_envbuild(
        "check-lock",
        "--stack",
        stack,
        "--offline",
        "--annotations",
        "github",
        "--markdown-file",
        report,
        env=lock_env(tmp_path),
    )
    assert r.rc == 8, r.output
    shown = [ln for ln in r.stdout.splitlines() if ln.endswith("[missing-hash]")]
    assert len(shown) == 1 and re.fullmatch(
        rf"\S*02-helpers\.txt:{line}: einops-like: no --hash .*", shown[0]
    ), shown
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith("::error ")]
    assert len(errors) == 1, r.stdout
    assert (
        f"02-helpers.txt,line={line},title=envbuild check-lock [missing-hash]::einops-like: no"
        " --hash" in errors[0]
    )
    md = report.read_text()
    assert md.startswith("### envbuild check-lock: ❌ 1 finding(s)\n"), md
    assert re.search(
        rf"^- \*\*missing-hash\*\* `\S*02-helpers\.txt:{line}`: einops-like: no --hash", md, re.M
    ), md
    data = json.loads(
        run_envbuild(
            "check-lock", "--stack", stack, "--offline", "--json", env=lock_env(tmp_path)
        ).stdout
    )
    assert data["schema"] == 1 and "missing-hash" in data["rules"] and "files" not in data
    [finding] = data["reports"][0]["findings"]
    assert (finding["rule"], finding["package"], finding["line"]) == (
        "missing-hash",
        "einops-like",
        line,
    )


@pytest.mark.parametrize(
    "before, after, want",
    [
        (
            "2.12.0",
            "2.11.0",
            ("torch-downgrade", "torch 2.12.0 at main -> 2.11.0 here: a downgrade"),
        ),
        (
            "2.12.0+cu130",
            "2.12.0+cu128",
            (
                "torch-swap",
                (
                    "torch 2.12.0+cu130 at main -> 2.12.0+cu128 here: the same "
                    "version with another local tag (+cu130 -> +cu128), a swapped build"
                ),
            ),
        ),
        (
            "2.12.0",
            "2.12.0+cu132",
            (
                "torch-swap",
                (
                    "torch 2.12.0 at main -> 2.12.0+cu132 here: the same version with "
                    "another local tag (none -> +cu132), a swapped build"
                ),
            ),
        ),
        ("2.11.0", "2.12.0", None),
        ("2.12.0+cu132", "2.12.0+cu132", None),
        ("not a version", "2.12.0", None),
    ],
)
def test_one_judgement_of_a_torch_move_for_both_kinds_of_lock(
    before: str, after: str, want: tuple[str, str] | None
) -> None:
    """``--base``: envbuild's own locks and any lockfile judge a torch move by the same function."""
    from envbuild.gate.rules.history import moved

    assert moved("torch", before, after, "main") == want
