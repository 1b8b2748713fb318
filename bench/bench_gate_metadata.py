#!/usr/bin/env python3
"""The gate's online metadata read of a large wheel: memory and bytes read, per way of reading it.

    python bench/bench_gate_metadata.py [--size-mb 320] [--out results.json]

One wheel of ``--size-mb`` (an incompressible payload, stored, as a CUDA wheel is mostly), whose
METADATA requires torch, served by a local HTTP server three ways:

- ``metadata-file``: the server has ``<wheel>.metadata`` (PEP 658), as PyPI does;
- ``range``: no metadata file; the server answers Range requests (files.pythonhosted.org does);
- ``no-range``: no metadata file and Range ignored (a plain static server): streamed to disk.

Each is read in a fresh child process by ``envbuild.index.client.requires_of`` (the gate's path,
its cache empty), beside the old way (the whole file read into memory, ``read_bytes``) as the
baseline. The child reports its peak RSS (``ru_maxrss``) and the seconds it took; the server counts
the bytes it sent. Targets (issue 35): memory at most 200 MB either way, at most 5 MB read from the
ranged server. Then ``check-lock`` online against ``--offline`` on public locks (empty caches,
real indexes): the time the metadata reads cost. Nothing here is a test (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

CHILD = r"""
import json, sys, time
from envbuild.index.client import Artifact, read_bytes, requires_of
url, sha, how = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.monotonic()
if how == "in-memory (old)":
    import hashlib, io, zipfile
    data = read_bytes(url)
    assert hashlib.sha256(data).hexdigest() == sha
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        reqs = [l for n in zf.namelist() if n.endswith(".dist-info/METADATA")
                for l in zf.read(n).decode().splitlines() if l.startswith("Requires-Dist")]
else:
    reqs = requires_of(Artifact(url.rsplit("/", 1)[-1], url, sha))
