"""The lock stage: the typed ``lock.json`` (``model``), its step files (``stepfile``), which specs a
lock serves (``serve``), compiling a lock (``compile``), the CI gate (``check``, its dry-run rule in
``dryrun``, their shared types in ``report``; ``anyfile`` and ``anyformat`` for any lockfile format) and the PEP 751
export (``pylock``)."""
