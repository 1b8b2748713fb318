"""Proof that an environment works and what it is: kernel smoke tests (``smoke``), the distributed
training step (``diststep``), the installed inventory, provenance and receipts."""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``<root>/receipts/<kind>-<time>-<host>.json``",
    "``<root>/receipts/verified.jsonl``",
)
