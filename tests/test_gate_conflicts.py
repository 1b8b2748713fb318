"""The gate's environments are the ones the locker installs: proof against real uv.

Each lock here is made by real ``uv lock`` (offline, against the test index); each selection of
extras/groups is asked of real ``uv export --frozen``. The gate must leave out exactly the
selections uv refuses ("incompatible with the declared conflicts") and, in every other one,
judge the torch uv installs.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fixtures import EnvbuildResult
from support.gatelocks import PROJECT, GateIndex, _folder, _run, _toml_list, _uv_indexes, uv_bin

from envbuild.errors import ExitCode
from envbuild.gate.environments import Narrow, make_space
from envbuild.gate.formats import parse

pytestmark = pytest.mark.slow

LINUX = "linux-x86_64"
TORCHES = ("2.10.0", "2.9.1")  # both on the PyPI stand-in


def _project(
    tmp: Path,
    idx: GateIndex,
    *,
    extras: Mapping[str, Sequence[str]],
    groups: Mapping[str, Sequence[str]],
    conflicts: Sequence[Sequence[tuple[str, str]]],
    deps: Sequence[str] = ("einops-like==0.8.1",),
    default_groups: Sequence[str] | None = None,
) -> Path:
    """A pyproject + ``uv lock``: ``conflicts`` items are (kind, name): ("extra", "a"), ("group",
    "dev"), ("project", "")."""
    folder = _folder(tmp, "uv-conflicts")

    def item(kind: str, name: str) -> str:
        return f'{{ package = "{PROJECT}" }}' if kind == "project" else f'{{ {kind} = "{name}" }}'

    sets = ", ".join("[" + ", ".join(item(k, n) for k, n in s) + "]" for s in conflicts)
    extras_toml = "\n".join(f"{k} = {_toml_list(v)}" for k, v in extras.items())
    groups_toml = "\n".join(f"{k} = {_toml_list(v)}" for k, v in groups.items())
    (folder / "pyproject.toml").write_text(f"""[project]
name = "{PROJECT}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = {_toml_list(list(deps))}

[project.optional-dependencies]
{extras_toml}

[dependency-groups]
{groups_toml}

[tool.uv]
package = false
conflicts = [{sets}]
{f"default-groups = {_toml_list(list(default_groups))}" if default_groups is not None else ""}

