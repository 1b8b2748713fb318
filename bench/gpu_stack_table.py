"""One table from bench/gpu_stack_proof.sh's outputs (stdlib only: it runs on the GPU machine).

Usage: python gpu_stack_table.py SP_DIR OUT_JSON
Reads SP_DIR/build{1,2}-*.json|.start|.end|.rc, elf-*.txt and results/*.json; prints the table
(builds, provision steps, smoke checks with their planted-error runs, dist-step) and writes every
raw result into OUT_JSON.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def fmt(v: Any, spec: str = ".3g") -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def row(cells: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"


def print_table(title: str, head: list[str], rows: list[list[str]]) -> None:
    widths = (
        [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
        if rows
        else [len(h) for h in head]
    )
    print(f"\n{title}")
    print(row(head, widths))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(row(r, widths))


def main() -> int:
    sp, out = Path(sys.argv[1]), Path(sys.argv[2])
    doc: dict[str, Any] = {"builds": {}}
    rows = []
    for start in sorted(sp.glob("build1-*.start")):
        name = start.name[len("build1-") : -len(".start")]
        end, rc = text(sp / f"build1-{name}.end"), text(sp / f"build1-{name}.rc")
        first = load(sp / f"build1-{name}.json") or []
        second = load(sp / f"build2-{name}.json") or []
        elf = text(sp / f"elf-{name}.txt") or ""
        archs = sorted(set(re.findall(r"\.(sm_[0-9a-z]+)\.", elf)))
        b: dict[str, Any] = {
            "exit": int(rc) if rc else None,
            "build_seconds": float(end) - float(text(start) or 0) if end else None,
            "first": first,
            "second": second,
            "second_wall_seconds": float(text(sp / f"build2-{name}.wall") or "nan"),
            "cuobjdump_list_elf": elf.splitlines()[:40],
            "archs": archs,
        }
        doc["builds"][name] = b
        wheel = Path(first[0]["wheel"]).name if first else "-"
        cached2 = second[0]["cached"] if second else None
        rows.append(
            [
                name,
                "ok" if rc == "0" else ("running" if rc is None else f"exit {rc}"),
                wheel,
                fmt(b["build_seconds"], ".0f") + " s" if b["build_seconds"] else "-",
                ", ".join(archs) or "-",
                (
                    (
                        f"{b['second_wall_seconds']:.1f} s, "
                        + ("cache hit" if cached2 else "REBUILT")
                    )
                    if second
                    else "-"
                ),
            ]
        )
    print_table(
        "wheelhouse build (sm_90, against the adopted torch)",
        ["wheel", "status", "file", "first build", "cuobjdump --list-elf", "second build"],
        rows,
    )

    fa4 = load(sp / "results" / "fa4-wheel.json")
    doc["fa4_wheel"] = fa4
    if fa4:
        print(
            f"\nflash-attn-4 wheel {fa4['wheel']}: joined from 2 parts, sha256"
            f" {fa4['sha256'][:16]}... {'matches' if fa4['match'] else 'DIFFERS FROM'} the lock"
        )

    prov = load(sp / "results" / "provision.json")
    doc["provision"] = prov
    if isinstance(prov, dict):
        guards = prov.get("guard_seconds") or []
        rows = [
            [name, "ok", f"{1e3 * guards[i]:.0f} ms" if i < len(guards) else "-"]
            for i, name in enumerate(prov.get("ran") or [])
        ]
        print_table(
            f"provision (offline, ABI guard after every step): {prov.get('seconds', 0):.1f} s; "
            f"import check torch {(prov.get('full_check') or {}).get('version')}; warnings: "
            f"{'; '.join(prov.get('warnings') or []) or 'none'}",
            ["step", "status", "guard"],
            rows,
        )

    smoke, planted = (
        load(sp / "results" / "smoke.json"),
        load(sp / "results" / "smoke-planted.json"),
    )
    doc["smoke"], doc["smoke_planted"] = smoke, planted
    if isinstance(smoke, dict):
        env = smoke.get("environment", {})
        pl = {c["name"]: c for c in (planted or {}).get("checks", [])}
        rows = []
        for c in smoke.get("checks", []):
            p = pl.get(c["name"], {})
            rate = ""
            if c.get("tflops") is not None:
                sheet = c.get("datasheet_tflops")
                rate = f"{c['tflops']:.0f}" + (
                    f" ({100 * c['tflops'] / sheet:.0f}% of {sheet:g})" if sheet else ""
                )
            rows.append(
                [
                    c["name"],
                    c["verdict"],
                    fmt(c.get("rel_err"), ".2e"),
                    fmt(c.get("tol"), ".2e"),
                    fmt(c.get("seconds"), ".2f") + " s",
                    fmt(c.get("kernel_ms"), ".3f"),
                    rate,
                    f"{p.get('verdict', '-')} ({fmt(p.get('rel_err'), '.1e')})" if p else "-",
                ]
            )
        print_table(
            f"smoke on {env.get('device')} (torch {env.get('torch')}, cuda {env.get('cuda')}): "
            f"{'all passed' if smoke.get('ok') else 'FAILED'}",
            [
                "check",
                "verdict",
                "rel err",
                "tol",
                "first call",
                "kernel ms",
                "TFLOP/s",
                "planted error",
            ],
            rows,
        )

    for key, fname in (("dist_step", "dist-step.json"), ("dist_step_bf16", "dist-step-bf16.json")):
        d = load(sp / "results" / fname)
        doc[key] = d
        if isinstance(d, dict):
            par, bw = d.get("parity", {}), d.get("allreduce") or {}
            print(
                f"\n{key}: {'passed' if d.get('ok') else 'FAILED'} {d.get('launch_regime')}; checks"
                f" {d.get('checks')}; loss diff {fmt(par.get('max_loss_diff'), '.1e')}, weights"
                f" {fmt(par.get('max_weight_abs_diff'), '.1e')}; steady step"
                f" {fmt(1e3 * (d.get('timing', {}).get('steady_step_seconds') or 0), '.1f')} ms;"
                f" all-reduce busbw {fmt(bw.get('busbw_gbps'), '.0f')} GB/s"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    print(f"\nraw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
