"""A re-run of ``provision --lock`` reuses the last run's stages only while nothing they were made
from has changed (``envbuild.projectlock.reuse``).

The project is a real packaged uv project locked by ``uv lock`` against the gate's local index;
each run is a real ``provision --lock`` (uv installs, the guard, the import check). What changes
between runs is what users change: a re-lock with another dependency, an edit of the project's
``pyproject.toml``, an installer variable, a kept file torn by a crash.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from support.fixtures import EnvbuildResult
from support.gatelocks import GateIndex, _uv_lock
from test_fromlock import pip_list, uv_project_lock, uv_sync

REUSED = "the stages of the last run reused"


def _lines(res: EnvbuildResult) -> list[str]:
    """The output without the reuse line."""
    return [line for line in res.output.splitlines() if REUSED not in line]


def test_a_no_op_reuses_the_stages_until_what_they_were_made_from_changes(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    lock = uv_project_lock(tmp_path, gate_index)
    root = tmp_path / "data"

    def provision(*extra: str, env: dict[str, str] | None = None) -> EnvbuildResult:
        res = run_envbuild("provision", "--lock", lock, "--root", root, *extra, env=env)
        assert res.rc == 0, res.output
        assert "Traceback" not in res.output
        return res

    first = provision()
    assert REUSED not in first.output and "step 3/3 project" in first.output
    kept = root / "cache" / "envbuild" / "prepared-lock.pickle"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600

    # nothing changed: the stages are reused, and the run says what a fresh no-op says
    again = provision()
    assert REUSED in again.output and "nothing to do" in again.output
    fresh = provision(env={"ENVBUILD_REUSE_PREPARED": "0"})
    assert REUSED not in fresh.output
    assert _lines(again) == _lines(fresh)

    # an edit of the project's pyproject.toml (even one uv export would read the same): afresh
    pyproject = lock.parent / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# edited\n")
    edited = provision()
    assert REUSED not in edited.output and "nothing to do" in edited.output
    assert REUSED in provision().output

    # another installer setting: afresh
    assert REUSED not in provision(env={"UV_CONCURRENT_DOWNLOADS": "3"}).output

    # a kept file torn by a crash: afresh, without a word of it
    kept.write_bytes(kept.read_bytes()[:100])
    torn = provision()
    assert REUSED not in torn.output and "nothing to do" in torn.output

    # a re-lock that drops a dependency: afresh, and the venv is what uv sync makes of the new lock
    text = pyproject.read_text()
    assert '"trainer-utils==1.0"' in text
    pyproject.write_text(text.replace(', "trainer-utils==1.0"', ""))
    _uv_lock(lock.parent, tmp_path)
    relocked = provision()
    assert REUSED not in relocked.output and "nothing to do" not in relocked.output
    theirs = tmp_path / "uv-venv"
    uv_sync(lock, theirs, tmp_path / "home")
    listed = pip_list(root / "venv")
    assert listed == pip_list(theirs)
    assert "trainer-utils" not in {d["name"] for d in listed}
    assert REUSED in provision().output

    # the receipt of a reused no-op names the same lock, by its sha256
    doc = json.loads(provision("--json").stdout)
    assert doc["ran"] == [] and doc["receipt"]
    assert os.path.exists(doc["receipt"])
