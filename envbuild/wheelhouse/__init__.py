"""Wheelhouse: CUDA extension wheels built against the installed torch, and mirrors of a lock.

What lives where:

- ``spec.py``    ``wheelhouse_specs/*.toml``: load, validate, freeze (``WheelSpec``).
- ``build.py``   fetch the source, patch, build with the target venv's python (no build
                 isolation, against the torch installed there), content-addressed cache.
- ``repack.py``  strip ``Requires-Dist``, retag ``+cu132torch2.12.0.dev...``, add the
                 provenance record, rewrite RECORD, refuse unsafe archives.
- ``mirror.py``  download every locked artifact (hash-checked, resumable, parallel).
- ``stackmirror.py``  a stack's (or requirement files') locked files chosen for its target,
                 mirrored, its git pins built (``wheelhouse mirror``).
- ``vcsbuild.py``  git/URL pins built into wheels at their commit.
- ``pages.py``   PEP 503 pages over a folder.
- ``sharedcache.py``  the fleet's shared build cache (``--build-cache DIR|URL``): each key built
                 by one host under a lease, checked before it is installed anywhere.
- ``lease.py``   the lease on a shared filesystem (NFS-safe create, heartbeat, takeover).

This module is kept light: the provenance record's file name, reader and check live in
``envbuild.guard.buildrecord`` (below the ABI guard, which reads them without importing the
wheelhouse) and are re-exported here; ``local_tag`` names what a build was made against.
"""

from __future__ import annotations

from envbuild.guard.buildrecord import (
    PROVENANCE_FILE,
    PROVENANCE_SCHEMA,
    provenance_mismatch,
    read_provenance,
)

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``wheelhouse_specs/*.toml`` (read)",
    "``<out>/{*.whl,wheelhouse.json,simple/,index.html}``",
    "``$ENVBUILD_CACHE_DIR/wheelhouse/``",
    "``--build-cache DIR``: ``{wheels/<key>/,leases/,by-sha256/,tmp/}``",
)

__all__ = [
    "PROVENANCE_FILE",
    "PROVENANCE_SCHEMA",
    "local_tag",
    "provenance_mismatch",
    "read_provenance",
]


def local_tag(torch_version: str, torch_cuda: str | None) -> str:
    """The local version label of a wheel built against ``torch_version``.

    ``("2.12.0.dev20260405+cu132", "13.2")`` -> ``"cu132torch2.12.0.dev20260405"``;
    a CPU torch (``torch.version.cuda`` is None) gives ``"cputorch2.13.0"``.
    Written by ``envbuild.abitag.format_label``, the one writer of the labels
    ``envbuild.abitag.parse_claim`` reads back.
    """
    from envbuild.abitag import format_label

    return format_label(torch_version, torch_cuda)
