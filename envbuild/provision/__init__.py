"""Provision: the orchestrator (``core``), its on-disk state (``state``) and the download prefetcher."""
