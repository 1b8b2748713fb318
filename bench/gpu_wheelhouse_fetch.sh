#!/usr/bin/env bash
# Run HERE (with network) before bench/gpu_wheelhouse.sh: fills .gpu/wheelhouse-proof/ (ignored
# by git) with what the offline GPU machine needs, then pass it with the device tool's
# carry=[".gpu/wheelhouse-proof"]:
#   sdists/  causal_conv1d-1.6.1.tar.gz (sha256-checked against wheelhouse_specs/causal-conv1d.toml)
#   wheels/  envbuild's runtime deps + setuptools, wheel<0.46, ninja for CPython 3.12 x86_64
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DEST=$REPO/.gpu/wheelhouse-proof
PY=${PYTHON:-$REPO/.venv/bin/python}
mkdir -p "$DEST/sdists" "$DEST/wheels"
# pip download cannot fetch this sdist (its metadata step needs torch), so take the pinned URL
"$PY" - "$REPO/wheelhouse_specs/causal-conv1d.toml" "$DEST/sdists" <<'PYEOF'
import sys
from pathlib import Path
from envbuild.wheelhouse_spec import load_wheel_spec
from envbuild.mirror import download_one
spec = load_wheel_spec(Path(sys.argv[1]))
dest = Path(sys.argv[2]) / spec.source.filename
download_one(spec.source.location, dest, spec.source.sha256)
print("ok", dest)
PYEOF
"$PY" -m pip download -q --only-binary :all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$DEST/wheels" requests rich packaging setuptools "wheel<0.46" ninja
du -sh "$DEST"
