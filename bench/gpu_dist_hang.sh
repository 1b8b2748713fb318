#!/usr/bin/env bash
# dist-step on every GPU of the lent machine (NCCL), then the hung-rank case for real: SIGSTOP
# rank 1 in the middle of training and check that the run stops after --stall-timeout, exit 7,
# naming the rank and the collective the others wait in. Runs from a checkout of main, with the
# image's python3 (torch adopted, nothing to install):
#   run(command="bash bench/gpu_dist_hang.sh", kind="nvidia-h200-x2")
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
cd "$(dirname "$0")/.."
R=/tmp/dist-hang; rm -rf "$R"; mkdir -p "$R/tmp"
OUT=${OUT:-$R/out}; mkdir -p "$OUT"
EB=(python3 -m envbuild)
PY=$(command -v python3)
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== dist-step (fp32), every GPU"
"${EB[@]}" dist-step --python "$PY" --profile gpu-base-cu130 --root "$R/root" --no-receipt --json \
    > "$OUT/dist-step.json" 2> "$R/ds.err"; echo "exit $?"; tail -3 "$R/ds.err"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['launch_regime'], d['checks'], d['parity'], d['routing'], d['timing']['steady_step_seconds'])" "$OUT/dist-step.json"
echo "== hung rank: SIGSTOP rank 1 at step 2 (--stall-timeout 10)"
TMPDIR=$R/tmp "${EB[@]}" dist-step --python "$PY" --profile gpu-base-cu130 --root "$R/root" --no-receipt \
    --steps 300 --bw-mb 0 --stall-timeout 10 --timeout 300 > "$R/hang.out" 2>&1 &
agent=$!
victim=""
for _ in $(seq 1 1200); do
  f=$(ls "$R"/tmp/envbuild-dist-*/heartbeats/rank-1.json 2>/dev/null | head -1)
  if [ -n "$f" ] && grep -q '"phase": "step 2/' "$f" 2>/dev/null; then
    victim=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$f"); break
  fi
  sleep 0.1
done
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -STOP "$victim" && echo "SIGSTOP rank 1 (pid $victim)"
wait $agent; rc=$?
echo "exit $rc, $(python3 -c "print(round($(date +%s.%N)-$t0, 1))") s after SIGSTOP"
cat "$R/hang.out" | tee "$OUT/hang.txt"
echo "workers left: $(pgrep -f envbuild/proof/diststep/worker.py | wc -l)"
