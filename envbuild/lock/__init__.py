"""The lock stage: the model of ``lock.json`` and its step files (``model``), compiling a lock
(``compile``), the CI gate (``check`` with its dry-run rule in ``dryrun``) and the PEP 751 export
(``pylock``)."""
