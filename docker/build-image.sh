#!/usr/bin/env bash
# docker/build-image.sh [PROFILE|STACK.toml] [TAG]: build envbuild's image for a profile (default: cpu) with
# buildah, daemonless, on a machine with no Docker daemon and no registry (what `make image` runs).
#
#   1. buildah and mmdebstrap from the distribution's apt, if missing;
#   2. a local base image made with mmdebstrap (Debian bookworm: python3, ca-certificates and the
#      host's extra CAs, so pip and uv trust a TLS-intercepting egress proxy), nothing pulled;
#   3. `envbuild docker --profile PROFILE --base BASE_TAG -o $WORK/context-NAME/Dockerfile`: a build
#      context of its own (the Dockerfile, spec slices, lock files and a copy of envbuild's source);
#   4. `buildah bud --layers` (one cacheable layer per instruction, as Docker's classic builder):
#      the host's pip/uv configuration goes in as build secrets (`--secret id=pip.conf`, read by
#      the Dockerfile's `RUN --mount=type=secret`: in no layer), the local folders it names
#      (find-links, file:// indexes) as read-only volumes.
# Prints the wall time of each stage and the image size; writes them to build/image/PROFILE/build.json.
#
# Environment: BASE_TAG (localhost/envbuild-base:bookworm), REBUILD_BASE=1, DRIVER (overlay; vfs
# where the kernel refuses overlay mounts), STORE (/var/lib/envbuild-image), RUNROOT,
# ENVBUILD (the envbuild command, default .venv/bin/envbuild), OUT (build/image/NAME), EXTRA_BUD_ARGS,
# BASE_ONLY=1 (stop after the engine and the base image).
# Needs root (mount, chroot).
set -euo pipefail

PROFILE=${1:-cpu}
if [[ $PROFILE == *.toml ]]; then  # a stack file (its lock beside it)
  STACK_ARGS=(--stack "$(realpath "$PROFILE")"); NAME=$(basename "$(dirname "$(realpath "$PROFILE")")")
else
  STACK_ARGS=(--profile "$PROFILE"); NAME=$PROFILE
fi
TAG=${2:-localhost/envbuild/$NAME:latest}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BASE_TAG=${BASE_TAG:-localhost/envbuild-base:bookworm}
DRIVER=${DRIVER:-overlay}
STORE=${STORE:-/var/lib/envbuild-image}
RUNROOT=${RUNROOT:-/run/envbuild-image}
ENVBUILD=${ENVBUILD:-$REPO/.venv/bin/envbuild}
WORK=${WORK:-/var/tmp/envbuild-image}
OUT=${OUT:-$REPO/build/image/$NAME}  # build.json
CONTEXT=$WORK/context-$NAME  # the build context: Dockerfile, spec slices, lock files, a copy of envbuild

[[ $(id -u) == 0 ]] || { echo "build-image.sh: needs root (buildah mounts and chroots); run it with sudo" >&2; exit 3; }
mkdir -p "$OUT" "$WORK"
export BUILDAH_ISOLATION=chroot  # no OCI runtime (runc/crun) and no cgroup setup needed
B=(buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver "$DRIVER")
declare -A SECONDS_OF=()
stage() {  # stage NAME CMD...
  local name=$1 t0=$SECONDS; shift
  echo "=== $name"
  "$@"
  SECONDS_OF[$name]=$((SECONDS - t0))
  echo "=== $name: ${SECONDS_OF[$name]} s"
}

