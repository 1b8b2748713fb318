"""Day 2 of a lock (issue 24): pins move only when asked, and every step agrees with the ones before
it.

Real pip-compile and uv against the local HTTP index. A package gets a new release between two
locks (new wheels dropped into the served folder); a step pair fights over ``numpy-like``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from lockhelpers import lock_env, manifest, resync, step_file
from support.fixtures import EnvbuildResult, Venv
from support.index import IndexServer

from envbuild.stacklock.model import parse_requirements_text


def _pins(folder: Path, step: str) -> dict[str, str | None]:
    return {
        r.name: r.version
        for r in parse_requirements_text(step_file(folder, step).read_text(), step)
    }


@pytest.fixture
def day2_index(
    tmp_path: Path, wheel_factory: Callable[..., Path], index_server: Callable[..., IndexServer]
) -> IndexServer:
    wheel_factory("tqdm-like", "4.66.6", repo="day2")
    wheel_factory("app-like", "1.0", repo="day2", requires=["helper-like>=1.0"])
    wheel_factory("helper-like", "1.0", repo="day2")
    wheel_factory("numpy-like", "2.2.6", repo="day2")
    wheel_factory("numpy-like", "2.4.6", repo="day2")
    wheel_factory("pandas-like", "2.2.3", repo="day2", requires=["numpy-like>=2.3"])
    wheel_factory("tool-like", "1.0", repo="day2", requires=["numpy-like"])
    return index_server({"day2": tmp_path / "wheels" / "day2"})


def _stack(
    write_stack: Callable[..., Path], index: IndexServer, steps: list[dict[str, object]]
) -> Path:
    url = index.simple_url("day2")
    return write_stack([{**s, "index_url": url} for s in steps])


# pip-compile's variant in make test-thorough (the same rule; uv's stays in make test)
@pytest.mark.parametrize(
    "resolver", [pytest.param("pip-compile", marks=pytest.mark.thorough), "uv"]
)
def test_pins_move_only_when_asked(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    day2_index: IndexServer,
    wheel_factory: Callable[..., Path],
    tmp_path: Path,
    resolver: str,
) -> None:
    env = lock_env(tmp_path)
    steps: list[dict[str, object]] = [
        {"name": "rest", "packages": ["tqdm-like>=4.60,<4.67", "app-like"]}
    ]
    stack = _stack(write_stack, day2_index, steps)
    lock = ("lock", "--stack", stack, "--resolver", resolver)
    r = run_envbuild(*lock, env=env)
    assert r.rc == 0, r.output
    folder = stack.parent
    assert _pins(folder, "rest") == {"tqdm-like": "4.66.6", "app-like": "1.0", "helper-like": "1.0"}
    before = {p: p.read_bytes() for p in folder.glob("*.txt")} | {
        folder / "lock.json": (folder / "lock.json").read_bytes()
    }

    # new releases appear on the index between two locks
    wheel_factory("tqdm-like", "4.70.1", repo="day2")
    wheel_factory("helper-like", "1.1", repo="day2")

    # an unchanged spec: current, nothing resolved, nothing written
    r = run_envbuild("lock", "--stack", stack, "--check", env=env)
    assert r.rc == 0, r.output
    assert "current" in r.output
    r = run_envbuild(*lock, "--json", env=env)
    assert r.rc == 0, r.output
    out = json.loads(r.stdout)
    assert out["up_to_date"] is True and out["resolved"] == [] and out["changes"] == []
    assert {p: p.read_bytes() for p in before} == before

    # widen the spec: the step is stale; the relock keeps every pin that still satisfies it
    stack.write_text(stack.read_text().replace('"tqdm-like>=4.60,<4.67"', '"tqdm-like>=4.60"'))
    r = run_envbuild("lock", "--stack", stack, "--check", "--json", env=env)
    assert r.rc == 8, r.output  # a stale lock: 8, as the exit-code table says
    assert [s["step"] for s in json.loads(r.stdout)["stale"]] == ["rest"]
    r = run_envbuild(*lock, "--json", env=env)
    assert r.rc == 0, r.output
    out = json.loads(r.stdout)
    assert out["resolved"] == ["rest"] and out["kept"] == ["torch"] and out["changes"] == []
    assert _pins(folder, "rest") == {"tqdm-like": "4.66.6", "app-like": "1.0", "helper-like": "1.0"}
    assert manifest(folder)["steps"][1]["requirements"] == ["tqdm-like>=4.60", "app-like"]

    # --upgrade-package moves that one package, and says so
    r = run_envbuild(*lock, "--upgrade-package", "tqdm-like", "--json", env=env)
    assert r.rc == 0, r.output
    out = json.loads(r.stdout)
    assert _pins(folder, "rest") == {"tqdm-like": "4.70.1", "app-like": "1.0", "helper-like": "1.0"}
    assert out["changes"] == [
        {
            "step": "rest",
            "package": "tqdm-like",
            "change": "changed",
            "old": "4.66.6",
            "new": "4.70.1",
            "reason": "upgrade asked",
            "by": [],
        }
    ]

    # NAME==VERSION moves it to exactly that version; --upgrade moves the rest; the table says why
    r = run_envbuild(*lock, "-P", "tqdm-like==4.66.6", env=env)
    assert r.rc == 0, r.output
    assert _pins(folder, "rest")["tqdm-like"] == "4.66.6"
    assert "upgrade asked" in r.output
    r = run_envbuild(*lock, "--upgrade", "--markdown", env=env)
    assert r.rc == 0, r.output
    assert _pins(folder, "rest") == {"tqdm-like": "4.70.1", "app-like": "1.0", "helper-like": "1.1"}
    assert "| `rest` | `helper-like` | 1.0 | 1.1 | upgrade asked |" in r.stdout

    # a name no step pins is a usage error, with a suggestion
    r = run_envbuild(*lock, "-P", "tqdm-lik", env=env)
    assert r.rc == 2 and "did you mean 'tqdm-like'" in r.stderr, r.output


def test_needed_by_another_pin_and_spec_changed(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    day2_index: IndexServer,
    tmp_path: Path,
) -> None:
    env = lock_env(tmp_path)
    stack = _stack(
        write_stack,
        day2_index,
        [{"name": "rest", "packages": ["tool-like==1.0", "numpy-like<2.4"]}],
    )
    assert run_envbuild("lock", "--stack", stack, env=env).rc == 0
    assert _pins(stack.parent, "rest")["numpy-like"] == "2.2.6"
    stack.write_text(
        stack.read_text().replace('"tool-like==1.0", "numpy-like<2.4"', '"pandas-like==2.2.3"')
    )
    r = run_envbuild("lock", "--stack", stack, "--json", env=env)
    assert r.rc == 0, r.output
    changes = {c["package"]: c for c in json.loads(r.stdout)["changes"]}
    assert (
        changes["pandas-like"]["change"] == "added"
        and changes["pandas-like"]["reason"] == "spec changed"
    )
    assert (
        changes["tool-like"]["change"] == "removed"
        and changes["tool-like"]["reason"] == "spec changed"
    )
    assert changes["numpy-like"]["old"] == "2.2.6" and changes["numpy-like"]["new"] == "2.4.6"
    # the step named it, and no longer does
    assert changes["numpy-like"]["reason"] == "spec changed"


# make test-thorough: a relock of three steps; the other day-2 lock tests stay
@pytest.mark.thorough
def test_a_later_step_agrees_with_the_earlier_ones(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    day2_index: IndexServer,
    tmp_path: Path,
    provision: Callable[..., EnvbuildResult],
    provisioned_venv: Venv,
) -> None:
    env = lock_env(tmp_path)
    steps: list[dict[str, object]] = [
        {"name": "a", "packages": ["numpy-like==2.2.6"]},
        {"name": "b", "packages": ["pandas-like==2.2.3"]},
    ]
    stack = _stack(write_stack, day2_index, steps)
    r = run_envbuild("lock", "--stack", stack, env=env)
    assert r.rc == 8, r.output
    assert (
        "step 'b' does not agree with the steps before it: it needs numpy-like 2.4.6 (pandas-like"
        " 2.2.3 requires numpy-like>=2.3), and step 'a' pinned numpy-like 2.2.6" in r.stderr
    )
    assert 'replaces = ["numpy-like"]' in r.stderr and "Traceback" not in r.output

    # without a lock, the guard catches what the lock would have refused: step b replaced a's
    # numpy-like
    r = provision(stack, "--no-lock")
    assert r.rc == 6, r.output
    assert "step 'b' changed numpy-like 2.2.6 -> 2.4.6, which step 'a' installed" in r.stderr

    # the spec says so for step b: the lock pins b's numpy-like, plan shows it, provision allows it
    stack.write_text(
        stack.read_text().replace(
            'packages = ["pandas-like==2.2.3"]',
            'packages = ["pandas-like==2.2.3"]\nreplaces = ["numpy-like"]',
        )
    )
    r = run_envbuild("lock", "--stack", stack, env=env)
    assert r.rc == 0, r.output
    assert _pins(stack.parent, "b") == {"pandas-like": "2.2.3", "numpy-like": "2.4.6"}
    r = run_envbuild("plan", "--stack", stack, "--backend", "pip", "--json", env=env)
    assert [s.get("replaces") for s in json.loads(r.stdout)["steps"]] == [[], [], ["numpy-like"]]
    r = provision(stack)
    assert r.rc == 0, r.output
    assert provisioned_venv.version("numpy-like") == "2.4.6"

    # check-lock holds it too: the same lock under a spec without the allowance is a finding
    stack.write_text(stack.read_text().replace('\nreplaces = ["numpy-like"]', ""))
    resync(stack.parent, stack)
    r = run_envbuild("check-lock", "--stack", stack, "--offline", env=env)
    assert r.rc == 8 and "[step-disagrees]" in r.stdout, r.output
    assert "pinned to 2.4.6 here, but step 'a' installs numpy-like 2.2.6" in r.stdout


def test_a_later_step_does_not_carry_the_earlier_pins(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    day2_index: IndexServer,
    tmp_path: Path,
) -> None:
    env = lock_env(tmp_path)
    steps: list[dict[str, object]] = [
        {"name": "a", "packages": ["numpy-like==2.2.6"]},
        {"name": "b", "packages": ["tool-like==1.0"]},
    ]
    stack = _stack(write_stack, day2_index, steps)
    r = run_envbuild("lock", "--stack", stack, env=env)
    assert r.rc == 0, r.output
    # tool-like takes any numpy-like: resolved under step a's pin (not the newest), and not repeated
    assert _pins(stack.parent, "b") == {"tool-like": "1.0"}


def test_no_op_relock_resolves_nothing(
    locked_cpu_like: Path,
    run_envbuild: Callable[..., EnvbuildResult],
    day2_index: IndexServer,
    tmp_path: Path,
) -> None:
    """A lock current for its spec: ``lock`` says so and does nothing else: no request to the
    index (nothing resolved) and no file written (each keeps its bytes and its time). How fast
    that is, bench/bench_relock.py measures."""
    folder = locked_cpu_like.parent
    files = sorted([*folder.glob("*.txt"), folder / "lock.json", folder / "pylock.toml"])
    before = {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files}
    day2_index.clear_requests()
    r = run_envbuild("lock", "--stack", locked_cpu_like, env=lock_env(tmp_path))
    assert r.rc == 0 and "nothing to do" in r.output, r.output
    assert day2_index.requested() == []
    assert {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files} == before
    assert sorted(p for p in folder.iterdir() if p.suffix in (".txt", ".json", ".toml")) == sorted(
        [*files, locked_cpu_like]
    )


@pytest.fixture
def locked_cpu_like(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    day2_index: IndexServer,
    tmp_path: Path,
) -> Path:
    stack = _stack(
        write_stack,
        day2_index,
        [{"name": "a", "packages": ["numpy-like==2.2.6"]}, {"name": "b", "packages": ["app-like"]}],
    )
    assert run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path)).rc == 0
    return stack
