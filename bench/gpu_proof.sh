#!/usr/bin/env bash
# GPU proof for envbuild: preflight, smoke and dist-step against this machine's own torch.
#
#   bench/gpu_proof.sh prepare   # here (with an index): envbuild wheel + its runtime deps -> .gpu/proof-wheels
#   bench/gpu_proof.sh           # on the GPU machine (no network): install from .gpu/proof-wheels, run, summarise
#
# Device run: carry [".gpu/proof-wheels"], command "bash bench/gpu_proof.sh". Results (JSON, logs,
# receipts) go to $OUT (default .gpu/proof-out). Env: PYTHON (default python3, a venv with torch),
# PROOF_BF16=0 to skip the bf16 dist-step, PROOF_GLOO=0 to skip the gloo-on-a-GPU-host run.
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
REPO="$(cd "$(dirname "$0")/.." && pwd)"
WHEELS="$REPO/.gpu/proof-wheels"
PY="${PYTHON:-python3}"
section() { printf '\n===== %s =====\n' "$*"; }

if [ "${1:-}" = "prepare" ]; then
  PY="${PYTHON:-$REPO/.venv/bin/python}"  # has setuptools + wheel
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  "$PY" -m build -q --wheel --outdir "$WHEELS" "$REPO" >/dev/null || exit 1
  "$PY" -m pip download --no-deps --only-binary :all: --python-version 3.12 --implementation py \
      --abi none --platform any -d "$WHEELS" packaging requests rich urllib3 idna certifi \
      charset-normalizer markdown-it-py mdurl pygments truststore || exit 1
  ls -la "$WHEELS"
  exit 0
fi

OUT="${OUT:-$REPO/.gpu/proof-out}"
mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/envbuild-proof.XXXXXX)"
ROOT="$WORK/root"

section "host"
nvidia-smi -L || echo "no nvidia-smi"
nvidia-smi topo -m || true
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
env | grep -E '^(NCCL_|TORCH_|PYTORCH_|CUDA_|NVSHMEM_)' | sort || true

section "install envbuild"
if ls "$WHEELS"/envbuild-*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --target "$WORK/site" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="$WORK/site"
else
  echo "no wheels in $WHEELS (run 'bench/gpu_proof.sh prepare' first): running envbuild from the source tree"
  export PYTHONPATH="$REPO"
fi
EB=("$PY" -m envbuild)
"${EB[@]}" --version || exit 1
VENV="$("$PY" -c 'import sys; print(sys.prefix)')"

# A proof stack spec: the cpu profile's steps, with [host] expectations of this machine.
NGPU="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
GNAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oE 'H100|H200|B200|A100' || true)"
STACK="$WORK/stack.toml"
"$PY" - "$STACK" "$NGPU" "$GNAME" <<'PYEOF'
import sys
from pathlib import Path
import envbuild.spec as s
src = s.profile_path("cpu").read_text().replace('name = "cpu"', 'name = "gpu-proof"')
host = ["[host]"]
if int(sys.argv[2] or 0):
    host.append(f"gpu_count = {int(sys.argv[2])}")
if sys.argv[3]:
    host.append(f'gpu_name = "{sys.argv[3]}"')
host.append("data_min_free_gb = 1")
Path(sys.argv[1]).write_text(src.replace("[abi]", "\n".join(host) + "\n\n[abi]", 1))
PYEOF
COMMON=(--stack "$STACK" --root "$ROOT")

section "preflight"
"${EB[@]}" preflight "${COMMON[@]}" --skip index; echo "preflight exit $?" | tee "$OUT/preflight.rc"
"${EB[@]}" preflight "${COMMON[@]}" --skip index --json > "$OUT/preflight.json" 2>/dev/null

section "smoke"
T0=$SECONDS
"${EB[@]}" smoke "${COMMON[@]}" --venv "$VENV" --json > "$OUT/smoke.json" 2> "$OUT/smoke.stderr"
echo "smoke exit $? in $((SECONDS - T0)) s" | tee "$OUT/smoke.rc"

section "smoke, every kernel's output perturbed by 3x its tolerance (planted): exit 7 expected"
ENVBUILD_SMOKE_PERTURB=all "${EB[@]}" smoke "${COMMON[@]}" --venv "$VENV" --quick --no-receipt --json \
    > "$OUT/smoke-planted.json" 2> "$OUT/smoke-planted.stderr"
echo "planted smoke exit $?" | tee "$OUT/smoke-planted.rc"

section "dist-step (NCCL, fp32)"
T0=$SECONDS
"${EB[@]}" dist-step "${COMMON[@]}" --venv "$VENV" --json > "$OUT/dist-step.json" 2> "$OUT/dist-step.stderr"
echo "dist-step exit $? in $((SECONDS - T0)) s wall" | tee "$OUT/dist-step.rc"

