"""The gate's environments against the locker's own answer, on any uv project checkout.

    python bench/gate_vs_uv.py PROJECT_DIR [--platform linux-x86_64] [--python 3.12] [--max-items 8]

For every subset of the root project's conflicting extras/groups, asks real ``uv export --frozen
--no-default-groups`` (offline: the lock and the workspace's pyproject files are enough) whether
it accepts the selection and which torch it installs on the platform, and compares with the
environment the gate judges for the same selection: the gate must leave out exactly the
selections uv refuses and find uv's torch in every other one. Prints a short table and exits 1 on
any disagreement. Used on public locks (SkyRL, NeMo-RL) for the closing notes of the gate issue.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from pathlib import Path

from envbuild.gate.environments import PLATFORMS, Narrow, make_space
from envbuild.gate.formats import parse


def uv_bin() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def _marker_holds(marker: str, platform: str, python: str) -> bool:
    from packaging.markers import Marker

    values = {
        **PLATFORMS[platform][1],
        "python_version": python,
        "python_full_version": python + ".0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    return Marker(marker).evaluate(values)


def uv_torch(project: Path, args: list[str], platform: str, python: str) -> str | None:
    """uv's torch for the selection on ``platform`` ("" none); None when uv refuses the
    selection."""
    out = subprocess.run(
        [
            uv_bin(),
            "export",
            "--frozen",
            "--no-hashes",
            "--no-header",
            "--no-annotate",
            "--no-default-groups",
            "--python",
            python,
            *args,
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        said = " ".join(out.stderr.split())  # uv wraps its message at the terminal's width
        if "incompatible with the" in said and "conflicts" in said:
            return None
        raise SystemExit(f"uv export {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    found = []
    for line in out.stdout.splitlines():
        if line.startswith("torch=="):
            req, _, marker = line.partition(";")
            if not marker.strip() or _marker_holds(marker.strip(), platform, python):
                found.append(req.strip().split("==", 1)[1])
    return found[0] if len(found) == 1 else ("" if not found else ",".join(found))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("project", type=Path)
    ap.add_argument("--platform", default="linux-x86_64", choices=sorted(PLATFORMS))
    ap.add_argument("--python", default="3.12")
    ap.add_argument(
        "--max-items", type=int, default=8, help="at most this many items (2^n uv exports)"
    )
    args = ap.parse_args()
    lock_path = args.project / "uv.lock"
    lock = parse(lock_path, lock_path.read_text(), "uv.lock")
    space = make_space(lock, Narrow(environment=(args.platform,), python=(args.python,)))
    reach = lock.walk(space)
    root = next(
        (
            e.name
            for e in lock.entries
            if e.key in reach.roots
            and (args.project / "pyproject.toml").read_text().find(f'name = "{e.name}"') >= 0
        ),
        None,
    )
    items = [
        i
        for i, it in enumerate(space.items)
        if it.key.startswith(f"extra-{len(root or '')}-{root}-")
        or it.key.startswith(f"group-{len(root or '')}-{root}-")
    ]
    items = items[: args.max_items]
    gate: dict[int, str] = {}
    for j in space.bits(space.active):
        chosen = space.selections[j % space.n_sel]
        torches = {e.version for e in reach.members(j).entries if e.name == "torch"}
        gate[chosen] = ",".join(sorted(t for t in torches if t)) if torches else ""
    t0 = time.monotonic()
    agree = disagree = refused = 0
    rows = []
    for size in range(len(items) + 1):
        for combo in itertools.combinations(items, size):
            chosen = sum(1 << i for i in combo)
            flags = []
            for i in combo:
                it = space.items[i]
                flags += ["--group" if it.kind == "group" else "--extra", it.name]
            uv = uv_torch(args.project, flags, args.platform, args.python)
            mine = gate.get(chosen)
            ok = (uv is None and mine is None) or (uv is not None and mine == uv)
            refused += uv is None
            agree += ok
            disagree += not ok
            if not ok:
                rows.append(f"  DISAGREE {' '.join(flags) or '(none)'}: uv {uv!r}, gate {mine!r}")
    print(
        f"{args.project.name}: {len(items)} items"
        f" ({', '.join(space.items[i].words for i in items)}), {agree + disagree} selections asked"
        f" of uv export in {time.monotonic() - t0:.0f} s: {refused} refused by uv, {agree} agree,"
        f" {disagree} disagree"
    )
    print("\n".join(rows))
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
