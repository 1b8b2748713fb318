"""The host: facts about the machine (GPUs, topology, compilers) and the preflight checks."""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = ()