if [ "${PROOF_BF16:-1}" = 1 ] && [ "${NGPU:-0}" -gt 0 ]; then
  section "dist-step (NCCL, bf16)"
  "${EB[@]}" dist-step "${COMMON[@]}" --venv "$VENV" --bf16 --json > "$OUT/dist-step-bf16.json" 2> "$OUT/dist-step-bf16.stderr"
  echo "dist-step bf16 exit $?" | tee "$OUT/dist-step-bf16.rc"
fi
if [ "${PROOF_GLOO:-1}" = 1 ] && [ "${NGPU:-0}" -gt 0 ]; then
  section "dist-step (gloo on CPU, 2 processes, on a GPU host)"
  "${EB[@]}" dist-step "${COMMON[@]}" --venv "$VENV" --cpu --nproc 2 --steps 3 --json > "$OUT/dist-step-gloo.json" 2> "$OUT/dist-step-gloo.stderr"
  echo "dist-step gloo exit $?" | tee "$OUT/dist-step-gloo.rc"
fi
mkdir -p "$OUT/receipts" "$OUT/logs"
cp "$ROOT"/receipts/*.json "$OUT/receipts/" 2>/dev/null || true
cp "$ROOT"/logs/*.log "$OUT/logs/" 2>/dev/null || true

section "summary"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except Exception as exc:
        return {"_error": f"{name}: {exc}"}
pf = load("preflight.json")
print(f"preflight: {pf.get('verdict')}  " + "; ".join(f"{c['name']}={c['verdict']} ({c['measured']})"
      for c in pf.get("checks", []) if c["verdict"] != "pass" or c["name"] in ("driver", "gpus", "topology")))
sm = load("smoke.json")
print(f"\nsmoke: ok={sm.get('ok')} in {sm.get('seconds', 0):.1f} s on {sm.get('environment', {}).get('device', 'CPU')}")
print(f"  {'check':26} {'verdict':7} {'rel err':>9} {'time s':>7}  note")
for c in sm.get("checks", []):
    err = c.get("rel_err")
    note = f"{c['tflops']:.0f} TFLOP/s of {c.get('datasheet_tflops')}" if c.get("tflops") and c.get("datasheet_tflops") else (c.get("reason") or "")
    print(f"  {c['name']:26} {c['verdict']:7} {'-' if err is None else format(err, '.2e'):>9} {c.get('seconds', 0):7.2f}  {note[:90]}")
pl = load("smoke-planted.json")
failed = [c["name"] for c in pl.get("checks", []) if c["verdict"] == "fail"]
ran = [c["name"] for c in pl.get("checks", []) if c["verdict"] in ("pass", "fail")]
print(f"\nplanted smoke: ok={pl.get('ok')}; {len(failed)} of {len(ran)} checks that ran failed; "
      f"{(out / 'smoke-planted.rc').read_text().strip() if (out / 'smoke-planted.rc').exists() else ''}")
for name in ("dist-step.json", "dist-step-bf16.json", "dist-step-gloo.json"):
    d = load(name)
    if "_error" in d and not (out / name).exists():
        continue
    if "_error" in d:
        print(f"\n{name}: no result ({d['_error']})"); continue
    t, bw, par = d.get("timing", {}), d.get("allreduce"), d.get("parity", {})
    peaks = [max(r["peak_memory"].values()) for r in d.get("ranks", [])]
    print(f"\n{name}: ok={d.get('ok')} {d.get('launch_regime')} world={d.get('world_size')} {d.get('model', {}).get('dtype')}")
    print(f"  checks: " + ", ".join(f"{k}={'pass' if v else 'FAIL'}" for k, v in d.get("checks", {}).items()))
    print(f"  losses: {' '.join(f'{v:.4f}' for v in d.get('losses', []))}  max|dloss| {par.get('max_loss_diff', 0):.1e}  grad-norm rel {par.get('max_grad_norm_rel_diff', 0):.1e}  weights {par.get('max_weight_abs_diff', 0):.1e}")
    print(f"  first step {1e3 * t.get('first_step_seconds', 0):.1f} ms, steady {1e3 * t.get('steady_step_seconds', 0):.1f} ms, "
          f"busbw {bw['busbw_gbps']:.1f} GB/s ({bw['bytes'] / 2**20:.0f} MiB)" if bw else "  busbw n/a (1 rank)")
    print(f"  peak memory per rank (MB): {', '.join(f'{p:.0f}' for p in peaks)}; torchrun {d.get('torchrun_seconds', 0):.1f} s, worker wall {d.get('wall_seconds', 0):.1f} s")
PYEOF
echo "results in $OUT"
