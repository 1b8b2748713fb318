"""The lock stage: the typed ``lock.json`` (``model``), its step files (``stepfile``), which specs a
lock serves (``serve``), compiling a lock (``compile``, ``stack``), relocking (``relock``) and the
PEP 751 export (``pylock``).

This stage makes locks; judging them is the gate's (``envbuild.gate``): envbuild's own locks by its
``rules.ownlock`` family, any other lockfile (uv.lock, poetry.lock, pylock.toml, requirements) by
the rest."""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``lockfiles/<profile>/{NN-step.txt,lock.json,pylock.toml}``",
    "``$ENVBUILD_CACHE_DIR/{lock-venvs,lock-logs,pip-tools}/``",
)
