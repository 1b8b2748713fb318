"""A stand-in module written for envbuild's tests (the project's own source is not copied here)."""
