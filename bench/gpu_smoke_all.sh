#!/usr/bin/env bash
# smoke on every GPU at once, the planted faults both ways, and dist-step across two agents on
# one host, on a multi-GPU machine. Runs from a checkout with the image's python3 (torch adopted,
# nothing to install), like bench/gpu_dist_hang.sh:
#   run(command="bash bench/gpu_smoke_all.sh", kind="nvidia-h100-x4")   # or -x2
# Steps (each one's JSON, exit status and wall time; a table at the end, then the warm runs'
# phases per GPU, and $OUT/summary.json with every step's per-GPU results and phases):
#   probe    what a warm run's parts cost alone: nvidia-smi's query, /proc's GPU list, the CLI's
#            start
#   cold1    --gpus 0 alone, empty Triton/inductor caches under a fresh data root
#   cold     every GPU, empty caches under another fresh data root: N GPUs compile once
#   warm     every GPU again: the caches the first one left (three times; warmR with the receipt,
#            as `envbuild smoke` runs by default; warmP with ENVBUILD_SMOKE_SPLIT=0: torch.compile
#            in the worker, no process of its own; warmE0 with ENVBUILD_SMOKE_EARLY_CUDA=0: CUDA
#            started after the imports; warmS with ENVBUILD_SMOKE_PROC_GPUS=-: the GPUs from
#            nvidia-smi)
#   one      --gpus 0 alone, warm: what N GPUs cost over one
#   wrong    ENVBUILD_SMOKE_PERTURB_GPUS=1: GPU 1's answers perturbed: exit 7 naming GPU 1 only
#   slow     ENVBUILD_SMOKE_LOAD_GPUS=1: a competing matmul loop on GPU 1: exit 7, GPU 1 slow
#   dist     dist-step, one agent, every GPU: the all-reduce against the links (nvidia-smi topo)
#   agents   dist-step --nnodes 2, two agents on this host (c10d rendezvous on loopback), one GPU each
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
cd "$(dirname "$0")/.."
R=/tmp/smoke-all; rm -rf "$R"; mkdir -p "$R"
OUT=${OUT:-$R/out}; mkdir -p "$OUT"
PY=$(command -v python3)
EB=("$PY" -m envbuild)
COMMON=(--python "$PY" --profile gpu-base-cu130 --root "$R/root")
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv,noheader | tee "$R/gpus.txt"
nvidia-smi topo -m > "$R/topo.txt" 2>&1; head -8 "$R/topo.txt"
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "gpus", torch.cuda.device_count())'
NGPU=$(grep -c . "$R/gpus.txt")

