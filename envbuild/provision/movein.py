"""A lock's step installed by moving its prepared prefix into the venv: renames, not links.

``provision.prepare`` has uv install every step into a scratch prefix of its own (``uv pip install
--no-deps --prefix``) before the venv is touched: that is how uv's cache gets each file, and it lays
them out as uv lays out a venv, ``lib/python3.X/site-packages``, ``bin``, data and headers, every
RECORD row as a venv's (measured with uv 0.13.9: the prefix and a venv install of the same wheels
differ only in the scripts' first line, the interpreter's path, and so in their RECORD rows). The
step linking the same files again from the cache, and the prefix's tens of thousands of links being
removed beside it, was the lock run's only install work that ``uv sync`` does not do.

So a step whose prefix holds its every line moves it in (``move_in``): each entry of the prefix is
renamed to the same place in the venv, a whole folder where the venv has none of that name (a
package: one rename), else entry by entry inside it. Each script uv wrote for the scratch's
interpreter (``#!<its python>``) is written again for the venv's (``#!<venv>/bin/python``, as uv
writes it for the venv), and its RECORD row with it. The files are uv's own, unchanged: the same
links to its cache, the same ``INSTALLER``, ``REQUESTED``, ``direct_url.json`` and ``RECORD``.

Whatever the move could not do exactly as uv would, it does not start (it says why, and the step
installs from uv's cache as before), decided before the first rename:

- a distribution of the prefix is already in the venv (uv would remove the old one first), or a
  file of the prefix is (uv would overwrite it: an overlap, whose winner the step's own order
  decides) or a folder is a link there;
- the prefix is not laid out as the venv (an interpreter whose prefix scheme is not a venv's: a
  Debian system Python's ``local/lib/python3.X/dist-packages``), or on another filesystem;
- a script's first line is not the simple ``#!<python>`` (uv writes a ``/bin/sh`` wrapper for an
  interpreter path over 127 bytes or with a space), or the venv's would not be;
- the step compiles bytecode (``UV_COMPILE_BYTECODE``), or installs a package after the rest
  (``install_last``): those are uv's runs. (A step whose builds need the installed torch is never
  prepared into a prefix, so it has none to move.)
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuild.errors import InstallError
from envbuild.provision.prefetch import prefix_sites

__all__ = ["Moved", "move_in", "shebang_ok"]

_MAX_SHEBANG = 127  # uv's limit for a plain ``#!`` line (with ``#!`` and the newline)
_HEAD = 4096  # the most of a script read for its first line
_WRAPPED = b"'" * 3 + b"exec' "  # the second line of uv's ``/bin/sh`` wrapper


@dataclass
class Moved:
    """What a move did: the distributions moved in, the renames and the scripts written again."""

    names: list[str] = field(default_factory=list)
    renames: int = 0
    scripts: int = 0


def shebang_ok(python: str) -> bool:
    """Whether uv writes a script's first line for ``python`` as the plain ``#!<python>``."""
    return len(python) + 3 <= _MAX_SHEBANG and " " not in python and python.startswith("/")


def move_in(
    trees: Sequence[Path],
    venv: Path,
    site: Path,
    *,
    scratch_python: Path,
    venv_python: str,
    installed: Iterable[str],
) -> Moved | str:
    """Move the prefixes ``trees`` into ``venv`` (whose purelib is ``site``); where that would not
    be what uv's install makes (module docstring), nothing is changed and the reason is returned.
    ``scratch_python``: the interpreter the prefixes were installed with; ``venv_python``: the
    path uv writes in the venv's scripts; ``installed``: the canonical names the venv holds."""
    if not trees:
        return "nothing prepared"
    if not shebang_ok(venv_python):
        return f"uv writes the scripts for {venv_python} another way"
    try:
        rel = site.relative_to(venv)
        venv_dev = os.stat(venv).st_dev
    except (ValueError, OSError):
        return f"the venv's site-packages {site} is not under {venv}"
    have = set(installed)
    moves: list[tuple[str, str]] = []
    rewrites: list[tuple[Path, bytes]] = []  # (file, its new bytes): scripts, then RECORDs
    names: list[str] = []
    seen: set[str] = set()
    scratch_real = os.path.realpath(scratch_python)
    for tree in trees:
        try:
            if os.stat(tree).st_dev != venv_dev:
                return f"{tree} is on another filesystem than the venv"
        except OSError as exc:
            return f"{tree}: {exc.strerror}"
        sites = prefix_sites(tree)
        if sites != [tree / rel]:
            return f"{tree} is not laid out as the venv ({rel})"
        infos = sorted(p for p in sites[0].iterdir() if p.name.endswith(".dist-info"))
        for info in infos:
            name = canonicalize_name(info.name[: -len(".dist-info")].rsplit("-", 1)[0])
            if name in have or name in seen:
                return f"{name} is already in the venv"
            seen.add(name)
            names.append(name)
        scripts = _scripts(tree / "bin", scratch_real, venv_python)
        if scripts is None:
            return f"a script in {tree / 'bin'} is not the plain form uv writes"
        if scripts:
            records = _records(sites[0], infos, scripts)
            if records is None:
                return "a script's RECORD row is not as uv writes it"
            rewrites += [(path, data) for path, (data, _) in scripts.items()] + records
        try:
            if (there := _plan(tree, venv, moves, top=True)) is not None:
                return f"{there} is in the way"
        except OSError as exc:
            return f"{tree}: {exc.strerror}"
    # decided: the scripts and RECORDs are written again in the prefix (new files: a link into
    # uv's cache is never written through), then everything is renamed into place
    done = 0
    try:
        for path, data in rewrites:
            _replace(path, data)
        for src, dst in moves:
            os.rename(src, dst)
            done += 1
    except OSError as exc:
        where = exc.filename or (moves[done][0] if done < len(moves) else trees[0])
        raise InstallError(
            f"moving the prepared files into the venv stopped at {where}: {exc.strerror}"
            f" ({done} of {len(moves)} entries moved)",
            hint="The venv holds part of this step; `provision` run again installs the step from"
            " uv's cache over it.",
        ) from exc
    written = sum(1 for path, _ in rewrites if path.name != "RECORD")
    return Moved(names=names, renames=len(moves), scripts=written)


