"""Fixtures built from real artifacts: tiny wheels, a local HTTP index. (Filled in by tests/support.)"""
