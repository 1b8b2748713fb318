#!/usr/bin/env bash
# Prepare what bench/gpu_adopt.sh needs on the GPU machine (which has no network), here, in the
# git-ignored folder .gpu/ (carry it: run(carry=[".gpu"])):
#
#   .gpu/tool/       envbuild's wheel (python -m build) and its dependencies, for CPython 3.12 x86_64
#   .gpu/wheelhouse/ the gpu-base-cu130 stack: fla-core, einops, torchmetrics, lightning-utilities,
#                    tqdm, plus numpy / packaging / typing-extensions in case the base env lacks them
#                    (no torch: it is adopted from the machine's environment)
#
# About 45 MB in all (numpy ~16 MB and uv ~20 MB are the big ones).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PLATFORM=(--only-binary=:all: --implementation cp --python-version 3.12
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
rm -rf .gpu/tool .gpu/wheelhouse && mkdir -p .gpu/tool .gpu/wheelhouse
"$PY" -m build --wheel --outdir .gpu/tool . >/dev/null
"$PY" -m pip download -q "${PLATFORM[@]}" -d .gpu/tool .gpu/tool/envbuild-*.whl
"$PY" -m pip download -q --no-deps "${PLATFORM[@]}" -d .gpu/wheelhouse \
    fla-core==0.4.2 einops==0.8.1 torchmetrics==1.9.0 "lightning-utilities>=0.15.3" tqdm==4.70.1 \
    numpy packaging typing-extensions
du -sh .gpu/tool .gpu/wheelhouse
ls .gpu/wheelhouse
