"""PEP 503 pages over a wheelhouse folder.

Writes ``DIR/simple/index.html`` (the project list) and ``DIR/simple/<project>/index.html``
(links ``../../<file>#sha256=...``), plus ``DIR/index.html``, one flat page of every file, so
the folder works three ways: ``--find-links DIR``, ``--find-links http://host/``, and
``--index-url http://host/simple/`` (any static file server, e.g. ``python -m http.server``).
Hashes come from ``wheelhouse.json`` (written by the mirror) when size and name match, so
re-indexing a folder of multi-gigabyte torch wheels does not re-hash them.
"""

from __future__ import annotations

import html
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from packaging.utils import canonicalize_name

from envbuild._io import atomic_write_text, sha256_file
from envbuild.errors import WheelhouseError
from envbuild.index.client import project_of

_HASH_CACHE = ".envbuild-hashes.json"


@dataclass(frozen=True)
class IndexResult:
    root: Path
    projects: dict[str, list[str]]  # canonical name -> file names

    @property
    def files(self) -> int:
        return sum(len(v) for v in self.projects.values())


def _page(title: str, rows: list[str]) -> str:
    body = "\n".join(rows)
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n"
    )


def _link(href: str, text: str) -> str:
    return f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br/>'


def write_index(root: Path) -> IndexResult:
    if not root.is_dir():
        raise WheelhouseError(f"{root}: not a folder")
    known: dict[str, dict[str, object]] = {}
    for cache in (root / "wheelhouse.json", root / _HASH_CACHE):
        if cache.is_file():
            try:
                data = json.loads(cache.read_text())
                for a in data.get("artifacts", []):
                    known[a["filename"]] = a
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                pass
    projects: dict[str, list[str]] = {}
    hashes: dict[str, str] = {}
    cache_rows = []
    for f in sorted(root.iterdir()):
        if not f.is_file() or f.name.startswith("."):
            continue
        project = project_of(f.name)
        if project is None:
            continue
        size = f.stat().st_size
        k = known.get(f.name)
        if k and k.get("size") == size and isinstance(k.get("sha256"), str):
            sha = str(k["sha256"])
        else:
            sha = sha256_file(f)
        hashes[f.name] = sha
        cache_rows.append({"filename": f.name, "size": size, "sha256": sha})
        projects.setdefault(project, []).append(f.name)
    simple = root / "simple"
    # drop pages of projects whose files are gone
    if simple.is_dir():
        for d in simple.iterdir():
            if d.is_dir() and d.name not in projects:
                shutil.rmtree(d)
    for name, files in projects.items():
        rows = [_link(f"../../{quote(n)}#sha256={hashes[n]}", n) for n in files]
        atomic_write_text(simple / name / "index.html", _page(f"Links for {name}", rows))
    atomic_write_text(
        simple / "index.html", _page("Simple index", [_link(f"{p}/", p) for p in sorted(projects)])
    )
    flat = [
        _link(f"{quote(n)}#sha256={hashes[n]}", n) for p in sorted(projects) for n in projects[p]
    ]
    atomic_write_text(root / "index.html", _page("Wheelhouse", flat))
    atomic_write_text(root / _HASH_CACHE, json.dumps({"artifacts": cache_rows}, indent=1) + "\n")
    return IndexResult(root, {canonicalize_name(p): v for p, v in sorted(projects.items())})
