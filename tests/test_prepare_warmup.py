"""The prepare-mode import warm-up (``envbuild/provision/warmup.py``): ``import torch`` from the
baseline step's prepared scratch folder while the later steps download, its bytecode linked into the
venv before the final check.

Real parts: a real interpreter writes the bytecode (in the scratch folder), the venv's files are
hard links of the scratch's as uv makes them, and the import that follows is a real one whose own
bytecode writes show which ``.pyc`` it trusted; the end-to-end case is a real ``provision --lock``
of a lock made by ``uv lock``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.fixtures import EnvbuildResult
from support.gatelocks import REPOS, GateIndex
from support.index import IndexServer
from test_fromlock import uv_project_lock

from envbuild.provision import warmup

BYTECODE_ON = {"PYTHONDONTWRITEBYTECODE": ""}  # the sandbox sets it; "" unsets it for Python
# the import mode (and so the prepare mode) runs by itself on 4 cores or more; forced on 2
IMPORT_ON = {**BYTECODE_ON, "ENVBUILD_IMPORT_WARMUP": "import"}
TAG = sys.implementation.cache_tag


def _bytecode_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def _import(folder: Path, module: str, **env: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import site, sys; site.addsitedir(sys.argv[1]); import {module}",
            str(folder),
        ],
        check=True,
        env=_bytecode_env(**env),
        cwd=folder.parent,
    )


def test_harvest_links_only_the_bytecode_the_import_would_trust(tmp_path: Path) -> None:
    scratch, site = tmp_path / "scratch", tmp_path / "site"
    (scratch / "pkg").mkdir(parents=True)
    (scratch / "pkg" / "__init__.py").write_text("from . import a, b\n")
    (scratch / "pkg" / "a.py").write_text("A = 1\n")
    (scratch / "pkg" / "b.py").write_text("B = 2\n")
    (scratch / "pkg" / "never.py").write_text("N = 3\n")
    (site / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "never.py"):  # as uv links both from its cache
        os.link(scratch / "pkg" / name, site / "pkg" / name)
    _import(scratch, "pkg")
    assert len(list((scratch / "pkg" / "__pycache__").iterdir())) == 3

    # planted: the venv's b.py is another file by the time the check imports
    (site / "pkg" / "b.py").unlink()
    (site / "pkg" / "b.py").write_text("B = 'changed'\n")

    assert warmup.harvest(scratch, site) == 2
    cache = site / "pkg" / "__pycache__"
    linked = {p.name: p.stat().st_ino for p in cache.iterdir()}
    assert set(linked) == {f"__init__.{TAG}.pyc", f"a.{TAG}.pyc"}
    assert warmup.harvest(scratch, site) == 0  # never over a .pyc already there

    # the real import trusts the two it was given (left as they are) and compiles b itself
    _import(site, "pkg")
    after = {p.name: p.stat().st_ino for p in cache.iterdir()}
    assert after[f"__init__.{TAG}.pyc"] == linked[f"__init__.{TAG}.pyc"]
    assert after[f"a.{TAG}.pyc"] == linked[f"a.{TAG}.pyc"]
    assert f"b.{TAG}.pyc" in after and f"never.{TAG}.pyc" not in after
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import site, sys; site.addsitedir(sys.argv[1]); import pkg; print(pkg.b.B)",
            str(site),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=_bytecode_env(),
        cwd=tmp_path,
    )
    assert out.stdout.strip() == "changed"


def test_a_lock_provision_links_the_prepared_import_bytecode(
    gate_index: GateIndex, tmp_path: Path, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    # an index of its own, whose files are cacheable as PyPI's are (uv links the venv's from the
    # entries the prepare made), and whose rest-stage file is slow to come (its first request
    # stalls, uv asks again): the warm-up has that long, as it has the later steps' downloads
    repos = {repo: gate_index.root / repo for repo in REPOS}
    py = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    with IndexServer(repos, immutable_files=True) as server:
        lock = uv_project_lock(tmp_path, GateIndex(server=server, root=gate_index.root))

        def provision(root: Path, mode: str) -> dict[str, Any]:
            slow = server.fail("*/trainer_utils-*.whl", "stall", times=1, seconds=3)
            res = run_envbuild("provision", "--lock", lock, "--root", root, "--json", env=IMPORT_ON)
            assert res.rc == 0, res.output
            assert slow.hits == 1
            receipt = json.loads(Path(json.loads(res.stdout)["receipt"]).read_text())
            warm: dict[str, Any] = receipt["payload"]["import_warmup"]
            assert warm["mode"] == mode and warm["files"] >= 1, warm
            site = root / "venv" / "lib" / py / "site-packages"
            assert list((site / "torch" / "__pycache__").glob(f"*.{TAG}.pyc"))
            # nothing of the scratch folders is left (deleted beside the run, before it exits)
            prepare = root / "cache" / "prepare"
            assert not [p.name for p in prepare.iterdir() if p.is_dir()], list(prepare.iterdir())
            return warm

        root = tmp_path / "data"
        assert provision(root, "prepare")["files"] >= 1
        # a root where torch was imported before (the listing the check leaves in the root's
        # cache, copied into a new root): the compile mode instead, in the venv beside the steps
        # (measured faster than an early import there), of the files the listing names
        listing = next((root / "cache" / "envbuild").glob("import-torch-*.json"))
        listed = json.loads(listing.read_text())["files"]
        again = tmp_path / "data-again"
        (again / "cache" / "envbuild").mkdir(parents=True)
        shutil.copy(listing, again / "cache" / "envbuild" / listing.name)
        assert provision(again, "compile")["files"] == len(listed) >= 1

        # two cores, not forced: not the import (measured: on two cores it took the downloads' CPU
        # for as long as it gave the check) but the walk, from torch's own scratch install beside
        # the rest of its stage's, on idle cores; and from the other end beside the check's import
        if warmup.usable_cpus() < warmup.IMPORT_MODE_MIN_CPUS:
            two = tmp_path / "data-2"
            res = run_envbuild(
                "provision", "--lock", lock, "--root", two, "--json", env=BYTECODE_ON
            )
            assert res.rc == 0, res.output
            doc = json.loads(Path(json.loads(res.stdout)["receipt"]).read_text())
            warm = doc["payload"]["import_warmup"]
            assert warm["mode"] == "walk" and warm["exit"] is not None, warm
            assert isinstance(warm["beside_check"], int), warm
            # the head's own scratch install held torch alone
            head = (two / "logs" / "01-torch-head.prefetch.log").read_text()
            assert "pylock.01-torch-head.toml" in head and "exit status 0" in head, head
            site = two / "venv" / "lib" / py / "site-packages"
            pycs = list((site / "torch" / "__pycache__").glob(f"*.{TAG}.pyc"))
            # the walk had the time to write torch's two files: what it linked is all there is
            if warm["finished_before_check"]:
                assert warm["files"] == len(pycs) == 2, (warm, pycs)

    lock = uv_project_lock(tmp_path / "off", gate_index)

    # switched off: no warm-up, and the run still passes
    off = run_envbuild(
        "provision",
        "--lock",
        lock,
        "--root",
        tmp_path / "data-off",
        "--json",
        env={**BYTECODE_ON, "ENVBUILD_IMPORT_WARMUP": "0"},
    )
    assert off.rc == 0, off.output
    doc = json.loads(Path(json.loads(off.stdout)["receipt"]).read_text())
    assert doc["payload"]["import_warmup"] is None
