"""The install record of a wheel built from a git pin: what the installer writes into its dist-info
(PEP 610 ``direct_url.json``) made the record of that git install, as the locker makes it.

The builds stage of ``provision --lock`` compiles a git pin against the installed torch and installs
the wheel it built by its ``file://`` URL, which the installer records as a URL install of that file
(``archive_info``): ``uv sync`` would then see another source than the lock's and build the pin
again. Its stage line carries the lock's git source (``# git: SOURCE``, ``spec.stagefile``); after
the step, the wheel's ``direct_url.json`` becomes the one the installer writes for that git install,
byte for byte (uv: ``url``, ``vcs_info`` with the commit and the ref the lock asked for, then
``subdirectory``, in compact JSON; pip: the same keys sorted, ``requested_revision`` the commit it
was given), and its ``RECORD`` row the new file's hash and size; uv's ``uv_cache.json`` (the
timestamp of the local file it installed, which uv writes for no git install) goes. The rest of the
dist-info stays: the wheel's build provenance (``envbuild_provenance.json``), and no
``uv_build.json`` (uv's record of the build settings it used, which uv sync compares where it finds
one: absent, it compares nothing).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuild.plan import Backend
from envbuild.spec.stagefile import GitSource, noted_git
from envbuild.spec.stepfile import logical_lines

__all__ = ["direct_url", "record_git_builds"]

DIRECT_URL = "direct_url.json"
UV_CACHE = "uv_cache.json"


def direct_url(git: GitSource, backend: Backend) -> bytes:
    """The ``direct_url.json`` ``backend`` writes when it installs the git pin ``git``."""
    if backend == "uv":
        vcs: dict[str, str] = {"vcs": "git", "commit_id": git.commit}
        if git.requested_revision:
            vcs["requested_revision"] = git.requested_revision
        doc: dict[str, object] = {"url": git.url, "vcs_info": vcs}
        if git.subdirectory:
            doc["subdirectory"] = git.subdirectory
        return json.dumps(doc, separators=(",", ":")).encode()
    pip: dict[str, object] = {
        "url": git.url,
        "vcs_info": {"commit_id": git.commit, "requested_revision": git.commit, "vcs": "git"},
    }
    if git.subdirectory:
        pip["subdirectory"] = git.subdirectory
    return json.dumps(pip, sort_keys=True).encode()


def record_git_builds(stage_file: Path, python: Path, backend: Backend) -> list[str]:
    """Record each wheel of ``stage_file`` that carries a git note (a wheel built from a git pin) as
    that git install in the venv of ``python``; the names recorded."""
    wheels: dict[str, GitSource] = {}
    for _, line, comments in logical_lines(stage_file.read_text(encoding="utf-8")):
        name, _, url = line.partition("@")
        git = noted_git(comments)
        if git is not None and not url.strip().startswith("git+") and ".whl" in url:
            wheels[canonicalize_name(name.strip())] = git
    if not wheels:
        return []
    site = next(python.parent.parent.glob("lib/python3*/site-packages"))
    done: list[str] = []
    for info in site.glob("*.dist-info"):
        name = canonicalize_name(info.name[: -len(".dist-info")].rsplit("-", 1)[0])
        if name in wheels:
            _rewrite(info, direct_url(wheels[name], backend), drop=backend == "uv")
            done.append(name)
    return done


def _rewrite(info: Path, data: bytes, *, drop: bool) -> None:
    """Write ``data`` as the dist-info's ``direct_url.json`` and its ``RECORD`` row; ``drop``: take
    ``uv_cache.json`` and its row away."""
    (info / DIRECT_URL).write_bytes(data)
    record = info / "RECORD"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rel = f"{info.name}/{DIRECT_URL}"
    rows = list(csv.reader(io.StringIO(record.read_text(encoding="utf-8"))))
    if drop and (info / UV_CACHE).is_file():
        (info / UV_CACHE).unlink()
        rows = [r for r in rows if not r or r[0] != f"{info.name}/{UV_CACHE}"]
    row = [rel, f"sha256={digest}", str(len(data))]
    at = next((i for i, r in enumerate(rows) if r and r[0] == rel), None)
    if at is None:
        rows.append(row)
    else:
        rows[at] = row
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue(), encoding="utf-8")
