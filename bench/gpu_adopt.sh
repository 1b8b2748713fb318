#!/usr/bin/env bash
# Prove base-image torch adoption on the GPU machine the device tool lends (torch 2.11.0+cu130,
# Python 3.12, `python3` itself a venv, no network):
#   1. install envbuild into its own venv from the carried wheels (.gpu/tool), offline;
#   2. provision the gpu-base-cu130 stack INTO python3's environment, offline, from the carried
#      wheelhouse (.gpu/wheelhouse), the ABI guard after every step;
#   3. envbuild verify; show that torch's RECORD is byte-identical before and after.
#
# Here:   bench/gpu_carry.sh            (fills the git-ignored .gpu/)
# There:  run(command="bash bench/gpu_adopt.sh", carry=[".gpu"])
#
# PYTHON (default python3) and STACK_ARGS (default --profile gpu-base-cu130) are overridable,
# to rehearse the script on a CPU machine against another adopting stack.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=${CARRY:-.gpu}
PYTHON=${PYTHON:-python3}
STACK_ARGS=${STACK_ARGS:---profile gpu-base-cu130}
WORK=${WORK:-/tmp/envbuild-gpu}
OUT=${OUT:-$WORK/out}
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 NO_COLOR=1
unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CONSTRAINT

for d in "$CARRY/tool" "$CARRY/wheelhouse"; do
    [ -d "$d" ] || { echo "missing $d: run bench/gpu_carry.sh here first and carry .gpu" >&2; exit 2; }
done
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"

ENV_PREFIX=$("$PYTHON" -c 'import sys; print(sys.prefix)')
"$PYTHON" - <<'PY'
import sys, torch
print(f"environment: {sys.prefix} (venv: {sys.prefix != sys.base_prefix}), Python {sys.version.split()[0]}")
print(f"torch {torch.__version__}, cuda {torch.version.cuda}, GPU available: {torch.cuda.is_available()}")
PY
record() { sha256sum "$ENV_PREFIX"/lib/python3*/site-packages/torch-*.dist-info/RECORD | cut -d' ' -f1; }
BEFORE=$(record)

echo "== 1. envbuild into $WORK/tool (offline, from $CARRY/tool)"
if ! "$PYTHON" -m venv "$WORK/tool" 2>"$OUT/venv.err"; then
    "$PYTHON" -m venv --without-pip "$WORK/tool"
    "$PYTHON" -m pip --python "$WORK/tool/bin/python" install -q --no-index --find-links "$CARRY/tool" pip
fi
"$WORK/tool/bin/python" -m pip install -q --no-index --find-links "$CARRY/tool" envbuild
EB="$WORK/tool/bin/envbuild"
"$EB" --version

echo "== 2. provision $STACK_ARGS into $ENV_PREFIX (offline, wheelhouse $CARRY/wheelhouse)"
T0=$(date +%s.%N)
# shellcheck disable=SC2086
"$EB" provision $STACK_ARGS --venv "$ENV_PREFIX" --root "$WORK/root" --home "$WORK/home" \
    --offline --wheelhouse "$(realpath "$CARRY/wheelhouse")" --json > "$OUT/provision.json"
T1=$(date +%s.%N)
echo "provision: $(python3 -c "print(round($T1-$T0, 1))" 2>/dev/null || echo '?') s"
cat "$OUT/provision.json"

echo "== 3. verify"
# shellcheck disable=SC2086
"$EB" verify $STACK_ARGS --root "$WORK/root" --venv "$ENV_PREFIX"
AFTER=$(record)
echo "torch RECORD sha256 before: $BEFORE"
echo "torch RECORD sha256 after:  $AFTER"
[ "$BEFORE" = "$AFTER" ] || { echo "torch was touched" >&2; exit 6; }
"$PYTHON" -c 'import torch, torchmetrics, fla, einops, tqdm; print("imports ok: torch", torch.__version__, "torchmetrics", torchmetrics.__version__)'
cp "$WORK"/root/receipts/*.json "$OUT/" 2>/dev/null || true
cp "$WORK"/root/.envbuild/manifest.json "$WORK"/root/.envbuild/constraints.txt "$OUT/" 2>/dev/null || true
echo "== done: torch adopted, stack provisioned offline with the guard, verify ok"
