"""The host: facts about the machine (GPUs, topology, compilers) and the preflight checks."""
