"""Provision: the orchestrator (``core``), its on-disk state (``state``) and the download
prefetcher."""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``<root>/.envbuild/{manifest.json,lock,constraints.txt,import-verdict.json,python-probe.json,shared-files.json}``",
    "``<root>/cache/envbuild/import-*.json``",
    "``<root>/cache/prefetch/``",
    "``<root>/logs/{import-warmup.log,exact-sync.log}``",
)
