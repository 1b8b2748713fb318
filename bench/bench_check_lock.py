"""Benchmark: check-lock's static rules (offline) on every shipped profile that has a lock.

    python bench/bench_check_lock.py [--repeat N]

Prints the median and worst wall time per profile, and the total; the budget is 1 s for all.
"""

from __future__ import annotations

import argparse
import statistics
import time

from envbuild.gate.rules.ownlock import Options, check_stack
from envbuild.spec import available_profiles, load_spec, profile_path
from envbuild.stacklock.model import MANIFEST


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    total = 0.0
    for name in available_profiles():
        spec = load_spec(profile_path(name), {})
        if not (spec.path.parent / MANIFEST).is_file():
            print(f"{name:12s} no lock (skipped)")
            continue
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = check_stack(spec, Options(offline=True))
            times.append(time.perf_counter() - t0)
        total += statistics.median(times)
        print(
            f"{name:12s} median {statistics.median(times) * 1000:7.1f} ms  worst"
            f" {max(times) * 1000:7.1f} ms  findings {len(report.findings)}"
        )
    print(f"{'all':12s} median total {total * 1000:7.1f} ms (budget 1000 ms)")
    return 0 if total < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
