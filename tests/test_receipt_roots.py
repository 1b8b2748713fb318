"""Receipts compare what was installed, not where; the environment is found without --root; a
verification that finds nothing new is a line, not a receipt.

Real venvs, real pip, real wheels; the slow test provisions the real ``cpu`` profile at two roots.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from support.fixtures import Venv
from support.wheels import build_wheel, dist_info_name

from envbuild.cli import main
from envbuild.commands.common import ENVIRONMENT_RECORD
from envbuild.errors import ExitCode
from envbuild.layout import Paths
from envbuild.proof.receipt import (
    VERIFIED_LOG,
    DistributionJSON,
    ReceiptKind,
    ReceiptPayload,
    inventory,
    snapshot_host,
    write_receipt,
)
from envbuild.spec import resolve_spec

REPO = Path(__file__).resolve().parents[1]


def _flip_a_byte(path: Path, after: bytes) -> None:
    """Change one byte of ``path`` (same size): the first byte after ``after``."""
    data = bytearray(path.read_bytes())
    at = data.index(after) + len(after)
    data[at] = ord("X") if data[at] != ord("X") else ord("Y")
    path.write_bytes(bytes(data))


def _dists(venv: Venv) -> dict[str, DistributionJSON]:
    doc = inventory(venv.python)
    assert "error" not in doc, doc
    return {d["name"]: d for d in doc.get("distributions", [])}


def test_a_distribution_is_what_was_installed_not_where(
    tmp_path: Path, make_venv: Callable[..., Venv]
) -> None:
    """One wheel with a console script and a data file, installed by pip into two venvs at two
    paths: the scripts differ (their shebangs name their venv), the identity does not; a changed
    byte in a module or in a script's body is drift naming the file."""
    info = dist_info_name("toolpkg", "1.0")
    wheel = build_wheel(
        tmp_path / "wheels",
        "toolpkg",
        "1.0",
        files={
            "toolpkg/__init__.py": "def main() -> None:\n    print('tool')\n",
            f"{info}/entry_points.txt": "[console_scripts]\ntoolpkg = toolpkg:main\n",
            "toolpkg-1.0.data/data/share/toolpkg/notes.txt": "a data file outside site-packages\n",
        },
    )
    a, b = make_venv("a"), make_venv("a-venv-at-a-longer-path")
    for venv in (a, b):
        venv.pip("install", "--no-index", str(wheel), check=True)
    scripts = [(v.path / "bin" / "toolpkg").read_bytes() for v in (a, b)]
    assert scripts[0] != scripts[1] and scripts[0].startswith(f"#!{a.path}".encode())
    da, db = _dists(a)["toolpkg"], _dists(b)["toolpkg"]
    # RECORD names the scripts' hashes: path-dependent
    assert da["record_sha256"] != db["record_sha256"]
    assert (
        da["content_sha256"] == db["content_sha256"]
        and da["modified_count"] == db["modified_count"] == 0
    )
    # a data file is part of it, by its place
    assert (b.path / "share" / "toolpkg" / "notes.txt").is_file()

    _flip_a_byte(b.site_packages / "toolpkg" / "__init__.py", b"print('")
    db = _dists(b)["toolpkg"]
    assert db["content_sha256"] != da["content_sha256"] and db["modified"] == [
        "toolpkg/__init__.py"
    ]

    _flip_a_byte(a.path / "bin" / "toolpkg", b"import ")  # the body, not the shebang
    da = _dists(a)["toolpkg"]
    assert da["modified"] == ["<prefix>/bin/toolpkg"] and da["modified_count"] == 1
    (a.path / "share" / "toolpkg" / "notes.txt").unlink()
    assert _dists(a)["toolpkg"]["modified"] == [
        "<prefix>/bin/toolpkg",
        "<prefix>/share/toolpkg/notes.txt",
    ]


def _receipts(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "receipts").glob("*.json"))


