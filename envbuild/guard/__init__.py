"""The ABI guard: after every step, prove torch and the protected set were not touched.

The per-step check reads installed metadata only (dist-info folders and RECORD files; no
``import torch``), in milliseconds. One full ``import torch`` check runs at the end.

Rules:
- the ABI package (torch) has the baseline version, local tag and CUDA version;
- its RECORD is byte-identical and still lists the baseline stamp (a reinstall of the same
  version is a violation: the files were rewritten under a running stack's feet); when RECORD
  is no longer the very file the baseline saw (a layer commit, ``cp -a``, a restore), the files
  it lists are checked against it once (see "Identity" below);
- every protected distribution (torch's triton and nvidia-* runtime wheels, ``abi.protect``)
  keeps its version and RECORD;
- no second distribution provides the ``triton`` module;
- no file is owned by two distributions unless the spec acknowledges the overlap, and then the
  acknowledged winner's copy is the one on disk;
- a wheel built by ``envbuild wheelhouse`` was built against the installed torch.
A ``--no-deps`` step's unmet requirements are reported (warning; error with ``--strict``).

Identity. What says "this is still the torch the baseline saw" must survive what happens to an
environment that nobody reinstalled: an image layer commit (new inodes, whole-second mtimes), a
``cp -a``, a restore from backup, a container export, a ``touch``. So it is content only:
- ``record_sha256``: the sha256 of RECORD's bytes;
- the baseline stamp: when the baseline is frozen, envbuild writes ``ENVBUILD_BASELINE`` into the
  dist-info and lists it in RECORD, as an installer lists INSTALLER. Every installer (pip, uv)
  uninstalls by RECORD and writes a fresh RECORD from the wheel, so a reinstall, even of the
  byte-identical wheel by uv (whose RECORD is otherwise identical), loses the line and the file.
  The stamp's content is deterministic (the pre-stamp RECORD's sha256), so two provisions of the
  same stack still have equal RECORDs and receipts compare equal;
- ``payload_sha256``: the sha256 of the RECORD rows for files in site-packages outside the
  dist-info and ``__pycache__`` (the wheel's own files, not the scripts an installer writes), which
  tells "the same build reinstalled" from "a different build";
- ``record_key`` (inode, mtime_ns, size of RECORD) is a cache key only: while it is unchanged the
  files are the ones the baseline saw; when it changed, every file RECORD lists is checked
  (size, and sha256 for files up to ``LAZY_HASH_LIMIT``) once per process.
An adopted environment (``abi.adopt``: someone else's, left byte-for-byte alone) and one whose
dist-info cannot be written are unstamped: a pip reinstall is still caught (pip lists the ``.pyc``
it compiles, whose headers carry the new source mtimes), a uv reinstall of the byte-identical wheel
is not.

The modules, in the order they import each other:
- ``site.py``         reading site-packages: distributions, RECORD, torch's versions
- ``buildrecord.py``  the build record of a wheel ``envbuild wheelhouse build`` made
- ``baseline.py``     the baseline, the protected set, the baseline stamp
- ``rules.py``        the rules above, the culprits, the final ``import torch`` check
The names the rest of envbuild uses are re-exported here (``guard.check``, ``guard.scan``).
"""

from __future__ import annotations

from envbuild.guard.baseline import (
    Baseline,
    protected_names,
    protected_set,
    stamp_dist,
    take_baseline,
)
from envbuild.guard.rules import (
    FULL_CHECK,
    FULL_CHECK_MODULES,
    GuardReport,
    Violation,
    check,
    culprits,
    full_check_result,
    requirers,
    unmet_requirements,
)
from envbuild.guard.site import (
    LAZY_HASH_LIMIT,
    STAMP,
    Dist,
    active,
    active_requirements,
    changed,
    clear_cache,
    files_differ,
    read_cuda,
    read_runtime_version,
    record_hash,
    scan,
    scan_one,
    site_packages,
)

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "the baseline stamp (``ENVBUILD_BASELINE``) in the dist-info folders it protects",
)

__all__ = [
    "Baseline",
    "Dist",
    "FULL_CHECK",
    "FULL_CHECK_MODULES",
    "GuardReport",
    "LAZY_HASH_LIMIT",
    "STAMP",
    "Violation",
    "active",
    "active_requirements",
    "changed",
    "check",
    "clear_cache",
    "culprits",
    "files_differ",
    "full_check_result",
    "protected_names",
    "protected_set",
    "read_cuda",
    "read_runtime_version",
    "record_hash",
    "requirers",
    "scan",
    "scan_one",
    "site_packages",
    "stamp_dist",
    "take_baseline",
    "unmet_requirements",
]
