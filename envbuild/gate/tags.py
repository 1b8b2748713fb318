"""Whether a distribution file installs in one of the gate's environments (a platform key's words,
``linux x86_64``, and a Python minor): an sdist always may; a wheel when one of its tags is one
pip on such a host accepts (``packaging.tags``, every manylinux up to glibc 2.45, macOS 10.9 to 16)."""

from __future__ import annotations

import functools

from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

__all__ = ["installs_on"]

_SDIST = (".tar.gz", ".zip", ".tar.bz2", ".tgz")


@functools.lru_cache(maxsize=64)
def _tags(platform: str, python: str) -> frozenset[str]:
    system, _, arch = platform.partition(" ")
    if system == "linux":
        plats = [f"manylinux_2_{n}_{arch}" for n in range(45, 4, -1)]
        plats += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}", f"linux_{arch}",
                  *(f"musllinux_1_{n}_{arch}" for n in range(2, -1, -1))]
    elif system == "macos":
        plats = [f"macosx_{major}_{minor}_{a}" for major in range(16, 9, -1) for minor in (range(16) if major == 10 else (0,))
                 for a in (arch, "universal2", "intel" if arch == "x86_64" else arch)]
    else:
        plats = ["win_amd64"]
    major, minor = (int(x) for x in python.split(".")[:2])
    tags = [*cpython_tags((major, minor), platforms=plats),
            *compatible_tags((major, minor), interpreter=f"cp{major}{minor}", platforms=plats)]
    return frozenset(str(t) for t in tags)


def installs_on(filename: str, platform: str, python: str) -> bool:
    if filename.lower().endswith(_SDIST):
        return True
    if not filename.endswith(".whl"):
        return True  # not a file name the gate reads (a URL without one): not said to be missing
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return True
    fits = _tags(platform, python)
    return any(str(t) in fits for t in tags)