def _scripts(
    bin_dir: Path, scratch_real: str, venv_python: str
) -> dict[Path, tuple[bytes, bytes]] | None:
    """{script: (its bytes for the venv, the bytes it has)} of each script in ``bin_dir`` whose
    first line names the scratch's interpreter; None where one is uv's ``/bin/sh`` wrapper."""
    out: dict[Path, tuple[bytes, bytes]] = {}
    try:
        with os.scandir(bin_dir) as listed:
            entries = list(listed)
    except FileNotFoundError:
        return out
    except OSError:
        return None
    for entry in entries:
        if not entry.is_file(follow_symlinks=False):
            continue
        path = Path(entry.path)
        try:
            with open(path, "rb") as f:
                head = f.read(_HEAD)
                if not head.startswith(b"#!"):
                    continue
                first, nl, rest = head.partition(b"\n")
                if not nl:
                    return None  # a first line longer than anything uv writes
                if first == b"#!/bin/sh" and rest.startswith(_WRAPPED):
                    return None  # uv's wrapper of a long or spaced interpreter path
                named = os.fsdecode(first[2:].strip())
                if not named.startswith("/") or os.path.realpath(named) != scratch_real:
                    continue  # a script of the wheel's own (another interpreter): as it is
                f.seek(0)
                old = f.read()
        except OSError:
            return None
        new = b"#!" + os.fsencode(venv_python) + old[len(first) :]
        out[path] = (new, old)
    return out


def _records(
    site: Path, infos: Sequence[Path], scripts: dict[Path, tuple[bytes, bytes]]
) -> list[tuple[Path, bytes]] | None:
    """The RECORDs of ``infos`` with each rewritten script's row written again (its sha256 and
    size), as uv writes it; None where a script's row is not there as uv writes it."""
    rows = {os.path.relpath(path, site): data for path, (data, _) in scripts.items()}
    found: set[str] = set()
    out: list[tuple[Path, bytes]] = []
    for info in infos:
        record = info / "RECORD"
        try:
            text = record.read_bytes()
        except OSError:
            return None
        lines = text.split(b"\n")
        changed = False
        for i, line in enumerate(lines):
            path = os.fsdecode(line.split(b",", 1)[0])
            if path in rows and line.count(b",") == 2:
                data = rows[path]
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                lines[i] = b"%s,sha256=%s,%d" % (os.fsencode(path), digest, len(data))
                found.add(path)
                changed = True
        if changed:
            out.append((record, b"\n".join(lines)))
    return out if found == set(rows) else None


def _plan(src: Path, dst: Path, moves: list[tuple[str, str]], *, top: bool = False) -> Path | None:
    """Add to ``moves`` the renames that put ``src``'s entries at the same places under ``dst``;
    the first path in the way (a file there, or a link where a folder merges), or None."""
    with os.scandir(src) as entries:
        listed = list(entries)
    for entry in listed:
        there = dst / entry.name
        if top and entry.name == ".lock":
            # uv's lock file, which its install leaves in a venv too: the venv's own, where it has
            # one, else this one
            if not there.exists() and not any(m[1] == str(there) for m in moves):
                moves.append((entry.path, str(there)))
            continue
        try:
            st = os.lstat(there)
        except FileNotFoundError:
            moves.append((entry.path, str(there)))
            continue
        if not (stat.S_ISDIR(st.st_mode) and entry.is_dir(follow_symlinks=False)):
            return there
        if (blocked := _plan(Path(entry.path), there, moves)) is not None:
            return blocked
    return None


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` as a new file with ``data`` (its mode kept), renamed over the old one."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    tmp = path.with_name(f".{path.name}.envbuild-new")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