def test_a_verification_that_finds_nothing_new_is_a_line(
    tmp_path: Path, make_venv: Callable[..., Venv]
) -> None:
    """write_receipt with a real inventory: a passing verify that differs in nothing from the newest
    provision/verify receipt confirms it in verified.jsonl; a change, or a failure, is a receipt."""
    venv = make_venv("venv")
    paths = Paths(root=tmp_path / "root")
    spec = resolve_spec("cpu", None)
    host = snapshot_host(spec)
    environ = dict(os.environ)

    def record(kind: ReceiptKind, payload: dict[str, object]) -> Path:  # cut to what is read
        return write_receipt(
            paths,
            kind,
            cast(ReceiptPayload, payload),
            spec=spec,
            python=venv.python,
            host=host,
            environ=environ,
        )

    first = record("provision", {"ran": ["bootstrap"], "skipped": []})
    assert record("provision", {"ran": [], "skipped": ["bootstrap"]}) == first
    assert record("verify", {"ok": True}) == first
    assert _receipts(paths.root) == [first.name]
    lines = [json.loads(line) for line in (paths.receipts / VERIFIED_LOG).read_text().splitlines()]
    assert [(e["kind"], e["confirms"]) for e in lines] == [
        ("provision", first.name),
        ("verify", first.name),
    ]
    assert lines[0]["payload"]["skipped"] == ["bootstrap"]

    failed = record("verify", {"ok": False})  # a failure is always a receipt
    assert failed != first and failed.name.startswith("verify-")
    venv.pip(
        "install", "--no-index", str(build_wheel(tmp_path / "w", "extra-pkg", "1.0")), check=True
    )
    # one more distribution: a receipt, and the next reference
    changed = record("verify", {"ok": True})
    assert changed not in (first, failed)
    assert record("verify", {"ok": True}) == changed
    assert record("smoke", {"ok": True}) != changed  # a smoke run is always a receipt


