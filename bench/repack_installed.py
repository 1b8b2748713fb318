"""Pack installed distributions back into wheels: a real torch for the benchmark where no index is.

    python3 bench/repack_installed.py --out DIR [--set-version torch=2.11.0+cu130] [--jobs N] torch

Run it with the interpreter whose environment holds the distributions (stdlib only). It packs
each named distribution and the installed part of its ``Requires-Dist`` closure (requirements
guarded by an ``extra`` marker are skipped, as are names not installed) into
``DIR/<name>-<version>-<tags>.whl``: every file its RECORD lists inside site-packages (no
``__pycache__``, no console scripts; installers regenerate those from ``entry_points.txt``),
the dist-info without ``INSTALLER``/``REQUESTED``/``direct_url.json``, and a fresh RECORD with
sha256 of every member. Deflate level 1, several wheels at once.

The GPU machine's image holds torch 2.11.0+cu130 whose dist-info says ``2.11.0`` (its run-time
``torch.__version__`` says ``2.11.0+cu130``); ``--set-version torch=2.11.0+cu130`` writes the
version the published cu130 wheel carries, in the file name, the dist-info name and METADATA.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import sys
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path

_SKIP_DIST_INFO = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> list[metadata.Distribution]:
    """The installed part of the roots' Requires-Dist closure, extras followed where they are asked
    for (torch 2.11 asks for ``cuda-toolkit[cudart,cublas,...]``; the runtime wheels hang off those
    extras).
    """
    installed = {canonical(d.metadata["Name"]): d for d in metadata.distributions()}
    out: dict[str, metadata.Distribution] = {}
    extras_done: dict[str, set[str]] = {}
    todo: list[tuple[str, set[str]]] = [(canonical(r), set()) for r in roots]
    while todo:
        name, extras = todo.pop()
        dist = installed.get(name)
        if dist is None:
            if name in map(canonical, roots):
                raise SystemExit(f"{name} is not installed in {sys.prefix}")
            continue
        seen = extras_done.setdefault(name, set())
        if name in out and extras <= seen:
            continue
        out[name] = dist
        seen |= extras
        for req in dist.requires or []:
            spec, _, marker = req.partition(";")
            wanted = re.findall(r"extra\s*==\s*[\"']([^\"']+)[\"']", marker)
            if wanted and not any(canonical(w) in seen for w in wanted):
                continue
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
            if m:
                asked = {canonical(e.strip()) for e in (m.group(2) or "").split(",") if e.strip()}
                todo.append((canonical(m.group(1)), asked))
    return list(out.values())


def _tags(wheel_text: str) -> str:
    tags = [
        line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")
    ]
    parts = [t.split("-") for t in tags] or [["py3", "none", "any"]]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def pack(dist_path: str, out: str, new_version: str | None) -> tuple[str, int, float]:
    t = time.monotonic()
    info = Path(dist_path)
    site = info.parent
    meta = (info / "METADATA").read_text(encoding="utf-8")
    name = re.search(r"^Name: (.+)$", meta, re.M).group(1).strip()  # type: ignore[union-attr]
    version = re.search(r"^Version: (.+)$", meta, re.M).group(1).strip()  # type: ignore[union-attr]
    if new_version:
        meta = re.sub(r"^Version: .+$", f"Version: {new_version}", meta, count=1, flags=re.M)
        version = new_version
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}"
    new_info = f"{stem}.dist-info"
    wheel = Path(out) / f"{stem}-{_tags((info / 'WHEEL').read_text())}.whl"
    tmp = wheel.with_suffix(".part")
    rows: list[tuple[str, str, str]] = []
    with open(info / "RECORD", newline="", encoding="utf-8") as f:
        listed = [r[0] for r in csv.reader(f) if r]
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for rel in listed:
            if (
                rel.startswith("..")
                or "__pycache__" in rel
                or rel.endswith(".pyc")
                or os.path.isabs(rel)
            ):
                continue
            top, _, leaf = rel.partition("/")
            if top == info.name:
                if leaf in _SKIP_DIST_INFO:
                    continue
                data = meta.encode() if leaf == "METADATA" else (site / rel).read_bytes()
                rel = f"{new_info}/{leaf}"
            else:
                src = site / rel
                if not src.is_file():
                    continue
                data = src.read_bytes()
            zi = zipfile.ZipInfo(rel, date_time=(2026, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o755 if os.access(site / rel, os.X_OK) and top != info.name else 0o644
            zi.external_attr = mode << 16
            zf.writestr(zi, data, compresslevel=1)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((rel, f"sha256={digest}", str(len(data))))
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerows(rows)
        w.writerow((f"{new_info}/RECORD", "", ""))
        zf.writestr(f"{new_info}/RECORD", buf.getvalue())
    tmp.replace(wheel)
    return wheel.name, wheel.stat().st_size, time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("names", nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set-version", action="append", default=[], metavar="NAME=VERSION")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    versions = {canonical(k): v for k, v in (s.split("=", 1) for s in args.set_version)}
    args.out.mkdir(parents=True, exist_ok=True)
    dists = closure(args.names)
    # biggest first, so the long poles start at once
    dists.sort(key=lambda d: -sum(int(f.size or 0) for f in d.files or []))
    t = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futs = [
            pool.submit(
                pack,
                str(d._path),
                str(args.out),  # type: ignore[attr-defined]
                versions.get(canonical(d.metadata["Name"])),
            )
            for d in dists
        ]
        total = 0
        for fut in futs:
            name, size, secs = fut.result()
            total += size
            print(f"  {name}  {size / 1e6:8.1f} MB  {secs:5.1f} s")
    print(f"{len(dists)} wheels, {total / 1e9:.2f} GB, {time.monotonic() - t:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
