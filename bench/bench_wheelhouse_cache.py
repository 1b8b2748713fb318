"""Cache hit vs first build of a wheelhouse wheel (issue 4: same spec + same torch <= 1 s).

Builds tests/packages/c_ext (a real gcc compile, repack, provenance) into a fresh cache, then
builds it again N times; prints the first build time, the cache-hit times and the ratio.

    .venv/bin/python bench/bench_wheelhouse_cache.py --python VENV/bin/python [--repeat 5]

The target interpreter must have torch, setuptools and wheel (the test suite's
.cache/tests/wheelhouse-build-venv is such a venv).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from envbuild.wheelhouse.build import BuildOptions, build, probe_target
from envbuild.wheelhouse.spec import load_wheel_spec

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--python", type=Path, default=REPO / ".cache/tests/wheelhouse-build-venv/bin/python"
    )
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "c-ext.toml"
        spec_file.write_text(
            'schema = 1\nname = "c-ext"\nversion = "1.2.0"\n[source]\npath ='
            f' "{REPO / "tests/packages/c_ext"}"\n[build]\nrequires = ["setuptools", "wheel"]\n'
        )
        spec = load_wheel_spec(spec_file)
        opts = BuildOptions(python=args.python, out=Path(tmp) / "out", cache=Path(tmp) / "cache")
        t0 = time.perf_counter()
        first = build(spec, opts)
        first_s = time.perf_counter() - t0
        hits = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            again = build(spec, opts)  # includes probing the target interpreter (a subprocess)
            hits.append(time.perf_counter() - t0)
            assert again.cached, "expected a cache hit"
        target = probe_target(args.python)
    hit = statistics.median(hits)
    print(f"target: torch {target.torch_version}, {target.info['python_tag']}, cc {target.cc}")
    print(f"first build (compile + repack): {first_s:8.3f} s  -> {first.wheel.name}")
    print(
        f"cache hit, median of {args.repeat}:   {hit:8.3f} s  (min {min(hits):.3f}, max"
        f" {max(hits):.3f})"
    )
    print(
        f"ratio first/hit: {first_s / hit:.1f}x; cache hit <= 1 s:"
        f" {'yes' if max(hits) <= 1.0 else 'NO'}"
    )
    return 0 if max(hits) <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
