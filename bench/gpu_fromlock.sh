#!/usr/bin/env bash
# provision --lock on the GPU machine the device tool lends (torch 2.11.0+cu130 from PyPI, Python
# 3.12, `python3` itself a venv, no network): a uv.lock whose torch is the machine's own
# (bench/stacks/fromlock-gpu, made by real `uv lock`), adopted with no download, and fla from a
# carried wheelhouse, offline; then verify, smoke twice (first and warm), the no-op re-run, and
# two planted faults: a lock with another torch (refused, exit 6) and a changed wheelhouse file
# (refused before anything is made, exit 5).
#
#   bash bench/gpu_fromlock.sh prepare   # here: .gpu/fromlock/{tool,wheelhouse} (about 25 MB)
#   run(command="bash bench/gpu_fromlock.sh", carry=[".gpu/fromlock"])   # there
#
# It prints a table and writes $OUT/fromlock-gpu.json (default .gpu/fromlock-out).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
REPO="$(cd "$(dirname "$0")/.." && pwd)"
CARRY="$REPO/.gpu/fromlock"
LOCKDIR="$REPO/bench/stacks/fromlock-gpu"

if [ "${1:-}" = "prepare" ]; then
  set -e
  PY="$REPO/.venv/bin/python"
  PLATFORM=(--only-binary=:all: --implementation cp --python-version 3.12
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  rm -rf "$CARRY" && mkdir -p "$CARRY/tool"
  "$PY" -m build -q --wheel --outdir "$CARRY/tool" "$REPO" >/dev/null
  "$PY" -m pip download -q "${PLATFORM[@]}" -d "$CARRY/tool" "$CARRY"/tool/envbuild-*.whl
  # only what the image lacks: --have is the image's own `pip list --format json`
  "$REPO/.venv/bin/envbuild" wheelhouse mirror --lock "$LOCKDIR/uv.lock" --python "${PY312:-$(ls -d ~/.pyenv/versions/3.12*/bin/python3.12 | tail -1)}" \
      --environment linux-x86_64 --have "$LOCKDIR/image-pip-list.json" --out "$CARRY/wheelhouse"
  du -sh "$CARRY"/*
  exit 0
fi

export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CONSTRAINT
PY="${PYTHON:-python3}"
OUT="${OUT:-$REPO/.gpu/fromlock-out}"
WORK="${WORK:-/tmp/envbuild-fromlock}"
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"
ROOT="$WORK/root"
ENV_PREFIX=$("$PY" -c 'import sys; print(sys.prefix)')
section() { printf '\n===== %s =====\n' "$*"; }
now() { date +%s.%N; }
secs() { python3 -c "print(round($2 - $1, 2))"; }
record() { sha256sum "$ENV_PREFIX"/lib/python3*/site-packages/torch-*.dist-info/RECORD | cut -d' ' -f1; }
declare -A R

section "host"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
BEFORE=$(record)

section "install envbuild (offline, from the carried wheels)"
"$PY" -m venv "$WORK/tool" && "$WORK/tool/bin/python" -m pip install -q --no-index --find-links "$CARRY/tool" envbuild
EB="$WORK/tool/bin/envbuild"
"$EB" --version || exit 1
T0=$(now); "$EB" --version >/dev/null; R[version_s]=$(secs "$T0" "$(now)")

section "preflight --lock"
# no network here: the file hosts are not probed (the wheelhouse is checked by sha256 instead)
"$EB" preflight --lock "$LOCKDIR/uv.lock" --root "$ROOT" --skip index; R[preflight_rc]=$?

section "plan --lock --venv (adopting the image's torch)"
"$EB" plan --lock "$LOCKDIR/uv.lock" --venv "$ENV_PREFIX" --offline --wheelhouse "$CARRY/wheelhouse" --json > "$OUT/plan.json"
R[plan_rc]=$?
python3 - "$OUT/plan.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for s in doc.get("stages", []):
    print(f"stage {s['name']}: " + ", ".join(f"{p['name']}=={p['version']}" for p in s["packages"]))
print(f"left out: {len(doc.get('left_out', []))} (" + ", ".join(x["name"] for x in doc.get("left_out", [])[:6]) + ", ...)")
PY

