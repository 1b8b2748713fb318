#!/bin/sh
# install.sh [PREFIX]: install envbuild from this archive's wheels, offline, with nothing but the
# system python3 (3.10+): no pip, no python3-venv, no uv needed beforehand.
#
#   tar xzf envbuild-bootstrap-*.tar.gz && ./envbuild-bootstrap/install.sh
#
# PREFIX (default: /opt/envbuild-tool as root, else ~/.local/envbuild) gets a venv made with
# `python3 -m venv --without-pip` (works without Ubuntu's python3-venv package); pip runs from its
# own wheel in this archive (`python pip.whl/pip install`), from these wheels only (--no-index,
# --isolated: the host's pip configuration plays no part). envbuild is linked into /usr/local/bin
# (root) or ~/.local/bin, or BINDIR. PYTHON=... picks another interpreter.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
if [ "$(id -u)" = 0 ]; then PREFIX=${1:-/opt/envbuild-tool}; BIN=/usr/local/bin; else PREFIX=${1:-$HOME/.local/envbuild}; BIN=$HOME/.local/bin; fi
BIN=${BINDIR:-$BIN}

command -v "$PY" >/dev/null 2>&1 || { echo "install.sh: no $PY on PATH; envbuild needs Python 3.10+ (apt-get install python3)" >&2; exit 3; }
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "install.sh: envbuild needs Python 3.10+, $PY is $("$PY" -V 2>&1)" >&2; exit 3; }
(cd "$HERE/wheels" && sha256sum --quiet -c ../SHA256SUMS) \
  || { echo "install.sh: the archive's wheels do not match SHA256SUMS (a damaged download?)" >&2; exit 9; }

"$PY" -m venv --without-pip "$PREFIX"
PIP_WHEEL=$(ls "$HERE"/wheels/pip-*.whl | head -n 1)
"$PREFIX/bin/python" "$PIP_WHEEL/pip" install --isolated --no-index --find-links "$HERE/wheels" \
  --disable-pip-version-check --no-warn-script-location -q pip envbuild
mkdir -p "$BIN"
ln -sf "$PREFIX/bin/envbuild" "$BIN/envbuild"
"$BIN/envbuild" --version
echo "envbuild installed in $PREFIX; $BIN/envbuild is on the way (add $BIN to PATH if it is not)."
