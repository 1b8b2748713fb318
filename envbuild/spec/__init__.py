"""The stack spec and its readers.

- ``stack.py``     ``lockfiles/<profile>/stack.toml``: load, validate, freeze (``StackSpec``); its
                   names are re-exported here (``from envbuild.spec import StackSpec``)
- ``spec/stepfile.py``  the step files a lock writes (``NN-step.txt``): the one parser
- ``spec/_toml.py``     bounded TOML reading with dotted-path errors and did-you-mean
"""

from __future__ import annotations

from envbuild.spec.stack import (
    ABI,
    DEFAULT_PLATFORM,
    SCHEMA_VERSION,
    SECRET_NAME,
    SHELL_RESERVED,
    SOURCE_SCHEMES,
    UPGRADE_STRATEGIES,
    EnvFrom,
    Host,
    Layout,
    Overlap,
    StackSpec,
    Step,
    Target,
    UpgradeStrategy,
    available_profiles,
    load_spec,
    lockfiles_dirs,
    parse_spec,
    profile_path,
    resolve_spec,
    spec_digest,
)

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = ("``lockfiles/<profile>/stack.toml`` (read)",)

__all__ = [
    "ABI",
    "DEFAULT_PLATFORM",
    "EnvFrom",
    "Host",
    "Layout",
    "Overlap",
    "SCHEMA_VERSION",
    "SECRET_NAME",
    "SHELL_RESERVED",
    "SOURCE_SCHEMES",
    "StackSpec",
    "Step",
    "Target",
    "UPGRADE_STRATEGIES",
    "UpgradeStrategy",
    "available_profiles",
    "load_spec",
    "lockfiles_dirs",
    "parse_spec",
    "profile_path",
    "resolve_spec",
    "spec_digest",
]