echo "== probe"
{
  nvidia-smi --query-gpu=index,persistence_mode,clocks.sm --format=csv,noheader
  for i in 1 2 3; do
    /usr/bin/time -f "nvidia-smi query %e s" nvidia-smi --query-gpu=index,uuid,pci.bus_id,name \
      --format=csv,noheader,nounits > /dev/null
  done
  head -20 /proc/driver/nvidia/gpus/*/information 2>&1 | head -24
  "$PY" -c 'import time; from envbuild.nvidia import proc_gpus; from envbuild.proof.smoke.gpus import visible_gpus
from pathlib import Path; t = time.perf_counter()
p = proc_gpus(Path("/proc/driver/nvidia/gpus")); t1 = time.perf_counter()
import os; s = visible_gpus({**os.environ, "ENVBUILD_SMOKE_PROC_GPUS": "-"}); t2 = time.perf_counter()
print(f"proc_gpus {1e3 * (t1 - t):.2f} ms, nvidia-smi {1e3 * (t2 - t1):.0f} ms, same: {p == s}")
print(p)'
  for i in 1 2; do /usr/bin/time -f "envbuild --help %e s" "${EB[@]}" smoke --help > /dev/null; done
  for gc in on off; do  # the torch.compile process's imports, with the cyclic GC and without
    "$PY" -c "import gc, time; t = time.perf_counter(); c = time.process_time()
gc.disable() if '$gc' == 'off' else None
import torch, torch._dynamo, torch._inductor.compile_fx, triton
print('imports with gc $gc: %.2f s, %.2f CPU s' % (time.perf_counter() - t, time.process_time() - c))"
  done
} 2>&1 | tee "$R/probe.txt"

step() {  # step NAME [ENV=...] -- ARGS: envbuild with ARGS, JSON to $OUT/NAME.json, status and wall time
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0; t0=$(date +%s.%N)
  env "${envs[@]}" "${EB[@]}" "$@" --json > "$R/$name.json" 2> "$R/$name.err"
  local rc=$?
  local t1; t1=$(date +%s.%N)
  local wall; wall=$("$PY" -c "print(round($t1 - $t0, 2))")
  echo "{\"step\": \"$name\", \"exit\": $rc, \"wall_s\": $wall, \"t0\": $t0, \"t1\": $t1}" \
    >> "$R/steps.jsonl"
  echo "== $name: exit $rc in $wall s"; tail -4 "$R/$name.err"
}

step cold1 -- smoke --python "$PY" --profile gpu-base-cu130 --root "$R/root1" --no-receipt --gpus 0
step cold -- smoke "${COMMON[@]}"
step warm -- smoke "${COMMON[@]}" --no-receipt
step warmP ENVBUILD_SMOKE_SPLIT=0 -- smoke "${COMMON[@]}" --no-receipt
step warmb -- smoke "${COMMON[@]}" --no-receipt
step warmE0 ENVBUILD_SMOKE_EARLY_CUDA=0 -- smoke "${COMMON[@]}" --no-receipt
step warmc -- smoke "${COMMON[@]}" --no-receipt
step warmS ENVBUILD_SMOKE_PROC_GPUS=- -- smoke "${COMMON[@]}" --no-receipt
step warmR -- smoke "${COMMON[@]}"
step one -- smoke "${COMMON[@]}" --no-receipt --gpus 0
if [ "$NGPU" -ge 2 ]; then
  step wrong ENVBUILD_SMOKE_PERTURB_GPUS=1 ENVBUILD_SMOKE_PERTURB=matmul -- smoke "${COMMON[@]}" --no-receipt
  step slow ENVBUILD_SMOKE_LOAD_GPUS=1 -- smoke "${COMMON[@]}" --no-receipt
  step dist -- dist-step "${COMMON[@]}" --no-receipt
  U0=$(sed -n 1p "$R/gpus.txt" | cut -d, -f3 | tr -d ' ')
  U1=$(sed -n 2p "$R/gpus.txt" | cut -d, -f3 | tr -d ' ')
  AG=(dist-step "${COMMON[@]}" --no-receipt --nnodes 2 --nproc 1 --rdzv-endpoint 127.0.0.1:29611
      --rdzv-id smoke-all --timeout 300)
  step agent1 CUDA_VISIBLE_DEVICES="$U1" -- "${AG[@]}" &
  step agent0 CUDA_VISIBLE_DEVICES="$U0" -- "${AG[@]}"
  wait
fi
cp "$R"/root/receipts/smoke-*.json "$OUT/receipt-smoke.json" 2>/dev/null || true
cp "$R/cold.json" "$OUT/cold.json"

"$PY" - "$R" "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
steps = {}
for line in (out / "steps.jsonl").read_text().splitlines():
    s = json.loads(line)
    steps[s["step"]] = s
def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
    except Exception as exc:
        return {"_error": str(exc)}
def spans(timeline, end):
    """Each phase's seconds, from its row to the next (the last to end)."""
    rows = [(str(r[0]), float(r[1])) for r in timeline]
    return {n: round(nxt - t, 3) for (n, t), nxt in zip(rows, [t for _, t in rows[1:]] + [end])}
def phases(d, step):
    """Where a smoke's wall went: envbuild's own moments, and each worker's phases."""
    timing = d.get("timing") or {}
    par = {n: float(t) for n, t in timing.get("parent") or []}
    out = {}
    if par:
        marks = [("bench", float(step["t0"]))] + sorted(par.items(), key=lambda kv: kv[1])
        out["parent"] = spans(marks, float(step["t1"]))
    workers = d.get("gpus") or [{"index": 0, "timeline": timing.get("timeline") or [],
                                 "early_cuda": timing.get("early_cuda") or {},
                                 "compile_part": timing.get("compile_part")}]
    parts = []
    for g in workers:
        parts.append((f"gpu{g['index']}", g))
        if g.get("compile_part"):  # the torch.compile check's own process on that GPU
            read = [t for n, t, _ in g.get("timeline") or [] if n == "result"]
            parts.append((f"gpu{g['index']}B", {**g["compile_part"], "_end": read[0] if read else None}))
    for who, g in parts:
        tl = g.get("timeline") or []
        if not tl:
            continue
        # a worker's last phase ends when smoke had its exit (launched + its seconds), the
        # torch.compile process's when the worker read its result (its exit overlaps)
        end = par.get("collected", tl[-1][1])
        if "seconds" in g and "launched" in par and "uuid" in g:
            end = par["launched"] + g["seconds"]
        elif g.get("_end"):
            end = g["_end"]
        sp = spans(tl, end)
        sp["launch->python"] = round(tl[0][1] - par.get("launched", tl[0][1]), 3)
        early = g.get("early_cuda") or {}
        if early.get("ready"):
            sp["early cuda"] = round(early["ready"] - early["began"], 3)
            sp["early cuda ready->start"] = round(early["ready"] - next(t for n, t, _ in tl if n == "start"), 3)
        out[who] = sp
    return out
PHASE_COLS = ("launch->python", "python", "imports", "start", "cuda", "matmul", "sdpa", "triton",
              "torch.compile", "environment", "wait torch.compile", "result", "early cuda",
              "early cuda ready->start")
def phase_table(name, ph):
    for who, sp in ph.items():
        if who == "parent":
            print(f"  {name:8} envbuild: " + "  ".join(f"{k} {v:.2f}" for k, v in sp.items()))
            continue
        other = sum(v for k, v in sp.items() if k not in PHASE_COLS)
        print(f"  {name:8} {who:5} " + " ".join(f"{sp.get(k, 0):>6.2f}" for k, in zip(PHASE_COLS)) + f" {other:>6.2f}")

print(f"\n{'step':8} {'exit':>4} {'wall s':>7} {'smoke s':>7}  per GPU (matmul TFLOP/s, failed checks)  slow")
summary = {"gpus": (out / "gpus.txt").read_text().strip().splitlines(),
           "topology": (out / "topo.txt").read_text().splitlines()[:12], "steps": {}}
SMOKES = ("cold1", "cold", "warm", "warmP", "warmb", "warmE0", "warmc", "warmS", "warmR", "one",
          "wrong", "slow")
for name in SMOKES:
    if name not in steps:
        continue
    d = load(name)
    per = []
    for g in d.get("gpus", []):
        mm = next((c for c in g["checks"] if c["name"] == "matmul"), {})
        bad = [c["name"] for c in g["checks"] if c["verdict"] == "fail"]
        per.append(f"{g['index']}:{mm.get('tflops') or 0:.0f}" + (f"!{'+'.join(bad)}" if bad else ""))
    if not d.get("gpus"):
        mm = next((c for c in d.get("checks", []) if c["name"] == "matmul"), {})
        per.append(f"{mm.get('tflops') or 0:.0f}")
    slow = [f"GPU {f['index']} {f['check']} {f['tflops']:.0f} ({100 * f['below']:.0f}% below; "
            f"{(f.get('nvml') or {}).get('sm_clock_mhz')} MHz {(f.get('nvml') or {}).get('throttle_reasons')})"
            for f in d.get("slow", [])]
    print(f"{name:8} {steps[name]['exit']:>4} {steps[name]['wall_s']:>7.1f} {d.get('seconds', 0):>7.1f}  "
          f"{' '.join(per):40} {'; '.join(slow) or '-'}")
    summary["steps"][name] = {**steps[name], "smoke_seconds": d.get("seconds"), "ok": d.get("ok"),
                              "per_gpu": [{"index": g["index"], "uuid": g["uuid"], "bus_id": g["bus_id"],
                                           "name": g["name"], "ok": g["ok"], "seconds": g["seconds"],
                                           "checks": {c["name"]: {k: c.get(k) for k in ("verdict", "rel_err", "tflops", "seconds", "nvml")}
                                                      for c in g["checks"]}} for g in d.get("gpus", [])],
                              "slow": d.get("slow"), "failed": [c.get("failed_gpus") for c in d.get("checks", []) if c.get("failed_gpus")],
                              "phases": phases(d, steps[name]),
                              "timing": d.get("timing"),
                              "timelines": {g["index"]: {"timeline": g.get("timeline"),
                                                         "early_cuda": g.get("early_cuda"),
                                                         "compile_part": g.get("compile_part")}
                                            for g in d.get("gpus", [])}}
for name in ("dist", "agent0", "agent1"):
    if name not in steps:
        continue
    d = load(name)
    bw, exp = d.get("allreduce") or {}, d.get("allreduce_expected") or {}
    print(f"{name:8} {steps[name]['exit']:>4} {steps[name]['wall_s']:>7.1f}  {d.get('launch_regime')} world={d.get('world_size')} "
          f"checks={all((d.get('checks') or {'x': False}).values())} busbw {bw.get('busbw_gbps', 0):.0f} GB/s "
          f"expected {exp.get('expected_busbw_gbps', 0):.0f} ({exp.get('basis')}) {exp.get('verdict')}")
    summary["steps"][name] = {**steps[name], "ok": d.get("ok"), "launch_regime": d.get("launch_regime"),
                              "world_size": d.get("world_size"), "checks": d.get("checks"), "allreduce": bw,
                              "allreduce_expected": exp, "parity": d.get("parity"),
                              "steady_step_seconds": (d.get("timing") or {}).get("steady_step_seconds")}
print("\nphases (s): envbuild's own moments, then per worker: " + " | ".join(PHASE_COLS) + " | other checks")
for name in SMOKES:
    if name in summary["steps"]:
        phase_table(name, summary["steps"][name]["phases"])
summary["probe"] = (out / "probe.txt").read_text().splitlines()
(Path(sys.argv[2]) / "summary.json").write_text(json.dumps(summary, indent=1))
PYEOF
