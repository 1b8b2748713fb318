"""The ABI guard: after every step, prove torch and the protected set were not touched.

The per-step check reads installed metadata only (dist-info folders and RECORD files; no
``import torch``), in milliseconds. One full ``import torch`` check runs at the end.

Rules:
- the ABI package (torch) has the baseline version, local tag and CUDA version;
- its RECORD is byte-identical (a reinstall that changes a byte, another build of the same
  version, is a violation: the files were rewritten under a running stack's feet); when RECORD
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
``cp -a``, a restore from backup, a container export, a ``touch``. So it is content only, and it
lives in envbuild's manifest: nothing is written into the dist-info folders it protects (the venv
is the one ``uv sync`` makes, file for file: ``uv sync`` and ``uv run`` find nothing to redo):
- ``record_sha256``: the sha256 of RECORD's bytes: another build of the same version, or a
  reinstall by pip (its RECORD lists the ``.pyc`` it compiles, whose headers carry the new source
  mtimes), writes another RECORD;
- ``payload_sha256``: the sha256 of the RECORD rows for files in site-packages outside the
  dist-info and ``__pycache__`` (the wheel's own files, not the scripts an installer writes), which
  tells "the same build reinstalled" from "a different build";
- ``record_key`` (inode, mtime_ns, size of RECORD) is a cache key only: while it is unchanged the
  files are the ones the baseline saw; when it changed, every file RECORD lists is checked
  (size, and sha256 for files up to ``LAZY_HASH_LIMIT``) once per process, so a file changed after
  the install (in place, or in a copy) is caught.
A reinstall that leaves every byte as it was (uv's of the very same wheel, whose RECORD is
identical) changes nothing the guard protects and is not reported. A baseline frozen by an older
envbuild, which wrote the stamp ``ENVBUILD_BASELINE`` into the dist-info, is still held to it.

The modules, in the order they import each other:
- ``site.py``         reading site-packages: distributions, RECORD, torch's versions
- ``buildrecord.py``  the build record of a wheel ``envbuild wheelhouse build`` made
- ``baseline.py``     the baseline, the protected set
- ``rules.py``        the rules above, the culprits, the final ``import torch`` check
The names the rest of envbuild uses are re-exported here (``guard.check``, ``guard.scan``).
"""

from __future__ import annotations

from envbuild.guard.baseline import (
    Baseline,
    protected_names,
    protected_set,
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
    shared_files,
    site_packages,
)

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = ()

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
    "shared_files",
    "site_packages",
    "take_baseline",
    "unmet_requirements",
]