section "planted: a lock whose torch is not the image's (expect exit 6, nothing changed)"
"$EB" provision --lock "$LOCKDIR/wrong-torch/uv.lock" --venv "$ENV_PREFIX" --root "$WORK/wrong" \
    --offline --wheelhouse "$CARRY/wheelhouse"; R[wrong_torch_rc]=$?
[ -e "$WORK/wrong" ] && R[wrong_torch_made]=yes || R[wrong_torch_made]=no

section "planted: a wheelhouse file changed after the mirror (expect exit 5, nothing made)"
cp -r "$CARRY/wheelhouse" "$WORK/bad-wh"
FLA=$(ls "$WORK"/bad-wh/fla_core-*.whl) && printf 'x' >> "$FLA"
"$EB" provision --lock "$LOCKDIR/uv.lock" --venv "$ENV_PREFIX" --root "$WORK/bad" \
    --offline --wheelhouse "$WORK/bad-wh"; R[bad_wheel_rc]=$?
[ -e "$WORK/bad" ] && R[bad_wheel_made]=yes || R[bad_wheel_made]=no
[ "$(record)" = "$BEFORE" ] && R[torch_untouched_by_faults]=yes || R[torch_untouched_by_faults]=no

section "provision --lock --venv <the image's environment> --offline"
T0=$(now)
"$EB" provision --lock "$LOCKDIR/uv.lock" --venv "$ENV_PREFIX" --root "$ROOT" --home "$WORK/home" \
    --offline --wheelhouse "$CARRY/wheelhouse"; R[provision_rc]=$?
R[provision_s]=$(secs "$T0" "$(now)")
[ "$(record)" = "$BEFORE" ] && R[torch_record_same]=yes || R[torch_record_same]=no

section "verify"
"$EB" verify --root "$ROOT"; R[verify_rc]=$?

section "smoke (first after provision)"
T0=$(now); "$EB" smoke --root "$ROOT"; R[smoke1_rc]=$?; R[smoke1_s]=$(secs "$T0" "$(now)")
section "smoke (warm)"
T0=$(now); "$EB" smoke --root "$ROOT"; R[smoke2_rc]=$?; R[smoke2_s]=$(secs "$T0" "$(now)")
du -sh "$ROOT"/cache/* 2>/dev/null

section "provision again (a finished environment: no-op)"
T0=$(now)
"$EB" provision --lock "$LOCKDIR/uv.lock" --venv "$ENV_PREFIX" --root "$ROOT" --home "$WORK/home" \
    --offline --wheelhouse "$CARRY/wheelhouse"; R[noop_rc]=$?
R[noop_s]=$(secs "$T0" "$(now)")

"$EB" receipt list --root "$ROOT" || true
cp "$ROOT"/receipts/*.json "$OUT/" 2>/dev/null || true
"$PY" -c 'import fla, torch; print("import fla", fla.__version__, "torch", torch.__version__)'

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
} > "$OUT/fromlock-gpu.json"
python3 - "$OUT/fromlock-gpu.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [("preflight --lock", r.get("preflight_rc"), ""),
        ("planted: other torch in the lock (want 6)", r.get("wrong_torch_rc"), f"made: {r.get('wrong_torch_made')}"),
        ("planted: changed wheelhouse file (want 5)", r.get("bad_wheel_rc"), f"made: {r.get('bad_wheel_made')}"),
        ("provision --lock, adopted torch, offline", r.get("provision_rc"), f"{r.get('provision_s')} s"),
        ("torch RECORD unchanged", r.get("torch_record_same"), ""),
        ("verify", r.get("verify_rc"), ""),
        ("smoke, first after provision", r.get("smoke1_rc"), f"{r.get('smoke1_s')} s"),
        ("smoke, warm", r.get("smoke2_rc"), f"{r.get('smoke2_s')} s"),
        ("provision again (no-op)", r.get("noop_rc"), f"{r.get('noop_s')} s (envbuild --version {r.get('version_s')} s)")]
for name, rc, note in rows:
    print(f"{name:<45} {str(rc):>5}  {note}")
PY
