#!/usr/bin/env python3
"""``provision --lock`` against ``uv sync --frozen`` of the same lock, same cache state,
interleaved.

    python bench/bench_fromlock.py [--rounds 3] [--noop-rounds 5] [--out results.json]

The lock: a real ``uv lock`` of torch 2.13.0 (the CPU build pip's configuration serves) with its
dependencies and a stand-in extension wheel, served by a local HTTP index (so both tools download
over HTTP, from the same server). Per round, in alternating order so a noisy neighbour hits both:

- ``cold``: empty caches: ``uv sync --frozen`` with a new ``UV_CACHE_DIR`` into a new venv, and
  ``envbuild provision --lock`` into a new data root (its uv cache is under the root);
- ``warm``: caches filled by a previous install: a new venv (uv) / a new venv and manifest in the
  same data root, whose cache is kept (envbuild);
- ``noop``: ``envbuild provision --lock`` on the finished environment, against ``envbuild
  --version``.

A provision is not done until torch imports (envbuild's ends with that import, which compiles
torch's bytecode in a fresh venv): uv's side is also reported with its venv's first ``import
torch`` added (``uv+import``), the fair baseline of bench/README.md's issue-17 figures.

Both use uv (envbuild's default backend where uv is on PATH). envbuild does more than the sync:
torch first, the guard after each stage, the final ``import torch`` (cached verdict on a re-run),
the receipt. Reports medians and ratios; nothing here is a test (bench/README.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

TORCH = "2.13.0"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    t = time.monotonic()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - t
    if out.returncode != 0:
        raise SystemExit(
            f"failed ({out.returncode}):"
            f" {' '.join(argv)}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        )
    return seconds


def _uv() -> str:
    return shutil.which("uv") or str(Path(sys.executable).parent / "uv")


def _wheels(cache: Path, env: dict[str, str]) -> Path:
    """torch and its dependencies as wheels (pip's configuration decides where from), plus a
    stand-in extension."""
    from support.wheels import build_wheel

    folder = cache / "wheels"
    if not list(folder.glob(f"torch-{TORCH}*.whl")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary",
                ":all:",
                "-d",
                str(folder),
                f"torch=={TORCH}",
            ],
            check=True,
            env={k: v for k, v in env.items() if not k.startswith("PIP_")},
        )
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    if not list(folder.glob("ext_like-*.whl")):
        build_wheel(
            folder,
            "ext-like",
            "1.0",
            requires=["torch"],
            python_tag=py,
            abi_tag=py,
            platform_tag="linux_x86_64",
            files={"ext_like/__init__.py": "import torch\n"},
        )
    from envbuild.wheelhouse.pages import write_index

    write_index(folder)
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--noop-rounds", type=int, default=5)
    ap.add_argument("--cache", type=Path, default=REPO / ".cache" / "bench" / "fromlock")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_")) and k not in ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")
    }
    env.update({"NO_COLOR": "1", "UV_NO_CONFIG": "1", "PIP_CONFIG_FILE": os.devnull})
    wheels = _wheels(args.cache.absolute(), dict(os.environ))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(wheels)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    index = f"http://127.0.0.1:{httpd.server_address[1]}/simple"
    work = Path(tempfile.mkdtemp(prefix="bench-fromlock-"))
    try:
        project = work / "project"
        project.mkdir()
        (project / "pyproject.toml").write_text(f"""[project]
name = "trainer"
version = "0.1.0"
requires-python = "=={sys.version_info[0]}.{sys.version_info[1]}.*"
dependencies = ["torch=={TORCH}", "ext-like==1.0"]

[tool.uv]
package = false

[[tool.uv.index]]
url = "{index}"
default = true
""")
        uv_env = {k: v for k, v in env.items() if k != "UV_NO_CONFIG"}
        _timed([_uv(), "lock", "--python", sys.executable], uv_env, cwd=project)
        lock = project / "uv.lock"
        n = [0]

        def fresh(prefix: str) -> Path:
            n[0] += 1
            return work / f"{prefix}-{n[0]}"

        def uv_sync(cache: Path, case: str = "") -> float:
            venv = fresh("uv-venv")
            e = {**uv_env, "UV_PROJECT_ENVIRONMENT": str(venv), "UV_CACHE_DIR": str(cache)}
            seconds = _timed(
                [_uv(), "sync", "--frozen", "--python", sys.executable], e, cwd=project
            )
            if case:
                times[f"{case}-uv-import"].append(
                    _timed([str(venv / "bin" / "python"), "-c", "import torch"], env)
                )
            return seconds

        def provision(root: Path, *extra: str) -> float:
            return _timed(
                [
                    sys.executable,
                    "-m",
                    "envbuild",
                    "provision",
                    "--lock",
                    str(lock),
                    "--root",
                    str(root),
                    "--home",
                    str(work / "home"),
                    "--python",
                    sys.executable,
                    *extra,
                ],
                env,
            )

        def forget_venv(root: Path) -> None:  # a new venv and manifest; the root's caches stay
            shutil.rmtree(root / "venv", ignore_errors=True)
            shutil.rmtree(root / ".envbuild", ignore_errors=True)

        times: dict[str, list[float]] = {
            k: []
            for k in (
                "cold-uv",
                "cold-uv-import",
                "cold-envbuild",
                "warm-uv",
                "warm-uv-import",
                "warm-envbuild",
                "noop-envbuild",
                "envbuild-version",
            )
        }
        warm_uv_cache, warm_root = fresh("uv-cache"), fresh("root")
        uv_sync(warm_uv_cache)  # fill the warm caches once
        provision(warm_root)
        for r in range(args.rounds):
            pair = [
                ("cold-uv", lambda: uv_sync(fresh("uv-cache"), "cold")),
                ("cold-envbuild", lambda: provision(fresh("root"))),
                ("warm-uv", lambda: uv_sync(warm_uv_cache, "warm")),
                ("warm-envbuild", lambda: (forget_venv(warm_root), provision(warm_root))[1]),
            ]
            order = pair if r % 2 == 0 else [pair[1], pair[0], pair[3], pair[2]]
            for name, fn in order:
                times[name].append(fn())
            print(
                f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v),
                flush=True,
            )
        provision(warm_root)  # finished: the no-op re-runs follow
        for _ in range(args.noop_rounds):
            times["noop-envbuild"].append(provision(warm_root))
            times["envbuild-version"].append(
                _timed([sys.executable, "-m", "envbuild", "--version"], env)
            )
    finally:
        httpd.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = {
        "cold": med["cold-envbuild"] / med["cold-uv"],
        "warm": med["warm-envbuild"] / med["warm-uv"],
        "cold_with_import": med["cold-envbuild"] / (med["cold-uv"] + med["cold-uv-import"]),
        "warm_with_import": med["warm-envbuild"] / (med["warm-uv"] + med["warm-uv-import"]),
        "noop": med["noop-envbuild"] / med["envbuild-version"],
    }
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "lock": f"torch {TORCH} (CPU) + dependencies + a stand-in extension, local HTTP index",
        "rounds": args.rounds,
        "noop_rounds": args.noop_rounds,
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "ratios": {k: round(v, 2) for k, v in ratios.items()},
        "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }
    print(
        f"{'median':<8}{'uv sync':>10}{'+1st import':>13}{'provision --lock':>18}"
        f"{'/ uv':>7}{'/ uv+import':>13}"
    )
    for case in ("cold", "warm"):
        print(
            f"{case:<8}{med[f'{case}-uv']:>9.2f}s{med[f'{case}-uv-import']:>12.2f}s{med[f'{case}-envbuild']:>17.2f}s"
            f"{ratios[case]:>6.2f}x{ratios[f'{case}_with_import']:>12.2f}x"
        )
    print(
        f"{'no-op':<8}{'':>23}{med['noop-envbuild']:>17.2f}s   {ratios['noop']:.2f}x envbuild"
        f" --version ({med['envbuild-version']:.2f} s)"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