{_uv_indexes(idx, [])}""")
    _run([uv_bin(), "lock", "--no-cache"], folder, tmp, project_config=True)
    return folder / "uv.lock"


def _uv_export(lock: Path, tmp: Path, args: Sequence[str]) -> str | None:
    """The torch ``uv export --frozen`` installs on Linux for ``args`` ("" for none); None when uv
    refuses."""
    try:
        out = _run(
            [uv_bin(), "export", "--frozen", "--no-hashes", "--no-header", "--no-annotate", *args],
            lock.parent,
            tmp,
            project_config=True,
        )
    except AssertionError as exc:
        said = " ".join(str(exc).split())  # uv wraps its message at the terminal's width
        assert "incompatible with the" in said and "conflicts" in said, exc
        return None
    torches = [
        ln.split(";")[0].strip().split("==")[1]
        for ln in out.splitlines()
        if ln.startswith("torch==")
    ]
    assert len(torches) <= 1, out
    return torches[0] if torches else ""


def _gate(lock: Path) -> dict[frozenset[str], str]:
    """Per selection the gate judges (as the set of item words), the torch it finds on linux x86_64,
    python 3.12."""
    parsed = parse(lock, lock.read_text(), "uv.lock")
    space = make_space(parsed, Narrow(environment=("linux-x86_64",), python=("3.12",)))
    reach = parsed.walk(space)
    out: dict[frozenset[str], str] = {}
    for j in space.bits(space.active):
        chosen = space.selections[j % space.n_sel]
        words = frozenset(it.words for i, it in enumerate(space.items) if chosen >> i & 1)
        torches = {e.version for e in reach.members(j).entries if e.name == "torch"}
        assert len(torches) <= 1, (words, torches)
        out[words] = next(iter(torches), "") or ""
    return out


def _compare_with_uv(
    lock: Path, tmp: Path, items: Sequence[str], free: Sequence[str], sets: object
) -> None:
    """Every subset of ``items`` ("dev" a group, the rest extras) through uv export and the gate."""
    gate = _gate(lock)
    for size in range(len(items) + 1):
        for chosen in itertools.combinations(items, size):
            args = [
                "--no-default-groups",
                *free,
                *(f"--group={n}" if n == "dev" else f"--extra={n}" for n in chosen),
            ]
            words = frozenset(("group " if n == "dev" else "extra ") + n for n in chosen)
            uv = _uv_export(lock, tmp, args)
            if uv is None:
                assert words not in gate, (sets, chosen, "uv refuses it; the gate judges it")
            else:
                assert words in gate, (sets, chosen, "uv installs it; the gate leaves it out")
                assert gate[words] == uv, (sets, chosen, gate[words], uv)


@st.composite
def _graphs(draw: st.DrawFn) -> tuple[dict[str, str], list[list[str]], bool]:
    """2-4 extras (and maybe the dev group), 1-3 conflict sets of 2-3 items, torch pins uv can lock:
    items that never share a set pin the same torch (uv would refuse to lock anything else)."""
    names = ["a", "b", "c", "d"][: draw(st.integers(2, 4))]
    pool = [*names, "dev"] if draw(st.booleans()) else names
    sets = draw(
        st.lists(
            st.lists(st.sampled_from(pool), min_size=2, max_size=3, unique=True),
            min_size=1,
            max_size=3,
        )
    )
    pins = {n: draw(st.sampled_from([*TORCHES, "none"])) for n in pool}
    together = {
        (x, y) for x in pool for y in pool if x != y and not any(x in s and y in s for s in sets)
    }
    changed = True
    while changed:  # agree where uv would have to install both
        changed = False
        for x, y in sorted(together):
            if "none" not in (pins[x], pins[y]) and pins[x] != pins[y]:
                pins[y] = pins[x]
                changed = True
    return pins, sets, "dev" in pool


def _reqs(pin: str) -> list[str]:
    return ["trainer-utils==1.0"] if pin == "none" else [f"torch=={pin}", "trainer-utils==1.0"]


@settings(
    max_examples=8,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(graph=_graphs())
def test_selections_equal_what_uv_export_accepts_and_installs(
    graph: tuple[dict[str, str], list[list[str]], bool], gate_index: GateIndex, tmp_path: Path
) -> None:
    pins, sets, with_dev = graph
    extras = {n: _reqs(p) for n, p in pins.items() if n != "dev"}
    groups = {"dev": _reqs(pins["dev"])} if with_dev else {"lint": ["filelock-like==3.0"]}
    conflicts = [[("group" if n == "dev" else "extra", n) for n in s] for s in sets]
    lock = _project(tmp_path, gate_index, extras=extras, groups=groups, conflicts=conflicts)
    in_sets = {n for s in sets for n in s}
    free = [f"--extra={n}" for n in extras if n not in in_sets] + [
        f"--group={g}" for g in groups if g not in in_sets
    ]
    _compare_with_uv(lock, tmp_path, sorted(in_sets), free, sets)
    shutil.rmtree(lock.parent)


def _json(r: EnvbuildResult) -> dict[str, object]:
    data: dict[str, object] = json.loads(r.stdout)
    return data


def _rows(doc: dict[str, object]) -> dict[str, str | None]:
    files = doc["files"]
    assert isinstance(files, list)
    return {row["name"]: row["torch"] for row in files[0]["environments"]}


def test_overlapping_conflicts_judge_only_what_uv_allows(
    run_envbuild: Callable[..., EnvbuildResult], gate_index: GateIndex, tmp_path: Path
) -> None:
    """SkyRL's shape: [[fsdp, jax, megatron], [gpu, megatron, miniswe, tpu]]; megatron pins another
    torch. "fsdp + megatron" is refused by uv, so the gate never reports "3 torch builds in one
    environment".
    """
    extras = {
        "fsdp": ["torch==2.10.0"],
        "jax": ["filelock-like==3.0"],
        "megatron": ["torch==2.9.1"],
        "gpu": ["torch==2.10.0"],
        "miniswe": ["trainer-utils==1.0"],
        "tpu": ["filelock-like==3.0"],
    }
    lock = _project(
        tmp_path,
        gate_index,
        extras=extras,
        groups={"lint": ["filelock-like==3.0"]},
        conflicts=[
            [("extra", "fsdp"), ("extra", "jax"), ("extra", "megatron")],
            [("extra", "gpu"), ("extra", "megatron"), ("extra", "miniswe"), ("extra", "tpu")],
        ],
    )
    assert _uv_export(lock, tmp_path, ["--extra", "fsdp", "--extra", "megatron"]) is None
    r = run_envbuild("check-lock", str(lock), "--offline", "--json")
    assert r.rc == 0, r.output
    rows = _rows(_json(r))
    assert rows["linux x86_64, extra megatron"] == "2.9.1", rows
    _compare_with_uv(lock, tmp_path, list(extras), [], "skyrl")
    assert all(n.count("megatron") <= 1 for n in rows), rows  # labels never repeat an item
    assert len(_gate(lock)) == 13  # 1 with megatron + 3 x 4 without, as uv counts them
    files = _json(r)["files"]
    assert isinstance(files, list)
    linux = [row for row in files[0]["environments"] if row["name"].startswith("linux x86_64")]
    # {}, jax, tpu, jax + tpu: no torch (a note)
    assert sum(row["selections"] for row in linux) == 13 - 4, linux
    assert "install no torch" in " ".join(files[0]["notices"])


def test_package_level_conflict_and_the_default_environment(
    run_envbuild: Callable[..., EnvbuildResult], gate_index: GateIndex, tmp_path: Path
) -> None:
    """``{ package = "trainer" }`` conflicting with a group: plain ``uv sync`` installs the
    project's torch (2.10.0, under ``extra == 'project-7-trainer'``); ``--only-group docs`` installs
    2.9.1. Both are judged, the default labelled; a downgrade of the default's torch against --base
    fails.
    """

    def make(torch: str) -> Path:
        return _project(
            tmp_path,
            gate_index,
            extras={},
            groups={"docs": ["torch==2.9.1"]},
            conflicts=[[("project", ""), ("group", "docs")]],
            deps=[f"torch=={torch}"],
        )

    lock = make("2.10.0")
    assert "project-7-trainer" in lock.read_text()
    assert _uv_export(lock, tmp_path, []) == "2.10.0"
    assert _uv_export(lock, tmp_path, ["--only-group", "docs"]) == "2.9.1"
    assert _uv_export(lock, tmp_path, ["--group", "docs"]) is None
    r = run_envbuild(
        "check-lock", str(lock), "--offline", "--json", "--environment", "linux-x86_64"
    )
    assert r.rc == 0, r.output
    assert _rows(_json(r)) == {
        "linux x86_64, default (project trainer)": "2.10.0",
        "linux x86_64, group docs": "2.9.1",
    }, r.output
    # the project's own torch moves down in a branch: caught in the default environment
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(lock, repo / "uv.lock")
    shutil.copy(lock.parent / "pyproject.toml", repo / "pyproject.toml")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run([*git[:5], "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    shutil.copy(make("2.9.1"), repo / "uv.lock")
    bad = run_envbuild(
        "check-lock",
        str(repo / "uv.lock"),
        "--base",
        "main",
        "--offline",
        "--json",
        "--environment",
        "linux-x86_64",
    )
    assert bad.rc == ExitCode.LOCK, bad.output
    files = _json(bad)["files"]
    assert isinstance(files, list)
    (finding,) = files[0]["findings"]
    # filed under the head's rows (the default and the selection that installs the same torch), and
    # counted there
    row = "linux x86_64, default (project trainer) and 1 more selection"
    assert finding["rule"] == "torch-downgrade" and finding["environments"] == [row]
    rows = {e["name"]: e for e in files[0]["environments"]}
    assert rows[row]["findings"] == 1 and rows[row]["torch"] == "2.9.1"


def test_default_groups_are_the_default_selection(
    run_envbuild: Callable[..., EnvbuildResult], gate_index: GateIndex, tmp_path: Path
) -> None:
    """A default group that conflicts with an extra: ``uv export --extra a`` is refused unless the
    default groups are turned off; the gate's default is the dev group's torch."""
    lock = _project(
        tmp_path,
        gate_index,
        extras={"a": ["torch==2.9.1"]},
        groups={"dev": ["torch==2.10.0"]},
        conflicts=[[("extra", "a"), ("group", "dev")]],
    )
    assert _uv_export(lock, tmp_path, ["--extra", "a"]) is None
    assert _uv_export(lock, tmp_path, []) == "2.10.0"
    r = run_envbuild(
        "check-lock", str(lock), "--offline", "--json", "--environment", "linux-x86_64"
    )
    assert r.rc == 0, r.output
    assert _rows(_json(r)) == {
        "linux x86_64, default (group dev)": "2.10.0",
        "linux x86_64, extra a": "2.9.1",
    }
    # --extra narrows to the environments that choose it
    r = run_envbuild(
        "check-lock", str(lock), "--offline", "--json", "--extra", "a", "--environment", "linux"
    )
    assert set(_rows(_json(r))) == {"linux x86_64, extra a", "linux aarch64, extra a"}, r.output
