"""Receipts on disk: writing one (atomically, under ``<root>/receipts``), finding and loading
them, and the ledger of verifications that found nothing new (``verified.jsonl``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild import events
from envbuild._io import atomic_write_json, sha256_bytes
from envbuild.errors import ConfigError
from envbuild.layout import Paths
from envbuild.proof.backend import Backend, detect
from envbuild.proof.provenance import Provenance
from envbuild.proof.receipt.collect import (
    HostSnapshot,
    env_section,
    hardware,
    inventory,
    redact_any,
    snapshot_host,
)
from envbuild.proof.receipt.diff import diff_receipts, failure
from envbuild.proof.receipt.schema import (
    KINDS,
    SCHEMA,
    LoadedReceipt,
    Receipt,
    ReceiptBody,
    ReceiptKind,
    ReceiptPayload,
    SoftwareJSON,
    validate,
)
from envbuild.spec import StackSpec


def write_receipt(
    paths: Paths,
    kind: ReceiptKind,
    payload: ReceiptPayload,
    *,
    spec: StackSpec | None = None,
    python: Path | None = None,
    provenance: Provenance | None = None,
    environ: Mapping[str, str] | None = None,
    host: HostSnapshot | None = None,
    software: SoftwareJSON | None = None,
    backend: Backend | None = None,
) -> Path:
    """Write one receipt under ``paths.receipts``; returns its path.

    ``provenance`` should be captured at the start of the command (``provenance.capture``), or
    ``host`` taken (``snapshot_host``); either is captured here when not given. ``python`` is the
    target environment's interpreter (default: ``paths.python`` when it exists); ``software`` its
    ``inventory``, when the caller already has it; ``backend`` where it runs (default: detected).
    """
    env = os.environ if environ is None else environ
    snap = host or snapshot_host(spec, env, provenance)
    gpus, prov = snap.gpus, provenance or snap.provenance
    names = dict(prov.names)
    regime = payload.get("launch_regime")
    if regime and not env.get("ENVBUILD_LAUNCH_REGIME"):
        names["launch_regime"] = str(regime)
    if spec is not None and not env.get("ENVBUILD_PROFILE"):
        names["profile"] = spec.name
    interp = python or (paths.python if paths.python.exists() else None)
    doc: ReceiptBody = {
        "schema": SCHEMA,
        "kind": kind,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "names": names,
        "provenance": prov.to_dict(),
        "backend": (backend or detect(environ)).to_dict(),
        "hardware": hardware(gpus),
        "software": (
            software
            if software is not None
            else (inventory(interp) if interp is not None else {"error": "no target interpreter"})
        ),
        "spec": (
            {"name": spec.name, "path": str(spec.path), "digest": spec.digest} if spec else None
        ),
        "env": env_section(spec, paths, env),
        "payload": payload,
    }
    doc = redact_any(doc)
    confirmed = _confirmed_by(paths.receipts, doc)
    if confirmed is not None:
        _log_verification(paths.receipts, doc, confirmed)
        events.emit(
            "info",
            f"nothing changed since {confirmed.name}: this {kind} is recorded in "
            f"{paths.receipts / VERIFIED_LOG}",
        )
        return confirmed
    digest = sha256_bytes(json.dumps(doc, sort_keys=True, default=str).encode())
    receipt: Receipt = {**doc, "digest": digest}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    hostname = re.sub(r"[^A-Za-z0-9.-]+", "-", prov.hostname)[:40]
    path = paths.receipts / f"{kind}-{stamp}-{hostname}.json"
    n = 1
    while path.exists():
        n += 1
        path = paths.receipts / f"{kind}-{stamp}-{hostname}-{n}.json"
    atomic_write_json(path, receipt, private=True)  # a record of a run: sources, env, errors
    events.emit("info", f"receipt written: {path}")
    return path


# ----------------------------------------------------------------------------- verifications

VERIFIED_LOG = "verified.jsonl"
_VERIFYING = ("provision", "verify")  # the kinds whose receipt only confirms when nothing changed


def _confirmed_by(folder: Path, doc: ReceiptBody) -> Path | None:
    """The newest provision or verify receipt in ``folder`` when ``doc`` is a passing verification
    (a provision that ran no step, or a verify) that differs from it in nothing: else None. A failed
    provision's receipt neither confirms nor is confirmed: it is always written."""
    if doc["kind"] not in _VERIFYING or not _verified(doc) or "error" in doc["software"]:
        return None
    newest = next(iter(receipt_files(folder, kinds=_VERIFYING)), None)
    if newest is None:
        return None
    try:
        ref = load_receipt(newest)
    except ConfigError:
        return None
    if ref["spec"] != doc["spec"] or "error" in ref["software"] or failure(ref) is not None:
        return None
    diffs = diff_receipts(ref, doc)
    if any(d.drift or d.section == "run" for d in diffs):
        return None
    return newest


