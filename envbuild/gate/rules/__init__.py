"""One module per rule family; each has ``check(ctx: Context) -> None`` and adds its findings.

- ``pins``          one exact torch per environment, its minimum and local tag, protected pins,
                    PyPI triton beside pytorch-triton, markers that do not parse
- ``requirements``  declared requirements on torch that the environment's torch does not satisfy
- ``extensions``    prebuilt extensions against the torch they are installed with
  (``envbuild.abitag``)
- ``runtime``       torch's own runtime requirements are locked
- ``conda``         conda packages (pixi.lock) whose ``depends`` pin another pytorch build
- ``overlaps``      files two installed packages both own: a finding over torch's, else a note
- ``history``       ``--base REF``: downgrades, re-tags and lost torches, per environment
- ``ownlock``       envbuild's own locks (a stack's lock.json and step files): a family of its own,
                    on the steps in order, run by ``ownlock.check_stack``; it shares ``history``'s
                    judgement of a version change and ``pins``' PyPI-triton reasons

A new rule is a function in the family it belongs to (or a new module listed in ``FAMILIES``)
plus a line in ``envbuild.gate.findings.RULES`` (``OWN_RULES`` for envbuild's own locks).
"""

from __future__ import annotations

from envbuild.gate.rules import conda, extensions, overlaps, pins, requirements, runtime

# history runs apart: it needs the base lock
FAMILIES = (pins, requirements, extensions, runtime, conda, overlaps)

__all__ = ["FAMILIES"]
