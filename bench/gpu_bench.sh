#!/usr/bin/env bash
# The provision benchmark on the GPU machine (Python 3.12, torch 2.11.0+cu130 preinstalled, no network).
#
#   1. here, with network:     bench/gpu_bench.sh prepare
#        downloads into .gpu/bench-wheelhouse (gitignored; ~40 MB): cp312 manylinux wheels of
#        envbuild's dependencies (uv included), setuptools for its editable install, and
#        pip/setuptools/wheel for `uv venv --seed`. No torch: a cp312 CPU torch is not available
#        offline here, and the GPU run does not need one (see below).
#      (BENCH_WHEELHOUSE=DIR picks another folder: .gpu/tool, which bench/gpu_carry.sh fills, holds
#      the same set and works as is.)
#   2. on the GPU machine:     bench/gpu_bench.sh run        (carry: the wheelhouse folder)
#        makes a throw-away venv for envbuild under /tmp, installs envbuild offline from the
#        carried wheelhouse, and runs `bench_provision.py --quick` on the machine's local disk:
#        the synthetic stack (a stand-in torch baseline + 30 tiny wheels + one 20 MB wheel; its
#        wheels are generated there), envbuild-uv / envbuild-pip / bare uv / bare pip, cold, warm
#        and re-run; and `--torch-python python3`: the metadata ABI guard against a full
#        `import torch` of the machine's own torch 2.11.0+cu130 (read-only; nothing is installed
#        into that environment). Results land in $OUT (or /tmp/envbuild-gpu-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
WH=${BENCH_WHEELHOUSE:-.gpu/bench-wheelhouse}
case $WH in /*) ;; *) WH="$PWD/$WH" ;; esac  # absolute: pip reads find-links in its build subprocess too
PY=${PYTHON:-python3}

case "${1:-run}" in
prepare)
    mkdir -p "$WH"
    "$PY" -m pip download -d "$WH" --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any \
        "packaging>=24.2" "pip-tools>=7.4" "build>=1.2" "wheel>=0.43" "requests>=2.31" "rich>=13.7" "uv>=0.5" \
        "setuptools>=68" pip
    ls -la "$WH"
    ;;
run)
    OUTDIR=${OUT:-/tmp/envbuild-gpu-bench}
    mkdir -p "$OUTDIR"
    V=/tmp/envbuild-bench-venv
    rm -rf "$V"
    "$PY" -m venv "$V"
    "$V/bin/pip" install -q --no-index --find-links "$WH" -e .
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUTDIR/gpu.txt" 2>&1 || true
    df -h /tmp > "$OUTDIR/disk.txt" 2>&1 || true
    "$V/bin/python" bench/bench_provision.py --quick --seeds "$WH" --torch-python "$(command -v "$PY")" \
        --work /tmp/envbuild-bench-work --out "$OUTDIR/gpu-bench.json" 2>&1 | tee "$OUTDIR/gpu-bench.txt"
    ;;
torch)
    # The real-size comparison: the image's torch 2.11.0+cu130 and its CUDA runtime wheels,
    # repacked into wheels (bench/repack_installed.py), served over HTTP from the local disk;
    # stack bench/stacks/torch-cu130-repacked.toml. Carry .gpu (tool/ and wheelhouse/, from
    # bench/gpu_carry.sh). BENCH_VARIANTS / BENCH_ROUNDS / BENCH_WARM pick what runs.
    OUTDIR=${OUT:-/tmp/envbuild-gpu-bench}
    mkdir -p "$OUTDIR"
    V=/tmp/envbuild-bench-venv
    TW=/tmp/envbuild-torch-wheelhouse
    rm -rf "$V"
    "$PY" -m venv "$V"
    "$V/bin/pip" install -q --no-index --find-links "$WH" -e .
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUTDIR/gpu.txt" 2>&1 || true
    if [ ! -f "$TW/.done" ]; then
        rm -rf "$TW"
        "$PY" bench/repack_installed.py --out "$TW" --set-version torch=2.11.0+cu130 torch 2>&1 | tee "$OUTDIR/repack.txt"
        cp "$PWD/.gpu/wheelhouse/"*.whl "$TW/"
        cp "$WH"/pip-*.whl "$WH"/setuptools-*.whl "$WH"/wheel-*.whl "$TW/"
        touch "$TW/.done"
    fi
    df -h /tmp > "$OUTDIR/disk.txt" 2>&1 || true
    "$V/bin/python" bench/bench_provision.py --stacks cpu --stack bench/stacks/torch-cu130-repacked.toml \
        --wheelhouse "$TW" --python "$(command -v "$PY")" --prefetch no \
        --variants "${BENCH_VARIANTS:-envbuild-uv,bare-uv}" \
        --rounds "${BENCH_ROUNDS:-2}" --warm-rounds "${BENCH_WARM:-2}" \
        --work /tmp/envbuild-bench-work --out "$OUTDIR/gpu-torch-bench.json" 2>&1 | tee "$OUTDIR/gpu-torch-bench.txt"
    ;;
*)
    echo "usage: $0 prepare|run|torch" >&2
    exit 2
    ;;
esac
