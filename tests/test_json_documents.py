"""Every ``--json`` document is the ``TypedDict`` that types it (``envbuild.commands.documents``):
real commands run, and each document they print is checked against its type, nested objects
included: the schema first and as declared, every required key there, no key the type does not
declare, values of the declared JSON kinds."""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import EnvbuildResult

from envbuild.commands.documents import (
    DOCUMENTS,
    DockerCheckDocument,
    DockerDocument,
    LockCheckDocument,
    ModalDocument,
    PlanDocument,
    PreflightDocument,
    ReceiptDiffDocument,
    ReceiptListDocument,
    WheelhouseIndexDocument,
)
from envbuild.gate.output import CheckLockDocument, CheckLockOwnDocument
from envbuild.layout import Paths
from envbuild.proof.receipt import LoadedReceipt, SmokePayload, write_receipt
from envbuild.spec import resolve_spec

ROOT = Path(__file__).resolve().parent.parent
Run = Callable[..., EnvbuildResult]


def _schema(cls: type) -> object:
    hint = typing.get_type_hints(cls)["schema"]
    assert typing.get_origin(hint) is typing.Literal, f"{cls.__name__}.schema is not a Literal"
    (value,) = typing.get_args(hint)
    return value


def _problems(value: Any, hint: Any, where: str) -> list[str]:
    """What in ``value`` does not fit ``hint`` (empty: it fits)."""
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object ({hint.__name__})"]
        hints = typing.get_type_hints(hint)
        out = [
            f"{where}: {hint.__name__} needs {k!r}"
            for k in sorted(hint.__required_keys__ - set(value))
        ]
        out += [
            f"{where}: {k!r} is not a field of {hint.__name__}"
            for k in sorted(set(value) - set(hints))
        ]
        for key in value.keys() & hints.keys():
            out += _problems(value[key], hints[key], f"{where}.{key}")
        return out
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (Any, object):
        return []
    if origin is typing.Literal:
        return [] if value in args else [f"{where}: {value!r} is not one of {args}"]
    if origin in (typing.Union, types.UnionType):
        tried = [_problems(value, a, where) for a in args]
        return [] if any(not t for t in tried) else min(tried, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not an array"]
        return [
            p for i, item in enumerate(value) for p in _problems(item, args[0], f"{where}[{i}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object"]
        return [p for k, v in value.items() for p in _problems(v, args[1], f"{where}.{k}")]
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not null"]
    kinds: dict[Any, tuple[type, ...]] = {
        str: (str,),
        bool: (bool,),
        int: (int,),
        float: (int, float),
    }
    fits = isinstance(value, kinds[hint]) and (hint is bool or not isinstance(value, bool))
    return [] if fits else [f"{where}: {value!r} is not {hint.__name__}"]


def check(stdout: str, cls: type) -> dict[str, Any]:
    """The one document on ``stdout``, held to ``cls``: schema first and as declared, then the
    type."""
    doc = json.loads(stdout)
    assert isinstance(doc, dict), doc
    assert next(iter(doc)) == "schema", list(doc)[:3]
    assert doc["schema"] == _schema(cls)
    problems = _problems(doc, cls, cls.__name__)
    assert not problems, "\n".join(problems)
    return doc


# ----------------------------------------------------------------------------- the types themselves


def test_the_checker_fails_a_document_that_does_not_fit_its_type() -> None:
    """The planted bad cases: a key the type does not declare, a required key missing, a value of
    the wrong type, another schema string; each is named (the tests below would catch a command
    whose output drifted from its type)."""
    good = {"schema": "envbuild.receipt.list/1", "folder": "/r", "receipts": []}
    assert _problems(good, ReceiptListDocument, "doc") == []
    assert _problems({**good, "extra": 1}, ReceiptListDocument, "doc") == [
        "doc: 'extra' is not a field of ReceiptListDocument"
    ]
    assert _problems(
        {k: v for k, v in good.items() if k != "folder"}, ReceiptListDocument, "doc"
    ) == ["doc: ReceiptListDocument needs 'folder'"]
    assert _problems({**good, "folder": 3}, ReceiptListDocument, "doc") == [
        "doc.folder: 3 is not str"
    ]
    assert _problems({**good, "schema": "envbuild.receipt.list/2"}, ReceiptListDocument, "doc")
    with pytest.raises(AssertionError):
        check(
            json.dumps({"folder": "/r", "schema": "envbuild.receipt.list/1", "receipts": []}),
            ReceiptListDocument,
        )  # the schema not first


def test_every_document_declares_its_schema_first() -> None:
    schemas = []
    for entry in DOCUMENTS:
        hints = list(typing.get_type_hints(entry.document))
        if entry.many:  # wheelhouse build: a list, as it always was
            assert "schema" not in hints, entry.command
            continue
        assert hints[0] == "schema", entry.command
        assert "schema" in entry.document.__dict__["__required_keys__"], entry.command
        schemas.append(_schema(entry.document))
    kept = {1, "envbuild.receipt/1"}  # check-lock's number and the receipts' own, from before
    assert all(
        s in kept or re.fullmatch(r"envbuild\.[a-z][a-z.-]*/\d+", str(s)) for s in schemas
    ), schemas
    # check-lock FILE... and check-lock (own locks): two shapes of schema 1
    assert schemas.count(1) == 2
    others = [s for s in schemas if s != 1]
    assert len(set(others)) == len(others), "two documents share a schema"


def test_the_printed_union_is_the_documents() -> None:
    """``ui.print_json`` takes exactly the documents the reference lists."""
    from envbuild.commands import documents

    members = set(typing.get_args(documents.Document))
    listed = {types.GenericAlias(list, e.document) if e.many else e.document for e in DOCUMENTS}
    assert members == listed


# ----------------------------------------------------------------------------- real commands


def test_plan(run_envbuild: Run) -> None:
    r = run_envbuild("plan", "--profile", "cpu", "--json")
    assert r.rc == 0, r.output
    doc = check(r.stdout, PlanDocument)
    assert doc["stack"] == "cpu" and all(step["argv"] for step in doc["steps"])


def test_lock_check(run_envbuild: Run) -> None:
    """The committed cpu lock is current: exit 0 and ``current`` true (8 would be a stale
    commit)."""
    r = run_envbuild("lock", "--profile", "cpu", "--check", "--json")
    assert r.rc == 0, r.output
    assert check(r.stdout, LockCheckDocument)["current"] is True


def test_check_lock_on_a_lockfile(run_envbuild: Run) -> None:
    r = run_envbuild(
        "check-lock",
        "--offline",
        "--json",
        ROOT / "tests" / "data" / "publocks" / "zonos" / "uv.lock",
    )
    assert r.rc == 0, r.output  # the committed zonos lock passes the gate
    doc = check(r.stdout, CheckLockDocument)
    assert len(doc["files"]) == 1 and doc["files"][0]["environments"]


def test_check_lock_on_a_stacks_own_lock(run_envbuild: Run) -> None:
    r = run_envbuild("check-lock", "--profile", "cpu", "--offline", "--json")
    assert r.rc == 0, r.output  # envbuild's own committed lock passes its own gate
    doc = check(r.stdout, CheckLockOwnDocument)
    assert [report["stack"] for report in doc["reports"]] == ["cpu"]


def test_preflight(run_envbuild: Run, tmp_path: Path) -> None:
    r = run_envbuild(
        "preflight",
        "--profile",
        "cpu",
        "--root",
        tmp_path / "data",
        "--only",
        "python",
        "--only",
        "disk",
        "--json",
    )
    assert r.rc in (0, 3), r.output
    doc = check(r.stdout, PreflightDocument)
    # disk:/, disk:ROOT
    assert {c["name"].split(":")[0] for c in doc["checks"]} <= {"python", "disk"}


def test_docker_and_its_check(run_envbuild: Run, tmp_path: Path) -> None:
    args = (
        "docker",
        "--profile",
        "cpu",
        "-o",
        tmp_path / "docker" / "Dockerfile",
        "--context",
        tmp_path,
        "--json",
    )
    r = run_envbuild(*args)
    assert r.rc == 0, r.output
    assert check(r.stdout, DockerDocument)["files"]
    again = run_envbuild(*args, "--check")
    assert again.rc == 0, again.output
    assert check(again.stdout, DockerCheckDocument)["stale"] == []


def test_modal(run_envbuild: Run, tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    r = run_envbuild(
        "modal",
        "--profile",
        "cpu",
        "-o",
        tmp_path / "images" / "cpu_image.py",
        "--json",
        cwd=tmp_path,
    )
    assert r.rc == 0, r.output
    assert check(r.stdout, ModalDocument)["module"] == "images.cpu_image"


def test_wheelhouse_index(run_envbuild: Run, tmp_path: Path) -> None:
    (tmp_path / "wh").mkdir()
    r = run_envbuild("wheelhouse", "index", tmp_path / "wh", "--json")
    assert r.rc == 0, r.output
    assert check(r.stdout, WheelhouseIndexDocument)["projects"] == {}


def _receipt(root: Path, note: str) -> Path:
    """A real smoke receipt, written by ``write_receipt`` (the software section given: no venv to
    read)."""
    payload: SmokePayload = {
        "ok": True,
        "seconds": 1.5,
        "environment": {"torch": "2.13.0+cpu"},
        "checks": [],
        "launch_regime": "single-process",
        "timing": {"launched_at": 0.0, "timeline": []},
    }
    return write_receipt(
        Paths(root=root),
        "smoke",
        payload,
        spec=resolve_spec("cpu", None),
        python=Path(sys.executable),
        software={"python": note, "distributions": []},
    )


def test_receipt_list_show_and_diff(run_envbuild: Run, tmp_path: Path) -> None:
    empty = run_envbuild("receipt", "list", "--root", tmp_path / "empty", "--json")
    assert empty.rc == 0, empty.output
    assert check(empty.stdout, ReceiptListDocument)["receipts"] == []

    root = tmp_path / "data"
    first, second = _receipt(root, "3.11.7"), _receipt(root, "3.11.8")
    (root / "receipts" / "smoke-broken.json").write_text("{", encoding="utf-8")
    listed = run_envbuild("receipt", "list", "--root", root, "--json")
    assert listed.rc == 0, listed.output
    rows = check(listed.stdout, ReceiptListDocument)["receipts"]
    assert len(rows) == 3 and sum("error" in row for row in rows) == 1

    shown = run_envbuild("receipt", "show", first, "--json")
    assert shown.rc == 0, shown.output
    doc = check(shown.stdout, LoadedReceipt)
    assert doc["kind"] == "smoke" and doc["_path"] == str(first)

    diff = run_envbuild("receipt", "diff", first, second, "--json")
    assert diff.rc == 10, diff.output  # another Python: drift
    doc = check(diff.stdout, ReceiptDiffDocument)
    assert doc["drift"] and doc["receipts"][0]["groups"]["environment"]


@pytest.mark.parametrize("command", [e.command for e in DOCUMENTS])
def test_every_document_is_in_the_reference(command: str) -> None:
    page = (ROOT / "docs" / "reference" / "json.md").read_text(encoding="utf-8")
    assert f"`envbuild {command}`" in page