engine() {
  local missing=()
  for tool in buildah mmdebstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  if ((${#missing[@]})); then
    apt-get update -q
    # chroot isolation needs neither runc/crun nor slirp4netns/fuse-overlayfs
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  buildah --version
}

base() {
  if [[ ${REBUILD_BASE:-0} != 1 ]] && "${B[@]}" inspect --type image "$BASE_TAG" >/dev/null 2>&1; then
    echo "$BASE_TAG is in $STORE (REBUILD_BASE=1 makes it again)"; return
  fi
  local hooks=() crts=(/usr/local/share/ca-certificates/*.crt)
  if [[ -e ${crts[0]} ]]; then
    hooks=('--customize-hook=mkdir -p "$1/usr/local/share/ca-certificates"'
           "--customize-hook=copy-in ${crts[*]} /usr/local/share/ca-certificates/"
           '--customize-hook=chroot "$1" update-ca-certificates')
  fi
  mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates "${hooks[@]}" \
    bookworm "$WORK/base.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
  local ctr; ctr=$("${B[@]}" from scratch)
  "${B[@]}" add "$ctr" "$WORK/base.tar" / >/dev/null
  "${B[@]}" config --os linux --arch amd64 --cmd /bin/bash \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  "${B[@]}" commit -q --rm "$ctr" "$BASE_TAG" >/dev/null
  rm -f "$WORK/base.tar"
}

declare -a SOURCES=()
sources() {  # the host's pip configuration as one pip.conf (a secret) and the local folders it reads
  "$REPO/.venv/bin/python" - "$WORK/pip.conf" > "$WORK/mounts" <<'EOF'
import os, re, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
vals = {}
for line in out.splitlines():  # files first, then PIP_* variables (":env:"), as pip merges them
    m = re.match(r"^[^.]*\.([a-z0-9-]+)='(.*)'$", line.strip())
    if m:
        vals[m.group(1)] = m.group(2)
mounts = set()
with open(sys.argv[1], "w") as f:
    f.write("[global]\n")
    for key in ("index-url", "extra-index-url", "find-links", "trusted-host", "cert", "constraint",
                "default-timeout", "retries", "no-index"):
        if key not in vals:
            continue
        f.write(f"{key} = {vals[key]}\n")
        for tok in vals[key].split() if key != "cert" else ():  # cert: the image's own CA bundle
            p = tok[7:] if tok.startswith("file://") else tok
            if p.startswith("/") and os.path.exists(p):
                if key.endswith("index-url") and p.rstrip("/").endswith("/simple"):
                    p = os.path.dirname(p.rstrip("/"))
                mounts.add(os.path.realpath(p))
print("\n".join(sorted(mounts)))
EOF
  printf 'native-tls = true\n' > "$WORK/uv.toml"  # uv: the system CA store (with the host's CAs)
  SOURCES=(--secret "id=pip.conf,src=$WORK/pip.conf" --secret "id=uv.toml,src=$WORK/uv.toml")
  while read -r p; do [[ -n $p ]] && SOURCES+=(-v "$p:$p:ro"); done < "$WORK/mounts"
  sed 's/^/  pip.conf: /' "$WORK/pip.conf"
}

render() {
  (cd "$REPO" && "$ENVBUILD" docker "${STACK_ARGS[@]}" --base "$BASE_TAG" -o "$CONTEXT/Dockerfile")
}

build() {
  # shellcheck disable=SC2086
  "${B[@]}" bud --isolation chroot --network host --format docker --layers --force-rm \
    ${ENVBUILD_TORCH_INDEX+--build-arg "ENVBUILD_TORCH_INDEX=$ENVBUILD_TORCH_INDEX"} "${SOURCES[@]}" ${EXTRA_BUD_ARGS:-} \
    -f "$CONTEXT/Dockerfile" -t "$TAG" "$CONTEXT"
}

# buildah leaves each -v target behind as an empty folder (/opt/wheels, ...): remove the ones the
# base image lacks, in one small last layer (the cache above it stays intact).
clean_mountpoints() {
  local vols=() i t
  for ((i = 0; i < ${#SOURCES[@]}; i++)); do [[ ${SOURCES[i]} == -v ]] && vols+=("${SOURCES[i + 1]%%:*}"); done
  ((${#vols[@]})) || return 0
  local ctr; ctr=$("${B[@]}" from -q --pull=never "$TAG")
  local script="for t in ${vols[*]}; do if [ -f \"\$t\" ] && [ ! -s \"\$t\" ]; then rm -f \"\$t\"; t=\$(dirname \"\$t\"); fi; rmdir -p --ignore-fail-on-non-empty \"\$t\" 2>/dev/null; true; done"
  "${B[@]}" run --isolation chroot "$ctr" -- sh -c "$script"
  "${B[@]}" commit -q --rm --format docker "$ctr" "$TAG" >/dev/null
}

T0=$SECONDS
stage engine engine
stage base base
[[ ${BASE_ONLY:-0} == 1 ]] && exit 0  # the engine and the base image only (the image tests' FROM)
sources
stage render render
stage build build
stage cleanup clean_mountpoints
SIZE=$("${B[@]}" images --format '{{.Size}}' "$TAG" | head -1)
DIGEST=$("${B[@]}" inspect --type image --format '{{.FromImageDigest}}' "$TAG" 2>/dev/null || true)
cat > "$OUT/build.json" <<EOF
{"stack": "$PROFILE", "tag": "$TAG", "driver": "$DRIVER", "base": "$BASE_TAG",
 "seconds": {"engine": ${SECONDS_OF[engine]}, "base": ${SECONDS_OF[base]}, "render": ${SECONDS_OF[render]},
             "build": ${SECONDS_OF[build]}, "cleanup": ${SECONDS_OF[cleanup]}, "total": $((SECONDS - T0))},
 "size": "$SIZE", "digest": "$DIGEST"}
EOF
"${B[@]}" images "$TAG"
echo "=== $TAG built in $((SECONDS - T0)) s; run it: BUILDAH_ISOLATION=chroot ${B[*]} from $TAG"
