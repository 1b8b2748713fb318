"""The lock stage: the typed ``lock.json`` (``model``), its step files (``stepfile``), which specs a
lock serves (``serve``), compiling a lock (``compile``), the check of envbuild's own locks (``check``,
its dry-run rule in ``dryrun``, their shared types in ``report``) and the PEP 751 export (``pylock``).

Judging any other lockfile (uv.lock, poetry.lock, pylock.toml, requirements) is the gate's, a stage
of its own: ``envbuild.gate``."""
