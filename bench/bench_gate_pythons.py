"""Benchmark: ``check-lock --offline`` on the committed public and tool-made locks, this tree
against a baseline tree (issue 51: judging every Python a lock allows must not multiply the time).

    git archive <base> envbuild | tar -x -C /tmp/base
    python bench/bench_gate_pythons.py --compare /tmp/base [--rounds 5] [--out FILE]

Each lock is judged in-process (``envbuild.gate.check_file(path, Policy(), offline=True)``, CPU
seconds of the judging alone, no interpreter start) by one child process per tree, the trees'
children interleaved round by round; the minimum of the rounds per lock, and their sum, are
compared (ratio = this tree / the baseline). The locks: ``tests/data/publocks/*/uv.lock``,
``tests/data/pixilocks/*/pixi.lock``, ``lockfiles/examples/*/uv.lock`` and the tool-made and
public locks of ``tests/data/pythonlocks``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

CHILD = """
import json, sys, time
from pathlib import Path
from envbuild.gate import Policy, check_file
out = {}
for f in sys.argv[1:]:
    t0 = time.process_time()
    report = check_file(Path(f), Policy(), offline=True)
    out[f] = [time.process_time() - t0, len(report.environments)]
print(json.dumps(out))
"""


def locks() -> list[Path]:
    found = [
        *sorted(DATA.glob("publocks/*/uv.lock")),
        *sorted(DATA.glob("pixilocks/*/pixi.lock")),
        *sorted(ROOT.glob("lockfiles/examples/*/uv.lock")),
        *sorted(DATA.glob("pythonlocks/*/*.lock")),
        *sorted(DATA.glob("pythonlocks/*/requirements.txt")),
        *sorted(DATA.glob("pythonlocks/public/*/*.lock")),
    ]
    return [p for p in found if p.is_file()]


def one_round(tree: Path, files: list[Path]) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    got = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, files)],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, list[float]] = json.loads(got.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", type=Path, required=True, help="the baseline tree (its envbuild/)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    files = locks()
    trees = {"this": ROOT, "base": args.compare.resolve()}
    best: dict[str, dict[str, float]] = {name: {} for name in trees}
    rows: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            for f, (secs, n) in one_round(tree, files).items():
                key = str(Path(f).relative_to(ROOT))
                best[name][key] = min(best[name].get(key, secs), secs)
                if name == "this":
                    rows[key] = int(n)
    print(f"{'lock':64s} {'base s':>8s} {'this s':>8s} {'ratio':>6s} {'rows':>5s}")
    for key in best["this"]:
        b, t = best["base"][key], best["this"][key]
        print(f"{key:64s} {b:8.3f} {t:8.3f} {t / b:6.2f} {rows[key]:5d}")
    total_b, total_t = sum(best["base"].values()), sum(best["this"].values())
    print(f"{'TOTAL':64s} {total_b:8.3f} {total_t:8.3f} {total_t / total_b:6.2f}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "rounds": args.rounds,
                    "cpus": os.cpu_count(),
                    "base": best["base"],
                    "this": best["this"],
                    "rows": rows,
                    "total": {"base": total_b, "this": total_t, "ratio": total_t / total_b},
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