def _root_with_receipts(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A data root as provision leaves it (manifest, venv with its record; the venv elsewhere than
    <root>/venv, as with provision --venv) with two receipts. Finding reads only these files."""
    root, venv = tmp_path / name, tmp_path / f"{name}-venv"
    paths = Paths(root=root)
    paths.state.mkdir(parents=True)
    paths.manifest.write_text(json.dumps({"schema": 1, "stack": "cpu", "venv": str(venv)}))
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    (venv / ENVIRONMENT_RECORD).write_text(
        json.dumps(
            {
                "schema": "envbuild.environment/1",
                "root": str(root),
                "venv": str(venv),
                "stack": str(REPO / "lockfiles" / "cpu" / "stack.toml"),
                "stack_name": "cpu",
            }
        )
    )
    spec = resolve_spec("cpu", None)
    host = snapshot_host(spec)
    kinds: tuple[ReceiptKind, ...] = ("provision", "smoke")
    for kind in kinds:  # payloads cut to what finding the receipts reads
        write_receipt(
            paths,
            kind,
            cast(ReceiptPayload, {"ok": True}),
            spec=spec,
            software={"distributions": []},
            host=host,
        )
    return root, venv


def test_the_environment_is_found_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--root, then ENVBUILD_ROOT, then the active venv's record; each run says which and why."""
    a, _ = _root_with_receipts(tmp_path, "a")
    b, b_venv = _root_with_receipts(tmp_path, "b")
    monkeypatch.delenv("ENVBUILD_ROOT", raising=False)
    monkeypatch.setenv("VIRTUAL_ENV", str(b_venv))

    def listing(*argv: str) -> list[str]:
        assert main(["receipt", "list", *argv]) == 0
        return capsys.readouterr().out.splitlines()

    out = listing()
    assert out[0] == f"root {b} (from the active venv {b_venv}; stack cpu, as provisioned there)"
    assert out[1] == f"2 receipt(s) in {b / 'receipts'}, newest first:"
    assert [line.split()[2] for line in out[2:]] == ["smoke", "provision"]  # newest first
    monkeypatch.setenv("ENVBUILD_ROOT", str(a))
    assert listing()[0] == f"root {a} (from ENVBUILD_ROOT; stack cpu, as provisioned there)"
    assert listing("--root", str(b))[0].startswith(f"root {b} (from --root")

    # show without a file: the root's newest receipt
    assert main(["receipt", "show", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "smoke" and Path(doc["_path"]).parent == a / "receipts"

    # a venv envbuild did not make says nothing: the stack's own root
    monkeypatch.delenv("ENVBUILD_ROOT")
    (tmp_path / "plain-venv").mkdir()
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "plain-venv"))
    assert "(the stack's layout.root: no --root, no ENVBUILD_ROOT" in listing()[0]

    monkeypatch.setenv("ENVBUILD_ROOT", "")
    assert main(["receipt", "list"]) == ExitCode.CONFIG
    assert "ENVBUILD_ROOT is set but empty" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the real cpu stack


def envbuild(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envbuild", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


# make test-thorough: test_provision_safety's two-root receipt diff covers the ground
@pytest.mark.thorough
@pytest.mark.slow
def test_two_roots_compare_equal_and_a_changed_byte_is_drift(
    tmp_path: Path, cpu_torch_index: str
) -> None:
    """The cpu profile provisioned at two roots: receipt diff exit 0 (torch's console scripts and
    their paths differ, what was installed does not); found without --root; a re-run
    records a line; one byte of one of torch's own files changed: verify exit 6, diff exit 10."""
    env = {k: v for k, v in os.environ.items() if k not in ("ENVBUILD_ROOT", "VIRTUAL_ENV")}
    env["ENVBUILD_TORCH_INDEX"] = cpu_torch_index
    receipts, roots = {}, {}
    for name in ("a", "b"):
        roots[name] = root = tmp_path / name / "data"
        out = envbuild(
            "provision",
            "--profile",
            "cpu",
            "--root",
            str(root),
            "--home",
            str(tmp_path / name / "home"),
            "--json",
            env=env,
        )
        assert out.returncode == 0, out.stderr
        receipts[name] = json.loads(out.stdout)["receipt"]
    torchrun = [(roots[n] / "venv" / "bin" / "torchrun").read_text() for n in ("a", "b")]
    assert torchrun[0] != torchrun[1]  # the shebangs name two venvs
    out = envbuild("receipt", "diff", receipts["a"], receipts["b"], env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no drift" in out.stdout

    # found from the activated venv; provision said how
    out = envbuild(
        "provision",
        "--profile",
        "cpu",
        "--root",
        str(roots["a"]),
        "--home",
        str(tmp_path / "a" / "home"),
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert (
        f"next: . {roots['a'] / 'venv' / 'bin' / 'activate'}  (or: export"
        f" ENVBUILD_ROOT={roots['a']})" in out.stdout
    )
    # ... and that re-run wrote no receipt: a line confirming the first
    assert _receipts(roots["a"]) == [Path(receipts["a"]).name]
    (line,) = (roots["a"] / "receipts" / VERIFIED_LOG).read_text().splitlines()
    assert json.loads(line)["confirms"] == Path(receipts["a"]).name
    out = envbuild("receipt", "list", env={**env, "VIRTUAL_ENV": str(roots["a"] / "venv")})
    assert out.stdout.startswith(f"root {roots['a']} (from the active venv {roots['a'] / 'venv'}")
    assert "+1 verified" in out.stdout

    # one byte of one of torch's own files, same size: verify names it (exit 6) and records it
    site = next((roots["b"] / "venv" / "lib").glob("python3*/site-packages"))
    _flip_a_byte(site / "torch" / "functional.py", b"# ")
    out = envbuild("verify", env={**env, "ENVBUILD_ROOT": str(roots["b"])})
    assert out.returncode == ExitCode.ABI, out.stdout + out.stderr
    assert (
        "torch 2.13.0+cpu: 1 file(s) changed on disk since it was installed (torch/functional.py)"
        in out.stderr
    )
    (verify_receipt,) = (roots["b"] / "receipts").glob("verify-*.json")
    out = envbuild("receipt", "diff", receipts["a"], str(verify_receipt), env=env)
    assert out.returncode == ExitCode.DRIFT, out.stdout + out.stderr
    assert "torch (files)" in out.stdout and "torch/functional.py" in out.stdout
    assert "1 of 1 receipt(s) drifted" in out.stdout
