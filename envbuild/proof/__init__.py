"""Proof that an environment works and what it is: kernel smoke tests (``smoke``), the distributed
training step (``diststep``), the installed inventory, provenance and receipts."""
