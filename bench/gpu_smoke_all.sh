#!/usr/bin/env bash
# smoke on every GPU at once, the planted faults both ways, and dist-step across two agents on
# one host, on a multi-GPU machine. Runs from a checkout with the image's python3 (torch adopted,
# nothing to install), like bench/gpu_dist_hang.sh:
#   run(command="bash bench/gpu_smoke_all.sh", kind="nvidia-h100-x4")   # or -x2
# Steps (each one's JSON, exit status and wall time; a table at the end, and $OUT/summary.json with
# every step's per-GPU results; $OUT also gets run.log if tee'd there, the cold run's receipt and JSON):
#   cold1    --gpus 0 alone, empty Triton/inductor caches under a fresh data root
#   cold     every GPU, empty caches under another fresh data root: N GPUs compile once
#   warm     every GPU again: the caches the first one left (twice, and twice more with
#            ENVBUILD_SMOKE_PREIMPORT=0: warm0, warm0b, the imports not overlapped with the matmul)
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

step() {  # step NAME [ENV=...] -- ARGS: envbuild with ARGS, JSON to $OUT/NAME.json, status and wall time
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0; t0=$(date +%s.%N)
  env "${envs[@]}" "${EB[@]}" "$@" --json > "$R/$name.json" 2> "$R/$name.err"
  local rc=$?
  local wall; wall=$("$PY" -c "import time; print(round(time.time() - $t0, 2))")
  echo "{\"step\": \"$name\", \"exit\": $rc, \"wall_s\": $wall}" >> "$R/steps.jsonl"
  echo "== $name: exit $rc in $wall s"; tail -4 "$R/$name.err"
}

step cold1 -- smoke --python "$PY" --profile gpu-base-cu130 --root "$R/root1" --no-receipt --gpus 0
step cold -- smoke "${COMMON[@]}"
step warm -- smoke "${COMMON[@]}" --no-receipt
step warm0 ENVBUILD_SMOKE_PREIMPORT=0 -- smoke "${COMMON[@]}" --no-receipt
step warmb -- smoke "${COMMON[@]}" --no-receipt
step warm0b ENVBUILD_SMOKE_PREIMPORT=0 -- smoke "${COMMON[@]}" --no-receipt
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
print(f"\n{'step':8} {'exit':>4} {'wall s':>7} {'smoke s':>7}  per GPU (matmul TFLOP/s, failed checks)  slow")
summary = {"gpus": (out / "gpus.txt").read_text().strip().splitlines(),
           "topology": (out / "topo.txt").read_text().splitlines()[:12], "steps": {}}
for name in ("cold1", "cold", "warm", "warm0", "warmb", "warm0b", "one", "wrong", "slow"):
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
                              "slow": d.get("slow"), "failed": [c.get("failed_gpus") for c in d.get("checks", []) if c.get("failed_gpus")]}
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
(Path(sys.argv[2]) / "summary.json").write_text(json.dumps(summary, indent=1))
PYEOF
