"""The final check of an environment: the ABI guard, then ``import torch`` in the venv's python.

``provision`` runs it last and ``verify`` runs it on demand; both call ``final_check``.

The import is the slow part (2-3 s for torch on a warm disk, and every re-run of a finished
provision paid it). Its verdict is cached in ``<root>/.envbuild/import-verdict.json`` under a
fingerprint of everything the import can depend on that envbuild can see: the RECORD of every
distribution in the environment, its hash and its file's inode, mtime and size ( a reinstall,
upgrade, removal or new package changes it), the
interpreter (its real path, size and mtime) and the environment overlay's variables. A re-run
whose fingerprint matches reuses the verdict and says so (``cached``, in the output and the
receipt); anything else imports again. ``verify`` always imports (that is what it is asked).

A hung import (a dead driver, a stuck network file system) is stopped at ``timeout``: the
caller gets ``ImportHang`` and turns it into its own exit code (5 for provision, 7 for verify).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from envbuild import guard
from envbuild._io import atomic_write_json
from envbuild.installer import run_python_json
from envbuild.spec import StackSpec

if TYPE_CHECKING:
    from envbuild.proof.receipt import SoftwareJSON

__all__ = ["IMPORT_TIMEOUT", "FinalCheck", "ImportHang", "final_check", "fingerprint"]

# seconds for `import torch`: minutes on a cold network file system, never forever
IMPORT_TIMEOUT = 300.0
VERDICT_SCHEMA = 1


class ImportHang(Exception):
    """The import check did not finish within its timeout (the message says what and how long)."""


@dataclass
class FinalCheck:
    report: guard.GuardReport
    data: dict[str, Any] | None = None  # FULL_CHECK's answer: version, cuda, file
    # guard violations, then import findings
    findings: list[guard.Violation] = field(default_factory=list)
    cached: bool = False  # the import verdict was reused (the fingerprint matched)
    fingerprint: str | None = None
    import_seconds: float = 0.0
    # with a cached verdict: the receipt's inventory recorded with it
    software: SoftwareJSON | None = None
    # a fresh import's loaded source files, relative to site-packages
    modules: list[str] | None = None

    @property
    def ok(self) -> bool:
        return not self.findings


def fingerprint(site: Path, python: Path, overlay: Mapping[str, str]) -> str:
    """A digest of every distribution's RECORD, the interpreter and the overlay's variables."""
    h = hashlib.sha256()
    for name, dist in sorted(guard.scan(site).items()):
        # the RECORD's hash, and where it sits (inode, mtime, size): a reinstall of the same files
        # counts
        h.update(f"{name}\0{dist.version}\0{dist.record_sha256}\0{dist.record_key}\n".encode())
    real = Path(os.path.realpath(python))
    try:
        st = real.stat()
        h.update(f"python\0{real}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    except OSError:
        h.update(f"python\0{real}\0missing\n".encode())
    h.update(json.dumps(sorted(overlay.items())).encode())
    return h.hexdigest()


def import_env(overlay: Mapping[str, str]) -> dict[str, str]:
    """The environment the import check (and the import warm-up) runs with: this process's, plus the
    overlay."""
    return {**os.environ, **overlay}


def final_check(
    spec: StackSpec,
    *,
    baseline: guard.Baseline,
    site: Path,
    python: Path,
    marker_env: Mapping[str, str] | None,
    overlay: Mapping[str, str],
    run_guard: bool = True,
    verdict_file: Path | None = None,
    timeout: float = IMPORT_TIMEOUT,
    import_after_violation: bool = False,
    on_fresh_import: Callable[[], None] | None = None,
    guard_keep: Path | None = None,
) -> FinalCheck:
    """The guard (unless ``run_guard`` is False: it has just run on this very state), then the
    import.

    With ``verdict_file``, a verdict recorded under the same fingerprint is reused, and a fresh
    passing one is recorded. Guard violations stop the check unless ``import_after_violation``
    (``verify`` reports everything). ``on_fresh_import`` is called just before a real import
    (provision starts the receipt's inventory beside it). ``guard_keep``: the guard's file of the
    files the distributions share (``guard.check``'s ``keep``). Raises ``ImportHang`` when it hangs.
    """
    report = (
        guard.check(spec, baseline, site, marker_env=marker_env, keep=guard_keep)
        if run_guard
        else guard.GuardReport()
    )
    out = FinalCheck(report=report, findings=list(report.violations))
    if report.violations and not import_after_violation:
        return out  # the environment changed under us: provision stops here
    if report.violations:
        verdict_file = None  # never cache a verdict on an environment the guard rejects
    key = fingerprint(site, python, overlay) if verdict_file is not None else None
    out.fingerprint = key
    if verdict_file is not None and key is not None and _reused(out, spec, verdict_file, key):
        return out
    if on_fresh_import is not None:
        on_fresh_import()
    data = _imported(out, spec, site, python, overlay, timeout)
    if data is None:
        return out
    out.findings += guard.full_check_result(spec, data)
    if verdict_file is not None and key is not None and out.ok:
        atomic_write_json(
            verdict_file,
            {
                "schema": VERDICT_SCHEMA,
                "fingerprint": key,
                "data": out.data,
                "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            private=True,
        )
    elif verdict_file is not None:
        verdict_file.unlink(missing_ok=True)
    return out


def _reused(out: FinalCheck, spec: StackSpec, verdict_file: Path, key: str) -> bool:
    """A verdict recorded under the fingerprint ``key``, taken into ``out`` (with the inventory
    recorded beside it); False when there is none."""
    doc = _load_verdict(verdict_file, key)
    if doc is None:
        return False
    out.data, out.cached = doc["data"], True
    found = doc.get("software")
    out.software = cast("SoftwareJSON", found) if isinstance(found, dict) else None
    out.findings += guard.full_check_result(spec, out.data)
    return True


def _imported(
    out: FinalCheck,
    spec: StackSpec,
    site: Path,
    python: Path,
    overlay: Mapping[str, str],
    timeout: float,
) -> dict[str, Any] | None:
    """``import torch`` in ``python``: its answer (also taken into ``out``, with the modules it
    loaded); None when it failed (the failure is the finding), ``ImportHang`` when it hangs."""
    env = import_env(overlay)
    t = time.monotonic()
    try:
        out.data = data = run_python_json(
            python,
            guard.FULL_CHECK_MODULES,
            timeout=timeout,
            env=env,
            what=f"`import {spec.abi.package}` in {python}",
        )
        loaded = out.data.pop("modules", None) if isinstance(out.data, dict) else None
        if isinstance(loaded, list):
            out.modules = _under(site, loaded)
    except TimeoutError as exc:
        raise ImportHang(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - any failure to import is the verdict
        out.findings.append(
            guard.Violation("import", spec.abi.package, f"import {spec.abi.package} fails: {exc}")
        )
        return None
    finally:
        out.import_seconds = round(time.monotonic() - t, 3)
    return data


def _under(site: Path, files: list[Any]) -> list[str]:
    """The files inside ``site``, relative to it (the standard library's have their bytecode
    already)."""
    root = os.path.realpath(site) + os.sep
    out = []
    for f in files:
        if isinstance(f, str):
            real = os.path.realpath(f)
            if real.startswith(root):
                out.append(real[len(root) :])
    return out


def remember_software(path: Path, check: FinalCheck, software: SoftwareJSON) -> None:
    """Keep the receipt's inventory beside a fresh passing verdict: a run that reuses the
    verdict (the same distributions) reuses it too, instead of a subprocess listing them again."""
    if check.cached or not check.ok or check.fingerprint is None:
        return
    doc = _load_verdict(path, check.fingerprint)
    if doc is not None:
        atomic_write_json(path, {**doc, "software": software}, private=True)


def _load_verdict(path: Path, key: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != VERDICT_SCHEMA
        or doc.get("fingerprint") != key
    ):
        return None
    return doc if isinstance(doc.get("data"), dict) else None