def _verified(doc: ReceiptBody) -> bool:
    """A verification that passed: a verify that found no violation, or a provision that ran no
    step and finished."""
    payload = doc["payload"]
    if doc["kind"] == "provision":
        return not payload.get("ran") and failure(doc) is None
    return payload.get("ok") is not False


def _log_verification(folder: Path, doc: ReceiptBody, confirmed: Path) -> None:
    """One line: when, what, its payload, and what the confirmed receipt says otherwise (information
    only: another envbuild version or repository revision)."""
    line = {
        "created": doc["created"],
        "kind": doc["kind"],
        "confirms": confirmed.name,
        "host": doc["provenance"].get("hostname"),
        "payload": doc["payload"],
        "information": [d.to_dict() for d in diff_receipts(load_receipt(confirmed), doc)],
    }
    fd = os.open(folder / VERIFIED_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        # one write: one whole line
        os.write(fd, (json.dumps(line, sort_keys=True, default=str) + "\n").encode())
    finally:
        os.close(fd)


def verifications(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The lines of ``verified.jsonl`` by the receipt they confirm (file name), oldest first."""
    try:
        text = (folder / VERIFIED_LOG).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a full disk: the others stand
        if isinstance(entry, dict) and isinstance(entry.get("confirms"), str):
            out.setdefault(entry["confirms"], []).append(entry)
    return out


def receipt_files(folder: Path, kinds: tuple[str, ...] = KINDS) -> list[Path]:
    """The receipts in ``folder`` of these kinds (by file name), newest first."""
    try:
        prefixes = tuple(f"{k}-" for k in kinds)
        found = [p for p in folder.glob("*.json") if p.name.startswith(prefixes)]
        stamped = [(p.stat().st_mtime_ns, p.name, p) for p in found]
    except OSError:
        return []
    return [p for _, _, p in sorted(stamped, reverse=True)]


def load_receipt(path: Path) -> LoadedReceipt:
    """Load a receipt file, or the newest receipt in a folder; ``ConfigError`` when it is not
    one."""
    if path.is_dir():
        found = receipt_files(path)
        if not found:
            raise ConfigError(
                f"{path} holds no receipts ({'|'.join(KINDS)}-*.json)",
                hint=(
                    "Every provision, verify, smoke and dist-step writes one "
                    "under <data root>/receipts."
                ),
            )
        path = found[0]
    if not path.is_file():
        raise ConfigError(f"no receipt at {path}", hint="Receipts live under <data root>/receipts.")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); it is not an envbuild receipt"
        ) from exc
    return validate(doc, path)


# what a failed provision left of the venv when it left it as it was (``provision.restore``)
AS_IT_WAS = ("untouched", "not-made", "restored")


def last_provision(folder: Path) -> LoadedReceipt | None:
    """The newest readable ``provision`` receipt in ``folder`` that left the venv as it is now
    (None: none there): how the last provision that changed the data root's venv ended
    (``diff.failure``). A failed run that left the venv as it was (``failure.venv.state``: nothing
    installed, or restored) is passed over: the venv is the one before it."""
    for path in receipt_files(folder, kinds=("provision",)):
        try:
            doc = load_receipt(path)
        except ConfigError:
            continue
        payload = doc.get("payload")
        failed = payload.get("failure") if isinstance(payload, dict) else None
        venv = failed.get("venv") if isinstance(failed, dict) else None
        if isinstance(venv, dict) and venv.get("state") in AS_IT_WAS:
            continue
        return doc
    return None
