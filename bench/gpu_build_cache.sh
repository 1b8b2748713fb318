#!/usr/bin/env bash
# The fleet build cache on the GPU machine the device tool lends (torch 2.11.0+cu130, nvcc 13.0,
# Python 3.12, `python3` itself a venv, no network): two data roots provision one lock at once
# against one shared build cache; the lock's sdist is a small CUDA torch extension
# (tests/packages/torch_ext with its kernel), compiled against the machine's own torch, adopted
# with --venv (each root gets its own hard-linked copy of python3's environment). It shows one
# compile (a counter the extension's setup.py appends to, and each receipt's `builds` record),
# then smoke-tests both roots (`envbuild smoke` and the extension's kernel on the GPU against
# torch), and, for scale, one root alone without the cache.
#
#   bash bench/gpu_build_cache.sh prepare    # here: .gpu/buildcache/{tool,wh,app} (~25 MB)
#   run(command="bash bench/gpu_build_cache.sh", carry=[".gpu/buildcache"])   # there
#
# It prints a table and writes $OUT/build-cache-gpu.json (default .gpu/buildcache-out).
# Rehearsal on a CPU machine: EXT_CUDA=0 bash bench/gpu_build_cache.sh prepare, then
# PYTHON=<a venv with torch>/bin/python EB=.venv/bin/envbuild bash bench/gpu_build_cache.sh
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
REPO="$(cd "$(dirname "$0")/.." && pwd)"
CARRY="$REPO/.gpu/buildcache"

if [ "${1:-}" = "prepare" ]; then
  set -e
  PY="$REPO/.venv/bin/python"
  PLATFORM=(--only-binary=:all: --implementation cp --python-version 3.12
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  rm -rf "$CARRY" && mkdir -p "$CARRY/tool" "$CARRY/wh" "$CARRY/app"
  "$PY" -m build -q --wheel --outdir "$CARRY/tool" "$REPO" >/dev/null
  "$PY" -m pip download -q "${PLATFORM[@]}" -d "$CARRY/tool" "$CARRY"/tool/envbuild-*.whl
  # the sdist (CUDA unless EXT_CUDA=0) and a lock of it, by real `uv lock` here: the URL it names
  # is never reached there (provision --offline takes the file from the wheelhouse by its sha256)
  "$PY" - "$CARRY" "${EXT_CUDA:-1}" <<'PY'
import subprocess, sys
from pathlib import Path
sys.path.insert(0, "tests")
from support.fixtures import installer_env
from support.gatelocks import uv_bin
from support.index import StaticServer
from support.torchext import pyproject, torch_ext_sdist
carry, cuda = Path(sys.argv[1]), sys.argv[2] == "1"
sdist = torch_ext_sdist(carry / "wh", cuda=cuda)
with StaticServer(carry / "wh") as srv:
    (carry / "app" / "pyproject.toml").write_text(pyproject(f"{srv.url}/{sdist.name}", None))
    env = {k: v for k, v in installer_env(carry / "lock-home").items() if k != "UV_NO_CONFIG"}
    subprocess.run([uv_bin(), "lock", "--no-cache"], cwd=carry / "app", env=env, check=True)
print(f"{sdist.name} (cuda: {cuda}) and its lock in {carry}")
PY
  rm -rf "$CARRY/lock-home"
  du -sh "$CARRY"/*
  exit 0
fi

export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CONSTRAINT
PY="${PYTHON:-python3}"
OUT="${OUT:-$REPO/.gpu/buildcache-out}"
LOCK="$CARRY/app/uv.lock"
for f in "$LOCK" "$CARRY/wh"; do
  [ -e "$f" ] || { echo "missing $f: run 'bash bench/gpu_build_cache.sh prepare' here and carry .gpu/buildcache" >&2; exit 2; }
done
ENV_PREFIX=$("$PY" -c 'import sys; print(sys.prefix)')
# the roots' venvs are hard links of python3's environment: on its filesystem where it allows
WORK="${WORK:-$(dirname "$ENV_PREFIX")/envbuild-buildcache}"
mkdir -p "$WORK" 2>/dev/null && touch "$WORK/.w" 2>/dev/null || WORK=/tmp/envbuild-buildcache
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"
SHARED="$WORK/shared"
COUNTER="$WORK/compiles.log"
section() { printf '\n===== %s =====\n' "$*"; }
now() { date +%s.%N; }
secs() { python3 -c "print(round($2 - $1, 1))"; }
declare -A R

section "host"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
command -v nvcc >/dev/null && nvcc --version | tail -2
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())'

if [ -n "${EB:-}" ]; then
  EB="$(cd "$(dirname "$EB")" && pwd)/$(basename "$EB")"
else
  section "install envbuild (offline, from the carried wheels)"
  "$PY" -m venv "$WORK/tool" && "$WORK/tool/bin/python" -m pip install -q --no-index --find-links "$CARRY/tool" envbuild
  EB="$WORK/tool/bin/envbuild"
fi
"$EB" --version || exit 1

copy_env() {  # $1: the copy; hard links where the filesystem allows, else a full copy
  cp -al "$ENV_PREFIX" "$1" 2>/dev/null || { rm -rf "$1"; cp -a "$ENV_PREFIX" "$1"; }
}
provision() {  # $1: name, $2...: more provision arguments
  # each root its own copy of the wheelhouse: provision --lock keeps the wheels it built in the
  # wheelhouse's builds/ (for a wheelhouse carried to the next host), which would be a second,
  # host-local way for one root to find the other's build
  local name=$1; shift
  cp -r "$CARRY/wh" "$WORK/$name/wh"
  TORCH_EXT_BUILDS="$COUNTER" HOME="$WORK/$name/home" "$EB" provision --lock "$LOCK" \
      --venv "$WORK/$name/venv" --root "$WORK/$name/root" --offline --wheelhouse "$WORK/$name/wh" "$@" \
      > "$OUT/$name.log" 2>&1
}
check_ext() {  # the extension's kernel against torch's own arithmetic, on the GPU where there is one
  "$WORK/$1/venv/bin/python" - <<'PY'
import torch, torch_ext_tiny
dev = "cuda" if torch.cuda.is_available() else "cpu"
a, b = torch.randn(1 << 20, device=dev), torch.randn(1 << 20, device=dev)
got = torch_ext_tiny.scaled_add(a, b, 0.5)
assert torch.allclose(got, a + 0.5 * b), "wrong answer"
print(f"torch_ext_tiny on {dev}: ok (cuda kernel built: {bool(torch_ext_tiny.cuda_built())})")
PY
}

section "copies of python3's environment for three roots"
T0=$(now)
for r in a b solo; do mkdir -p "$WORK/$r/home" && copy_env "$WORK/$r/venv"; done
R[copy_s]=$(secs "$T0" "$(now)")
echo "copied in ${R[copy_s]} s"

section "two roots at once, one shared build cache ($SHARED)"
T0=$(now)
provision a --build-cache "$SHARED" & PA=$!
provision b --build-cache "$SHARED" & PB=$!
wait $PA; R[a_rc]=$?
wait $PB; R[b_rc]=$?
R[pair_s]=$(secs "$T0" "$(now)")
R[pair_compiles]=$(wc -l < "$COUNTER" 2>/dev/null || echo 0)
grep -h "builds:\|waiting here\|took over\|published" "$OUT/a.log" "$OUT/b.log"
for r in a b; do
  R[${r}_how]=$(python3 -c "
import json, glob, sys
r = json.load(open(sorted(glob.glob('$WORK/$r/root/receipts/provision-*.json'))[-1]))
b = r['payload']['lock']['builds']['torch-ext-tiny']
print(b['how'] + ' (built on ' + str(b['built_on']) + ')')" 2>/dev/null || echo "?")
done

section "smoke both roots"
for r in a b; do
  T0=$(now); "$EB" smoke --root "$WORK/$r/root" > "$OUT/$r-smoke.log" 2>&1; R[${r}_smoke_rc]=$?
  R[${r}_smoke_s]=$(secs "$T0" "$(now)"); tail -3 "$OUT/$r-smoke.log"
  check_ext "$r"; R[${r}_ext_rc]=$?
done
SO_A=$(sha256sum "$WORK"/a/venv/lib/python3*/site-packages/torch_ext_tiny/_C*.so | cut -c1-16)
SO_B=$(sha256sum "$WORK"/b/venv/lib/python3*/site-packages/torch_ext_tiny/_C*.so | cut -c1-16)
[ "$SO_A" = "$SO_B" ] && R[same_bytes]=yes || R[same_bytes]=no

