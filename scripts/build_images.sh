#!/usr/bin/env bash
# Build (and push) distrain's images, tagged with the package version.
#
#   scripts/build_images.sh [--registry REGISTRY] [--push] [--dry-run] [KIND...]
#
# KIND: beam, trainer, trainer-gpu (default: all three). The registry prefix defaults to
# $DISTRAIN_IMAGE_REGISTRY, else "distrain"; image names come from distrain/images.py, the
# same place compiled pipelines take them from, so compile with the same
# DISTRAIN_IMAGE_REGISTRY to run what was pushed. --dry-run prints the commands only.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
push=0
dry=0
kinds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --registry) export DISTRAIN_IMAGE_REGISTRY="$2"; shift 2 ;;
    --push) push=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
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

for kind in "${kinds[@]}"; do
  ref="$(PYTHONPATH="$root" "$py" -c "from distrain.images import image; print(image('$kind'))")"
  run docker build -f "images/${kind}.Dockerfile" -t "$ref" .
  if [ "$push" = 1 ]; then run docker push "$ref"; fi
done
