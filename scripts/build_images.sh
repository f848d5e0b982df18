#!/usr/bin/env bash
# Build (and push) distrain's images from images/*.Dockerfile, tagged with the package version.
#
#   scripts/build_images.sh [--local] [--registry REGISTRY] [--push] [--dry-run] [KIND...]
#
# KIND: beam, trainer, trainer-gpu (default: all three). The registry prefix defaults to
# $DISTRAIN_IMAGE_REGISTRY, else "distrain"; image names come from distrain/base/images.py, the
# same place compiled pipelines take them from, so compile with the same
# DISTRAIN_IMAGE_REGISTRY to run what was pushed. --dry-run prints the commands only.
#
# --local: build here without Docker or a registry. The base is a Debian 12 root file system
# made from Debian's archive by mmdebstrap (python3 3.11 from Debian), imported into buildah's
# storage as localhost/distrain-base:bookworm (made once; DISTRAIN_REFRESH_BASE=1 remakes it),
# and each Dockerfile is built by `buildah bud --isolation chroot` with BASE set to it. The
# machine's Horovod wheel cache (~/.cache/distrain) is mounted at /cache, so a rebuild reuses
# the wheels built before. scripts/test_images.sh then runs each image's smoke tests.
# Without --local: docker build where Docker runs, else buildah, on the Dockerfiles' default
# (pinned) base.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
push=0
dry=0
local_build=0
kinds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --local) local_build=1; shift ;;
    --registry) export DISTRAIN_IMAGE_REGISTRY="$2"; shift 2 ;;
    --push) push=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    beam|trainer|trainer-gpu) kinds+=("$1"); shift ;;
    *) echo "build_images: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(beam trainer trainer-gpu)
py="$root/.venv/bin/python"
[ -x "$py" ] || py=python3

run() {
  echo "+ $*"
  [ "$dry" = 1 ] || "$@"
}

LOCAL_BASE="localhost/distrain-base:bookworm"
DEBIAN_MIRROR="${DISTRAIN_DEBIAN_MIRROR:-http://deb.debian.org}"

local_base() {
  if [ "${DISTRAIN_REFRESH_BASE:-0}" != 1 ] && buildah inspect --type image "$LOCAL_BASE" >/dev/null 2>&1; then
    echo "build_images: base $LOCAL_BASE is there (DISTRAIN_REFRESH_BASE=1 remakes it)"
    return
  fi
  local work ctr
  work="$(mktemp -d)"
  # The point release and its security updates: the Dockerfiles pin Debian packages at
  # their current bookworm versions.
  run mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$work/base.tar" \
    "deb $DEBIAN_MIRROR/debian bookworm main" \
    "deb $DEBIAN_MIRROR/debian bookworm-updates main" \
    "deb $DEBIAN_MIRROR/debian-security bookworm-security main"
  if [ "$dry" = 1 ]; then return; fi
  ctr="$(buildah from scratch)"
  buildah add "$ctr" "$work/base.tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/bash "$ctr"
  buildah commit -q --rm "$ctr" "$LOCAL_BASE" >/dev/null
  rm -rf "$work"
  echo "build_images: made $LOCAL_BASE from Debian's archive"
}

if [ "$local_build" = 1 ]; then
  for tool in buildah mmdebstrap; do
    command -v "$tool" >/dev/null || {
      echo "build_images: --local needs $tool (apt-get install buildah mmdebstrap)" >&2
      exit 2
    }
  done
  local_base
  # A cold build of the three images writes about 20 GB (the GPU build stage alone is 8.6 GB,
  # and committing its venv stages another copy under /var/tmp); a disk that runs out fails
  # it ten minutes in with "no space left on device". Say so before starting instead.
  need_gb="${DISTRAIN_BUILD_MIN_FREE_GB:-20}"
  store="$(buildah info --format '{{index .store "GraphRoot"}}' 2>/dev/null || echo /var/lib/containers)"
  for dir in "$store" "${TMPDIR:-/var/tmp}"; do
    [ -d "$dir" ] || continue
    free_gb=$(( $(df -Pk "$dir" | awk 'NR==2 {print $4}') / 1048576 ))
    if [ "$free_gb" -lt "$need_gb" ]; then
      echo "build_images: $dir has $free_gb GB free; a cold build of the images needs about $need_gb GB" >&2
      echo "  (untagged images of earlier builds: buildah images --filter dangling=true;" \
        "DISTRAIN_BUILD_MIN_FREE_GB lowers the bar when the layer cache is warm)" >&2
      [ "$dry" = 1 ] || exit 2
    fi
  done