# VmHWM: this process's own peak (ru_maxrss carries the parent's peak across fork and exec)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": time.monotonic() - t, "peak_rss_mb": hwm / 1024, "requires": reqs}))
"""


def make_wheel(folder: Path, size_mb: int) -> Path:
    """A valid wheel with a stored payload of ``size_mb`` MB of random bytes."""
    import base64
    import hashlib

    name = "big_ext-1.0-cp312-cp312-linux_x86_64.whl"
    path = folder / name
    info = "big_ext-1.0.dist-info"
    meta = (
        "Metadata-Version: 2.1\nName: big-ext\nVersion: 1.0\nRequires-Dist:"
        " torch>=2.10\nRequires-Dist: einops\n"
    )
    wheel = (
        "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: false\nTag:"
        " cp312-cp312-linux_x86_64\n"
    )
    payload = folder / "payload.bin"
    digest = hashlib.sha256()
    with payload.open("wb") as f:
        for _ in range(size_mb):
            block = os.urandom(1 << 20)
            digest.update(block)
            f.write(block)
    rows = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.write(payload, "big_ext/_C.so")
        rows.append(
            f"big_ext/_C.so,sha256={base64.urlsafe_b64encode(digest.digest()).rstrip(b'=').decode()},"
            f"{payload.stat().st_size}"
        )
        for member, text in ((f"{info}/METADATA", meta), (f"{info}/WHEEL", wheel)):
            zf.writestr(member, text)
            rows.append(f"{member},,")
        zf.writestr(f"{info}/RECORD", "\n".join([*rows, f"{info}/RECORD,,"]) + "\n")
    payload.unlink()
    (folder / f"{name}.metadata").write_text(meta)
    return path


def _timed_check(lock: Path, *args: str) -> tuple[float, float]:
    """(seconds, peak RSS MB) of ``envbuild check-lock ARGS LOCK`` with an empty metadata cache (GNU
    time)."""
    with tempfile.TemporaryDirectory(prefix="bench-gate-cache-") as cache:
        env = {**os.environ, "ENVBUILD_CACHE_DIR": cache}
        t = time.monotonic()
        out = subprocess.run(
            [
                "/usr/bin/time",
                "-f",
                "%M",
                sys.executable,
                "-m",
                "envbuild",
                "check-lock",
                *args,
                str(lock),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - t
    peak_kb = int(out.stderr.strip().splitlines()[-1])
    return seconds, peak_kb / 1024


def public_locks(names: list[str]) -> list[dict[str, object]]:
    """check-lock online (PyPI and the lock's indexes, metadata read as above) against --offline,
    on the public locks committed under tests/data/publocks (empty caches both)."""
    out = []
    for name in names:
        lock = REPO / "tests" / "data" / "publocks" / name / "uv.lock"
        source = dict(
            ln.split(": ", 1)
            for ln in (lock.parent / "SOURCE.txt").read_text().splitlines()
            if ": " in ln
        )
        offline, _ = _timed_check(lock, "--offline")
        online, peak = _timed_check(lock)
        out.append(
            {
                "lock": f"{source['repo']} {source['commit'][:7]}",
                "offline_s": round(offline, 2),
                "online_s": round(online, 2),
                "ratio": round(online / offline, 1),
                "online_peak_mb": round(peak, 1),
            }
        )
    return out


def main() -> int:
    from support.rangeserver import RangeServer
    from support.wheels import sha256_of

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=320)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--locks",
        nargs="+",
        default=["zonos", "nanochat", "open-instruct"],
        help="public locks (tests/data/publocks) to time check-lock online against --offline",
    )
    ap.add_argument(
        "--no-public", action="store_true", help="leave out the public locks (no network)"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-gate-metadata-"))
    rows = []
    try:
        wheel = make_wheel(work, args.size_mb)
        sha = sha256_of(wheel)
        for how, ranges, metadata in (
            ("metadata-file", True, True),
            ("range", True, False),
            ("no-range", False, False),
            ("in-memory (old)", False, False),
        ):
            cache = work / f"cache-{len(rows)}"
            env = {**os.environ, "ENVBUILD_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
            with RangeServer(work, ranges=ranges, metadata_files=metadata) as server:
                t = time.monotonic()
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, f"{server.url}/{wheel.name}", sha, how],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                wall = time.monotonic() - t
                sent = server.sent
            if out.returncode != 0:
                raise SystemExit(f"{how}: failed\n{out.stderr[-2000:]}")
            doc = json.loads(out.stdout.strip().splitlines()[-1])
            assert any("torch>=2.10" in r for r in doc["requires"]), doc
            rows.append(
                {
                    "how": how,
                    "wheel_mb": round(wheel.stat().st_size / 1e6, 1),
                    "read_mb": round(sent / 1e6, 3),
                    "peak_rss_mb": round(doc["peak_rss_mb"], 1),
                    "seconds": round(doc["seconds"], 3),
                    "wall_s": round(wall, 3),
                }
            )
            shutil.rmtree(cache, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'read':<18}{'wheel MB':>9}{'read MB':>10}{'peak RSS MB':>13}{'seconds':>9}")
    for r in rows:
        print(
            f"{r['how']:<18}{r['wheel_mb']:>9}{r['read_mb']:>10}{r['peak_rss_mb']:>13}{r['seconds']:>9}"
        )
    locks = [] if args.no_public else public_locks(args.locks)
    if locks:
        print(
            f"\n{'check-lock (empty cache)':<40}{'offline':>9}{'online':>9}{'ratio':>7}"
            f"{'online peak MB':>16}"
        )
        for r in locks:
            print(
                f"{r['lock']:<40}{r['offline_s']:>8.2f}s{r['online_s']:>8.2f}s{r['ratio']:>6.1f}x{r['online_peak_mb']:>16}"
            )
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "machine": {
                        "python": platform.python_version(),
                        "cpus": os.cpu_count(),
                        "platform": platform.platform(),
                    },
                    "rows": rows,
                    "public_locks": locks,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
