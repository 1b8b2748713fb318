"""Stack locks: envbuild's own per-step locks, made from a stack spec (``envbuild lock``) and
committed beside it (``lockfiles/<profile>/``): the typed ``lock.json`` (``model``), which specs a
lock serves and the step files it gives them (``serve``), making a lock (``make``, one step at a
time by ``compile``), relocking (``relock``), what moved (``changes``) and the PEP 751 export
(``pylock``).

A lock a *project* commits (uv.lock, pylock.toml, poetry.lock, ...) is a project lock:
``envbuild.projectlock`` installs one (``--lock FILE``), and the gate (``envbuild.gate``) judges
both kinds: stack locks by its ``rules.ownlock`` family, project locks by the rest."""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``lockfiles/<profile>/{NN-step.txt,lock.json,pylock.toml}``",
    "``$ENVBUILD_CACHE_DIR/{lock-venvs,lock-logs,pip-tools}/``",
)