fi

cache="${DISTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distrain}"
mkdir -p "$cache"
# This machine's way to PyPI, lent to the build's RUN steps only (nothing of it stays in an
# image): where pip is told to trust a CA of the machine's own (an intercepting proxy), the
# build's pip trusts the same bundle.
build_mounts=(--volume "$cache:/cache")
host_ca="$(python3 -m pip config get global.cert 2>/dev/null || true)"
host_ca="${PIP_CERT:-$host_ca}"
if [ -n "$host_ca" ] && [ -f "$host_ca" ]; then
  netcfg="$(mktemp -d)"
  cp "$host_ca" "$netcfg/ca.crt"
  printf '[global]\ncert = /etc/distrain-build/ca.crt\n' > "$netcfg/pip.conf"
  build_mounts+=(--volume "$netcfg:/etc/distrain-build:ro" --volume "$netcfg/pip.conf:/etc/pip.conf:ro")
fi
# Each step's image this invocation made or took from the cache ("--> ID" in buildah's
# output): the layer cache that the next build can use (see prune_stale_layers).
steps_log="$(mktemp)"
trap 'rm -f "$steps_log"; [ -z "${netcfg:-}" ] || rm -rf "$netcfg"' EXIT
for kind in "${kinds[@]}"; do
  ref="$(PYTHONPATH="$root" "$py" -c "from distrain.base.images import image; print(image('$kind'))")"
  start=$SECONDS
  if [ "$local_build" = 1 ]; then
    run buildah bud --isolation chroot --layers --force-rm --build-arg "BASE=$LOCAL_BASE" \
      "${build_mounts[@]}" -f "images/${kind}.Dockerfile" -t "$ref" . | tee -a "$steps_log"
  elif command -v docker >/dev/null; then
    run docker build -f "images/${kind}.Dockerfile" -t "$ref" .
  else
    run buildah bud --isolation chroot --layers -f "images/${kind}.Dockerfile" -t "$ref" .
  fi
  echo "build_images: $ref built in $((SECONDS - start)) s"
  if [ "$push" = 1 ]; then
    if command -v docker >/dev/null && [ "$local_build" = 0 ]; then run docker push "$ref"; else run buildah push "$ref"; fi
  fi
done

# buildah keeps every step's image for --layers; a rebuild with new contents leaves the old
# ones untagged (several GB each: the build stages hold Horovod's toolchain), and a disk
# filled by them fails later builds half-way. Once every image was built here, the untagged
# images that this build neither made nor took from the cache go.
prune_stale_layers() {
  local used id gone=0
  used="$(grep -oE '^--> (Using cache )?[0-9a-f]{11,}' "$steps_log" | grep -oE '[0-9a-f]{11,}$' | cut -c1-11 | sort -u || true)"
  if [ -z "$used" ]; then
    echo "build_images: the build's log names no step image; nothing pruned"
    return
  fi
  for id in $(buildah images --filter dangling=true --format '{{.ID}}' | cut -c1-11 | sort -u); do
    if ! grep -qx "$id" <<<"$used"; then
      buildah rmi "$id" >/dev/null 2>&1 && gone=$((gone + 1)) || true
    fi
  done
  echo "build_images: removed $gone untagged image(s) of earlier builds (kept this build's layer cache)"
}
if [ "$local_build" = 1 ] && [ "$dry" = 0 ] && [ ${#kinds[@]} -eq 3 ]; then
  prune_stale_layers
fi