section "for scale: one root alone, no shared cache (its own compile)"
: > "$COUNTER"
T0=$(now); provision solo; R[solo_rc]=$?; R[solo_s]=$(secs "$T0" "$(now)")
R[solo_compiles]=$(wc -l < "$COUNTER")

section "summary"
{
  printf '{'
  first=1
  for k in "${!R[@]}"; do
    [ $first = 1 ] || printf ','
    first=0
    printf '"%s": "%s"' "$k" "${R[$k]}"
  done
  printf '}\n'
} > "$OUT/build-cache-gpu.json"
python3 - "$OUT/build-cache-gpu.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [
    ("root a (shared cache)", r.get("a_rc"), r.get("a_how")),
    ("root b (shared cache)", r.get("b_rc"), r.get("b_how")),
    ("a and b at once: wall", "", f"{r.get('pair_s')} s, compiles: {r.get('pair_compiles')} (want 1)"),
    ("smoke a / b", f"{r.get('a_smoke_rc')}/{r.get('b_smoke_rc')}", f"{r.get('a_smoke_s')} s / {r.get('b_smoke_s')} s"),
    ("extension kernel vs torch, a / b", f"{r.get('a_ext_rc')}/{r.get('b_ext_rc')}", f"same .so bytes: {r.get('same_bytes')}"),
    ("one root alone, no cache", r.get("solo_rc"), f"{r.get('solo_s')} s, compiles: {r.get('solo_compiles')}"),
]
for name, rc, note in rows:
    print(f"{name:<36} {str(rc):>5}  {note}")
ok = (r.get("pair_compiles") == "1" and r.get("same_bytes") == "yes"
      and all(r.get(k) == "0" for k in ("a_rc", "b_rc", "a_smoke_rc", "b_smoke_rc", "a_ext_rc", "b_ext_rc")))
print("verdict:", "one compile, both roots smoke-tested" if ok else "FAILED (see the logs in $OUT)")
sys.exit(0 if ok else 1)
PY
