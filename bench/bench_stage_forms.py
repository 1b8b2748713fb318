#!/usr/bin/env python3
"""How fast uv installs one lock stage, by the form its requirements take (issue 40 item 7).

    python bench/bench_stage_forms.py [--lock tests/data/publocks/cosmos-reason2/uv.lock]
        [--count 40] [--rounds 2] [--out results.json]

Takes the lock's PyPI wheels for this interpreter (no torch, no nvidia-*, no triton: CPU-sized),
and installs the same files, each hash-pinned as the lock says, into a new venv with a new, empty
``UV_CACHE_DIR`` per run, the forms interleaved (the order rotates each round):

- ``url``: ``name @ URL --hash=sha256:H`` lines, ``--no-deps --verify-hashes`` (a stage as
  ``provision --lock`` writes it);
- ``pinned``: ``name==V --hash=sha256:H`` lines with the lock's index as ``--index-url``,
  ``--no-deps --verify-hashes``.

Nothing here is a test (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envbuild._io import parse_toml  # noqa: E402

UV = str(Path(sys.executable).parent / "uv")


def _wheels(lock: Path, count: int) -> list[tuple[str, str, str, str, str]]:
    """(name, version, url, sha256, index) of the lock's best wheel for this interpreter."""
    data = parse_toml(lock.read_text())
    rank = {str(t): i for i, t in enumerate(sys_tags())}
    out = []
    seen: set[str] = set()
    sizes: dict[str, int] = {}
    for p in data["package"]:
        name = canonicalize_name(p["name"])
        if name in ("torch", "triton") or name.startswith("nvidia-") or name in seen:
            continue
        index = p.get("source", {}).get("registry")
        if not index:
            continue
        best = None
        for w in p.get("wheels", []):
            try:
                _, _, _, tags = parse_wheel_filename(unquote(w["url"].rsplit("/", 1)[1]))
            except InvalidWheelFilename:
                continue
            r = min((rank[str(t)] for t in tags if str(t) in rank), default=None)
            if r is not None and "hash" in w and (best is None or r < best[0]):
                best = (r, w)
        if best is not None:
            w = best[1]
            seen.add(name)
            sizes[name] = w.get("size", 0)
            out.append((name, p["version"], w["url"], w["hash"].split(":", 1)[1], index))
    out.sort(key=lambda t: -sizes[t[0]])  # the largest first: a torch stage's shape
    return out[:count]


def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    t = time.monotonic()
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{argv} failed:\n{r.stderr[-3000:]}")
    return time.monotonic() - t


def _form(kind: str, wheels: list[tuple[str, str, str, str, str]], work: Path) -> float:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = {**os.environ, "UV_CACHE_DIR": str(work / "cache"), "UV_NO_PROGRESS": "1"}
    env.pop("VIRTUAL_ENV", None)
    venv = work / "venv"
    _run([UV, "venv", "--python", sys.executable, str(venv)], env)
    req = work / "req.txt"
    if kind == "url":
        req.write_text("".join(f"{n} @ {u} --hash=sha256:{h}\n" for n, _, u, h, _ in wheels))
        extra: list[str] = []
    else:
        req.write_text("".join(f"{n}=={v} --hash=sha256:{h}\n" for n, v, _, h, _ in wheels))
        extra = ["--index-url", wheels[0][4]]
    argv = [UV, "pip", "install", "--python", str(venv / "bin" / "python"), "--no-deps"]
    return _run([*argv, "--verify-hashes", *extra, "-r", str(req)], env)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lock", default=str(REPO / "tests/data/publocks/cosmos-reason2/uv.lock"))
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--forms", default="url,pinned")
    ap.add_argument("--out")
    a = ap.parse_args()
    wheels = _wheels(Path(a.lock), a.count)
    forms = a.forms.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            order = forms[rnd % len(forms) :] + forms[: rnd % len(forms)]
            for kind in order:
                s = _form(kind, wheels, Path(tmp) / kind)
                rows.append({"round": rnd + 1, "form": kind, "seconds": round(s, 2)})
                print(f"round {rnd + 1} {kind:7} {s:6.1f} s", flush=True)
    out = {
        "lock": a.lock,
        "wheels": len(wheels),
        "uv": subprocess.run([UV, "--version"], capture_output=True, text=True).stdout.strip(),
        "load": os.getloadavg(),
        "rows": rows,
    }
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
