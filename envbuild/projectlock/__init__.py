"""Project locks: provision from the lock a project already commits (uv.lock, pylock.toml, ...:
``provision --lock``, ``plan --lock``, and the other ``--lock`` front ends). envbuild's own
per-step locks of a stack spec are stack locks (``envbuild.stacklock``).

The data flow, one way: the front end's one typed request (``request.LockRequest``) goes down,
and each step hands its typed result to the next.

- the gate, in one call (``gate.selection.judge_selection``): the lock read once (uv.lock,
  pylock.toml: the formats provision installs from), its Python, the one environment of it to
  install (this host's platform, the selection uv's export names) and the verdict on what it
  installs;
- ``stages``: the install stages of that environment, each package a typed pin with the reason it
  is there: torch and its runtime, prebuilt extensions, the rest, source builds against the
  installed torch, the project;
- ``rebuild``: ``--rebuild-mismatched``, a prebuilt extension the gate fails for its ABI moves to
  the source builds, from its sdist (the lock's, else its index's, pinned by sha256);
- ``stagestack``: the stages as a stack of hash-pinned steps for ``envbuild.provision``;
- ``run``: prepare (``request``), adopt the torch a venv already has (``adopt``), pin the files the
  lock has no hash for (``unhashed``), then provision (guard after every stage; exact sync after
  the last: ``envbuild.provision.exact``).

Beside that path: ``offlinefiles`` (the environment's files mirrored into a wheelhouse and
installed from it), ``offlinebuilds`` (the build requirements of its isolated builds, likewise),
``hostfit`` (``preflight --lock``: the host against the lock's torch), ``image`` (``docker
--lock``), ``record`` (what a lock provision leaves in its venv).
"""

from __future__ import annotations

from envbuild.projectlock.run import LockRequest, Prepared, prepare, provision_lock

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``<root>/.envbuild/{adopted.json,unhashed.json,unhashed/,builds/}``",
    "``<root>/cache/envbuild/prepared-lock.pickle``",
    "the ``lock`` section of ``<venv>/envbuild-environment.json`` (``record.py``)",
)

__all__ = ["LockRequest", "Prepared", "prepare", "provision_lock"]
