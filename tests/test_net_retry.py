"""The reachability rule (envbuild.index.net): a slow source is retried within a deadline, a dead
one fails within it, and a probe asks for a project page, never for the index root.

Everything runs against the local index (support.index): stalls, black holes and refused
ports are real sockets, no network. Times are asserted only as upper bounds on failures (and
the lower bound that shows a black hole was given its whole deadline), never as the speed of
a success.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lockhelpers import lock_env, manifest
from support.fixtures import EnvbuildResult, ScenarioIndex, stack_toml
from support.index import BlackHole, IndexServer, UnreachablePort
from support.wheels import build_wheel

from envbuild import events
from envbuild.index import net
from envbuild.index.client import SourceError, index_files

# seconds of scheduling on a loaded 2-core machine, on top of a deadline: each bound below is the
# product's own contract (a dead or failing source costs at most its deadline), never a speed
SLACK = 5.0


@pytest.fixture
def said() -> Iterator[list[events.Event]]:
    """The events emitted while the test runs."""
    seen: list[events.Event] = []
    with events.sink(seen.append):
        yield seen


@pytest.fixture
def pypi(tmp_path: Path, index_server: Callable[..., IndexServer]) -> IndexServer:
    build_wheel(tmp_path / "pypi", "einops-like", "0.8.1")
    return index_server({"pypi": tmp_path / "pypi"})


def _retries(seen: list[events.Event]) -> list[str]:
    return [e.message for e in seen if "retrying" in e.message]


def test_an_index_that_stalls_then_answers_is_reachable(
    pypi: IndexServer, said: list[events.Event]
) -> None:
    pypi.fail("/pypi/simple/einops-like/", "stall", times=1, seconds=4)
    url = pypi.simple_url("pypi").replace("http://", "http://user:s3cret@")
    result = net.probe(url, project="einops-like")
    assert result.ok, result.detail
    assert "2 attempts" in result.detail
    assert [(r.method, r.status) for r in pypi.requested("/pypi/simple/einops-like/")] == [
        ("HEAD", 0),
        ("HEAD", 200),
    ]
    [message] = _retries(said)
    assert message.startswith(
        f"http://127.0.0.1:{pypi.port}/pypi/simple/einops-like/ slow (no answer within 3 s), "
        "retrying (attempt 2, "
    )
    assert all(e.level == "info" for e in said if "retrying" in e.message)
    assert "s3cret" not in message + result.location + result.detail


def test_a_project_probe_never_asks_for_the_index_root(pypi: IndexServer) -> None:
    index = pypi.simple_url("pypi")
    assert net.unreachable([index], projects={index: "Einops_Like"}) == []
    assert [(r.method, r.path) for r in pypi.requests] == [("HEAD", "/pypi/simple/einops-like/")]
    # a project this index does not carry is no fault of the index: its own URL is asked, with HEAD
    pypi.clear_requests()
    result = net.probe(index, project="torch")
    assert result.ok and "no torch page" in result.detail, result.detail
    assert all(r.method == "HEAD" for r in pypi.requests), pypi.requests
    # without a project: HEAD on the URL, a GET (body unread) only where HEAD is refused
    pypi.clear_requests()
    pypi.fail("/pypi/simple/", 405, times=1)
    assert net.probe(index).ok
    assert [(r.method, r.status) for r in pypi.requested("/pypi/simple/")] == [
        ("HEAD", 405),
        ("GET", 200),
    ]


def test_a_missing_index_is_final_at_once_and_5xx_is_retried(
    pypi: IndexServer, said: list[events.Event]
) -> None:
    missing = f"{pypi.url}/nope/simple"
    result = net.probe(missing, project="einops-like")
    assert not result.ok and result.detail == "HTTP 404"
    # the page, then the index's own URL; no retry
    assert len(pypi.requests) == 2 and not _retries(said)
    pypi.clear_requests()
    pypi.fail("/pypi/simple/einops-like/", 503, times=2)
    result = net.probe(pypi.simple_url("pypi"), project="einops-like")
    assert result.ok and "3 attempts" in result.detail, result.detail
    assert [r.status for r in pypi.requests] == [503, 503, 200]
    assert (
        len(_retries(said)) == 2 and "answered HTTP 503, retrying (attempt 2, " in _retries(said)[0]
    )


def test_a_black_hole_fails_within_the_deadline(said: list[events.Event]) -> None:
    with BlackHole() as hole:
        t0 = time.monotonic()
        result = net.probe(hole.url, project="torch", deadline=6)
        took = time.monotonic() - t0
    assert not result.ok
    assert result.detail.startswith("accepted the connection but sent no answer within"), (
        result.detail
    )
    assert 5.0 <= took < 6 + SLACK  # it kept trying for the deadline, and stopped there
    assert _retries(said)


def test_the_deadline_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(net.DEADLINE_ENV, "4")
    with BlackHole() as hole:
        t0 = time.monotonic()
        bad = net.unreachable([hole.url])
        took = time.monotonic() - t0
    assert len(bad) == 1 and bad[0].startswith(
        f"{hole.url} (accepted the connection but sent no answer within"
    )
    assert took < 4 + SLACK


def test_refused_fails_fast_and_a_name_that_does_not_resolve_at_once(
    said: list[events.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        # a proxy would answer for the host that does not resolve
        monkeypatch.delenv(key, raising=False)
    with UnreachablePort() as dead:
        t0 = time.monotonic()
        result = net.probe(dead.url, project="torch")
        took = time.monotonic() - t0
    assert (result.ok, result.detail) == (False, "connection refused")
    assert took < 2 + SLACK
    # a second and a half of retries is not worth a line
    assert all(e.level == "debug" for e in said)
    said.clear()
    # RFC 6761: never resolves
    result = net.probe("http://no-such-host.invalid/simple", project="torch")
    assert (result.ok, result.detail) == (False, "host name does not resolve")
    assert not said  # not retried


def test_index_pages_are_retried_the_same_way(
    pypi: IndexServer, said: list[events.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    pypi.fail("/pypi/simple/einops-like/", "reset", times=1)
    pypi.fail("/pypi/simple/einops-like/", 502, times=1)
    files = index_files(pypi.simple_url("pypi"), "einops-like")
    assert [a.filename for a in files] == ["einops_like-0.8.1-py3-none-any.whl"]
    assert [r.status for r in pypi.requests] == [0, 502, 200]
    assert len(_retries(said)) == 2
    # a source that keeps failing is one SourceError once the deadline has passed
    monkeypatch.setenv(net.DEADLINE_ENV, "2")
    pypi.fail("/pypi/simple/einops-like/", 503)
    t0 = time.monotonic()
    with pytest.raises(SourceError, match="answered HTTP 503"):
        index_files(pypi.simple_url("pypi"), "einops-like")
    assert time.monotonic() - t0 < 2 + SLACK


def test_lock_with_an_index_that_stalls_first_does_not_fail(
    tmp_path: Path,
    private_scenario_index: ScenarioIndex,
    run_envbuild: Callable[..., EnvbuildResult],
) -> None:
    index = private_scenario_index
    stack = tmp_path / "stack.toml"
    stack.write_text(
        stack_toml([{"name": "helpers", "packages": ["einops-like==0.8.1"]}], index=index)
    )
    # the probe's first request
    index.server.fail("/nightly/simple/torch/", "stall", times=1, seconds=4)
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    assert "do not answer" not in r.output and "Traceback" not in r.output
    assert (
        f"{index.nightly_url}/torch/ slow (no answer within 3 s), retrying (attempt 2, " in r.stdout
    ), r.output
    assert [s["name"] for s in manifest(tmp_path)["steps"]] == ["torch", "helpers"]
    assert not index.server.requested("/*/simple/")  # no probe (nor resolver) read an index root
