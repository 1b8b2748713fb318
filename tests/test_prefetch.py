"""Prefetch: which requirements are exact, the commands, the policy, a real background download,
and provision with it on, against the test index (real pip and uv)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, Venv

from envbuild.installer import PipInstaller, UvInstaller
from envbuild.plan import Backend, PlannedStep, PlanOptions, make_plan
from envbuild.provision import prefetch
from envbuild.provision.prefetch import (
    Prefetcher,
    PrefetchJob,
    build_lines,
    exact_pins,
    pinned_versions,
    prefetch_argv,
    remote_sources,
    stale_builds,
    wanted,
)
from envbuild.spec import StackSpec, parse_spec


def _spec(tmp_path: Path, packages: list[str], **step: object) -> StackSpec:
    data = {
        "schema": 1,
        "name": "t",
        "python": "3.11",
        "layout": {"root": str(tmp_path / "root"), "min_free_gb": 0},
        "abi": {"package": "torch", "version": "2.13.0+cpu", "local": "cpu"},
        "step": [
            {"name": "torch", "packages": ["torch==2.13.0+cpu"]},
            {"name": "next", "packages": packages, **step},
        ],
    }
    return parse_spec(data, tmp_path / "stack.toml", {})


def _planned(
    tmp_path: Path, packages: list[str], backend: Backend = "pip", **step: object
) -> PlannedStep:
    spec = _spec(tmp_path, packages, **step)
    options = PlanOptions(backend=backend, wheelhouse="http://127.0.0.1:1/flat/")
    return make_plan(spec, options).steps[1]


def test_exact_pins_keep_only_single_equality(tmp_path: Path) -> None:
    s = _planned(tmp_path, ["a==1.0", "b>=2", "c==1.*", "d==1.0,<2", "e===3", "f[x]==1.0", "g"])
    assert exact_pins(s) == ["a==1.0", "e===3"]


def test_prefetch_argv_pip_and_uv(tmp_path: Path) -> None:
    s = _planned(tmp_path, ["a==1.0", "b>=2"], no_deps=True)
    pip = prefetch_argv(
        s, installer=PipInstaller(), python=Path("/v/bin/python"), scratch=tmp_path / "s"
    )
    assert pip is not None
    assert pip[:4] == ["/v/bin/python", "-m", "pip", "download"]
    assert "--no-deps" in pip and pip[-1] == "a==1.0"
    assert pip[pip.index("--no-index") : pip.index("--no-index") + 3] == [
        "--no-index",
        "--find-links",
        "http://127.0.0.1:1/flat/",
    ]
    su = _planned(tmp_path, ["a==1.0"], backend="uv")
    uv = prefetch_argv(
        su, installer=UvInstaller("/bin/uv"), python=Path("/v/bin/python"), scratch=tmp_path / "s"
    )
    assert uv is not None and uv[:3] == ["/bin/uv", "pip", "install"]
    assert "--prefix" in uv and "--no-deps" in uv
    # nothing exact: nothing to prefetch
    assert (
        prefetch_argv(
            _planned(tmp_path, ["b>=2"]),
            installer=PipInstaller(),
            python=Path("p"),
            scratch=tmp_path,
        )
        is None
    )


def test_auto_prefetches_only_for_remote_sources(tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["a==1.0"])
    local = make_plan(spec, PlanOptions(backend="uv", wheelhouse=str(tmp_path / "wh"))).steps
    loopback = make_plan(
        spec, PlanOptions(backend="uv", wheelhouse="http://127.0.0.1:8080/flat/")
    ).steps
    mirror = "https://mirror.example.org/flat/"
    remote = make_plan(spec, PlanOptions(backend="uv", wheelhouse=mirror)).steps
    assert remote_sources(remote[1]) == ["https://mirror.example.org/flat/"]
    assert remote_sources(loopback[1]) == [] and remote_sources(local[1]) == []
    assert wanted("auto", remote) and not wanted("auto", loopback) and not wanted("auto", local)
    assert not wanted("auto", remote[:1])  # nothing after the first step to run: nothing to overlap
    assert wanted("yes", local) and not wanted("no", remote)


_WHL = "https://files.example.org/packages/ab/cd/{n}-1.0-py3-none-any.whl --hash=sha256:" + "0" * 64


def _lock_stage(tmp_path: Path, lines: list[str]) -> list[PlannedStep]:
    """A ``provision --lock`` stage: its locked file names each file by URL, ``--no-index``."""
    import dataclasses

    locked = tmp_path / "02-rest.txt"
    locked.write_text("".join(f"{ln}\n" for ln in lines))
    options = PlanOptions(backend="uv", wheelhouse=str(tmp_path / "wh"))
    steps = make_plan(_spec(tmp_path, ["a==1.0"]), options).steps
    rest = dataclasses.replace(steps[1], locked_file=locked, args=("--no-index", "--no-deps"))
    return [steps[0], rest]


def test_a_lock_stage_of_remote_wheel_urls_is_prefetched_and_builds_nothing(tmp_path: Path) -> None:
    steps = _lock_stage(
        tmp_path,
        [
            f"a @ {_WHL.format(n='a')}",
            f"b @ {_WHL.format(n='b')}",
            "-e file:///src/project",
            "c @ https://files.example.org/c-1.0.tar.gz --hash=sha256:1",
            "d @ git+https://github.com/x/d@0123abc",
        ],
    )
    assert remote_sources(steps[1])[0].startswith("https://files.example.org/")
    assert wanted("auto", steps)
    scratch = tmp_path / "prefetch" / "02-rest"
    argv = prefetch_argv(
        steps[1], installer=UvInstaller("/bin/uv"), python=Path("/v/bin/python"), scratch=scratch
    )
    listed_file = tmp_path / "prefetch" / "02-rest.txt"
    assert argv is not None and argv[argv.index("-r") + 1] == str(listed_file)
    listed = listed_file.read_text().splitlines()
    # the wheels, hashes and all; the editable project, the sdist and the git pin are the real
    # step's to build
    assert listed == [f"a @ {_WHL.format(n='a')}", f"b @ {_WHL.format(n='b')}"]


def test_with_builds_a_lock_stage_prefetches_its_isolated_builds_too(tmp_path: Path) -> None:
    """``builds``: the sdist, the git pin and the editable project are built by the prefetch (uv
    keeps the builds; the real step links them) and the prefetch covers the step; the stage of
    builds against torch (``--no-build-isolation``) keeps its builds for the real step."""
    import dataclasses

    sdist = "c @ https://files.example.org/c-1.0.tar.gz --hash=sha256:" + "1" * 64
    lines = [f"a @ {_WHL.format(n='a')}", "-e file:///src/project", sdist]
    lines.append("d @ git+https://github.com/x/d@0123abc")
    steps = _lock_stage(tmp_path, lines)
    assert build_lines(steps[1]) == lines[1:]
    uv = UvInstaller("/bin/uv")
    argv = prefetch_argv(
        steps[1], installer=uv, python=Path("/v/bin/python"), scratch=tmp_path / "p" / "s"
    )
    assert argv is not None
    assert (tmp_path / "p" / "s.txt").read_text().splitlines() == [lines[0]]  # default: wheels
    argv = prefetch_argv(
        steps[1],
        installer=uv,
        python=Path("/v/bin/python"),
        scratch=tmp_path / "p" / "s",
        builds=True,
    )
    assert argv is not None and argv[argv.index("-r") + 1] == str(tmp_path / "p" / "s.txt")
    assert (tmp_path / "p" / "s.txt").read_text().splitlines() == lines
    against_torch = dataclasses.replace(steps[1], args=(*steps[1].args, "--no-build-isolation"))
    assert build_lines(against_torch) == []
    pip = prefetch_argv(
        steps[1],
        installer=PipInstaller(),
        python=Path("/v/bin/python"),
        scratch=tmp_path / "q",
        builds=True,
    )
    assert pip is not None and "c-1.0.tar.gz" not in " ".join(pip)  # pip download builds nothing


def test_prefetched_builds_stand_only_under_the_pins_frozen(tmp_path: Path) -> None:
    """The real step rebuilds (every package of the step) only where the prefetch built under
    baseline pins other than those frozen after the baseline step."""
    job = PrefetchJob(
        step="project",
        argv=[],
        scratch=tmp_path,
        log_file=tmp_path / "log",
        builds=("-e file:///src/project",),
        baseline_pins=pinned_versions(["torch==2.10.0", "Filelock_Like==3.0", "# a comment"]),
    )
    assert job.baseline_pins == {"torch": "2.10.0", "filelock-like": "3.0"}
    same = ["# envbuild: the ABI baseline", "filelock-like==3.0", "torch==2.10.0"]
    assert stale_builds(job, same, ["trainer", "helper==0.2.0"]) == ()
    other = ["torch==2.10.0", "filelock-like==3.1"]
    assert stale_builds(job, other, ["trainer", "Helper==0.2.0"]) == ("trainer", "helper")
    wider = [*same, "nvidia-nccl-like==2.0"]
    assert stale_builds(job, wider, ["trainer"]) == ("trainer",)
    unconstrained = PrefetchJob(step="x", argv=[], scratch=tmp_path, log_file=tmp_path / "l")
    assert stale_builds(unconstrained, other, ["trainer"]) == ()


def test_a_lock_stage_from_this_host_or_of_builds_only_is_not_prefetched(tmp_path: Path) -> None:
    here = "a @ http://127.0.0.1:8080/a-1.0-py3-none-any.whl --hash=sha256:1"
    loopback = _lock_stage(tmp_path, [here])
    assert remote_sources(loopback[1]) == [] and not wanted("auto", loopback)
    builds = _lock_stage(
        tmp_path, ["-e file:///src/project", "d @ git+https://github.com/x/d@0123abc"]
    )
    assert remote_sources(builds[1]) == [] and not wanted("auto", builds)
    # even where another stage makes prefetching worth it, a stage of builds only is left to the
    # real step
    assert (
        prefetch_argv(
            builds[1],
            installer=UvInstaller("/bin/uv"),
            python=Path("/v/bin/python"),
            scratch=tmp_path / "s",
        )
        is None
    )


def test_background_pip_download_fills_the_cache_and_cleans_scratch(tmp_path: Path) -> None:
    wheel = pytest.importorskip("wheel.wheelfile")
    wh = tmp_path / "wh"
    wh.mkdir()
    with wheel.WheelFile(wh / "tiny-1.0-py3-none-any.whl", "w") as wf:
        wf.writestr("tiny/__init__.py", b"")
        wf.writestr(
            "tiny-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n\n"
        )
        wf.writestr(
            "tiny-1.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    spec = _spec(tmp_path, ["tiny==1.0"])
    step = make_plan(spec, PlanOptions(backend="pip", wheelhouse=str(wh))).steps[1]
    env = {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": "/usr/bin:/bin",
    }
    pre = Prefetcher(
        installer=PipInstaller(),
        python=Path(sys.executable),
        scratch_root=tmp_path / "scratch",
        logs=tmp_path / "logs",
        env=env,
    )
    with pre:
        job = pre.start(step)
        assert job is not None
        assert pre.start(step) is job  # once per step
        pre.heard("Installing collected packages: torch")  # pip's step resolved
        pre.wait(step.name, timeout=120)
    assert job.returncode == 0, job.log_file.read_text()
    assert not job.scratch.exists()  # the scratch copy is gone; the cache is what stays
    assert "tiny" in job.log_file.read_text()


def test_close_stops_a_running_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    spec = _spec(tmp_path, ["tiny==1.0"])
    step = make_plan(spec, PlanOptions(backend="pip")).steps[1]
    monkeypatch.setattr(
        prefetch,
        "prefetch_argv",
        lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(60)"],
    )
    pre = Prefetcher(
        installer=PipInstaller(),
        python=Path(sys.executable),
        scratch_root=tmp_path / "s",
        logs=tmp_path / "logs",
        env={"PATH": "/usr/bin:/bin"},
    )
    job = pre.start(step)
    assert job is not None
    pre.release()
    for _ in range(100):  # the runner has started the child once the command line is in the log
        if job.log_file.exists() and "\n$ " in job.log_file.read_text():
            break
        time.sleep(0.05)
    t = time.monotonic()
    pre.close()
    assert job.done.is_set() and time.monotonic() - t < 10
    assert job.returncode is not None and job.returncode != 0


def test_a_prefetch_begins_once_the_running_step_has_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started beside the step, it waits for the step's ``Resolved`` line (its burst of metadata
    requests over); lines before it do not let it begin."""
    import time

    spec = _spec(tmp_path, ["tiny==1.0"])
    step = make_plan(spec, PlanOptions(backend="uv")).steps[1]
    began = tmp_path / "began"
    monkeypatch.setattr(
        prefetch,
        "prefetch_argv",
        lambda *a, **k: [sys.executable, "-c", f"open({str(began)!r}, 'w').close()"],
    )
    with Prefetcher(
        installer=UvInstaller("/bin/uv"),
        python=Path(sys.executable),
        scratch_root=tmp_path / "s",
        logs=tmp_path / "logs",
        env={"PATH": "/usr/bin:/bin"},
    ) as pre:
        job = pre.start(step)
        assert job is not None
        for line in ("Using Python 3.12.1 environment at: /r/venv", "Resolving torch"):
            pre.heard(line)
        time.sleep(1.0)
        assert not began.exists() and not job.done.is_set()
        pre.heard("Resolved 26 packages in 117ms")
        pre.wait(step.name, timeout=60)
    assert job.returncode == 0 and began.exists()
    assert job.log_file.read_text().startswith(
        "[envbuild] begins: the running step resolved (Resolved 26 packages in 117ms)\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["uv", "pip"])
def test_provision_with_prefetch(
    write_stack: Callable[..., Path],
    provision: Callable[..., EnvbuildResult],
    provisioned_venv: Venv,
    tmp_path: Path,
    backend: str,
) -> None:
    stack = write_stack(
        [
            {"name": "helpers", "packages": ["einops-like==0.8.1"]},
            {"name": "more", "packages": ["fla-core-like==0.4.2"], "no_deps": True},
        ]
    )
    result = provision(stack, "--backend", backend, "--prefetch", "yes")
    assert result.rc == 0, result.stderr
    dists = provisioned_venv.dists()
    assert dists["einops-like"].version == "0.8.1" and dists["fla-core-like"].version == "0.4.2"
    logs = tmp_path / "data" / "logs"
    # each later step was fetched in the background (all of them from the first step on)
    for name in ("02-helpers", "03-more"):
        text = (logs / f"{name}.prefetch.log").read_text()
        assert "[envbuild] exit status 0" in text, text
        # begun on the first step's own output (its resolution over), not after the longest wait
        assert text.startswith("[envbuild] begins: the running step resolved ("), text
    assert not any((tmp_path / "data" / "cache" / "prefetch").glob("*/*"))  # scratch copies removed


def test_a_stage_of_index_files_and_a_git_pin_is_prepared_in_two_runs(tmp_path: Path) -> None:
    """A lock stage whose index files go through a pylock.toml and whose git pin cannot: the
    prefetch runs the pylock, then the git line (``NAME.rest.txt``) into the same target, as the
    real step's two runs install them; a stage of index files alone has one run."""
    from envbuild.provision.prefetch import _rest_runs

    steps = _lock_stage(
        tmp_path,
        [
            f"a @ {_WHL.format(n='a')}  # index: https://files.example.org/simple",
            "d @ git+https://github.com/x/d@0123abc",
        ],
    )
    scratch = tmp_path / "prefetch" / "02-rest"
    argv = prefetch_argv(
        steps[1],
        installer=UvInstaller("/bin/uv"),
        python=Path("/v/bin/python"),
        scratch=scratch,
        builds=True,
    )
    assert argv is not None
    listed = Path(argv[argv.index("-r") + 1])
    assert listed.name == "pylock.02-rest.toml" and "files.example.org" in listed.read_text()
    (then,) = _rest_runs(argv)
    rest = Path(then[then.index("-r") + 1])
    assert rest.name == "02-rest.rest.txt"
    assert rest.read_text() == "d @ git+https://github.com/x/d@0123abc\n"
    assert [a for a in then if a != str(rest)] == [a for a in argv if a != str(listed)]
    # index files alone: the pylock is the one run, and no rest file is left from before
    only = _lock_stage(tmp_path, [f"a @ {_WHL.format(n='a')}  # index: https://x.org/simple"])
    argv = prefetch_argv(
        only[1], installer=UvInstaller("/bin/uv"), python=Path("/v/bin/python"), scratch=scratch
    )
    assert argv is not None and _rest_runs(argv) == () and not rest.exists()
