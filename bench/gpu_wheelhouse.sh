#!/usr/bin/env bash
# GPU proof for the wheelhouse (issue 4). Runs on the offline GPU machine, in the repo root:
#   1. a venv that sees the machine's torch (--system-site-packages) + envbuild's deps from
#      .gpu/wheelhouse-proof/wheels (no network there);
#   2. `envbuild wheelhouse build` of our CUDA extension (tests/packages/cuda_ext) and of
#      causal-conv1d 1.6.1 from its sdist (.gpu/wheelhouse-proof/sdists, sha256-checked, patched
#      to build for sm_90 only), without build isolation, against the installed torch;
#   3. a second build of both: must come from the cache;
#   4. installs both wheels (--no-deps --no-index), runs each kernel against a PyTorch reference
#      (bench/gpu_wheelhouse_check.py prints rel errors) and the ABI provenance check.
# Prepare here first: bash bench/gpu_wheelhouse_fetch.sh ; then carry .gpu/wheelhouse-proof.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
PROOF=$REPO/.gpu/wheelhouse-proof
WORK=${WORK:-/tmp/envbuild-gpu-wheelhouse}
OUTDIR=${OUT:-$WORK/out}
if [ ! -f "$PROOF/sdists/causal_conv1d-1.6.1.tar.gz" ] || [ ! -d "$PROOF/wheels" ]; then
  echo "missing $PROOF: run bench/gpu_wheelhouse_fetch.sh on a networked host and carry .gpu/wheelhouse-proof" >&2
  exit 2
fi
PY=""
for cand in "${TORCH_PYTHON:-}" python3.12 python3 python; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null && "$cand" -c "import torch" 2>/dev/null && { PY=$(command -v "$cand"); break; }
done
[ -n "$PY" ] || { echo "no python with torch found (set TORCH_PYTHON)" >&2; exit 2; }
echo "== host"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
"$PY" -c "import torch, sys; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '|', torch.cuda.get_device_name(0))"
nvcc --version | tail -2; echo "cpus $(nproc)"

rm -rf "$WORK/venv" "$WORK/wheelhouse"; mkdir -p "$WORK" "$OUTDIR"
"$PY" -m venv "$WORK/venv"
V=$WORK/venv/bin/python
# The image's python3 is itself a venv, so --system-site-packages would not see its torch:
# a .pth file puts the base environment's site-packages (and its torch) on the new venv's path.
BASE_SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
VSITE=$("$V" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$BASE_SITE" > "$VSITE/_envbuild_base_env.pth"
"$V" -m pip install -q --no-index --find-links "$PROOF/wheels" requests rich packaging setuptools "wheel<0.46" ninja
export PYTHONPATH=$REPO PATH="$WORK/venv/bin:$PATH" MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=${NVCC_THREADS:-4}
export ENVBUILD_CACHE_DIR=$WORK/cache
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
echo "CUDA_HOME=${CUDA_HOME:-unset}"

# WHEELHOUSE_SPECS="tests/packages/cuda_ext/wheelhouse.toml" builds only our own extension
# (causal-conv1d 1.6.1 for sm_90 alone takes about 6 minutes on 16 cores).
SPECS=${WHEELHOUSE_SPECS:-tests/packages/cuda_ext/wheelhouse.toml causal-conv1d}
build() {
  # shellcheck disable=SC2086
  "$V" -m envbuild wheelhouse build $SPECS \
    --venv "$WORK/venv" --out "$WORK/wheelhouse" --sources "$PROOF/sdists" --json
}
echo "== build (first: compiles)"
t0=$(date +%s%N); build > "$OUTDIR/build1.json"; t1=$(date +%s%N)
cat "$OUTDIR/build1.json"; echo "first build: $(( (t1 - t0) / 1000000 )) ms"
echo "== build (second: cache)"
t0=$(date +%s%N); build > "$OUTDIR/build2.json"; t1=$(date +%s%N)
grep -o '"cached": [a-z]*' "$OUTDIR/build2.json"; echo "second build: $(( (t1 - t0) / 1000000 )) ms"
cp "$WORK"/wheelhouse/logs/*.log "$OUTDIR/" 2>/dev/null || true
grep -h -- "-gencode\|arch=compute" "$WORK"/wheelhouse/logs/causal-conv1d-*.log | grep -o "arch=compute_[0-9a-z]*,code=sm_[0-9a-z]*" | sort | uniq -c || true

echo "== install"
ls "$WORK/wheelhouse"/*.whl
"$V" -m pip install -q --no-index --no-deps "$WORK/wheelhouse"/*.whl
"$V" -m pip show causal-conv1d envbuild-cuda-ext | grep -E "^(Name|Version|Requires):"
echo "== kernels vs PyTorch reference"
cd "$WORK" && "$V" "$REPO/bench/gpu_wheelhouse_check.py"
