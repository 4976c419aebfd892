#!/usr/bin/env bash
# Builds the LayerPS image (the Dockerfile at the repository's root) with podman, FROM the
# debootstrapped base (deploy/make-base-image.sh, run first when the base is missing).
#
#   deploy/build-image.sh [IMAGE] [--worktree]    default IMAGE: layerps:latest
#
# The build context is the commit checked out (`git archive HEAD`), so that the image is a
# commit's whatever else is being edited in the tree; --worktree builds the working tree as
# it is (.dockerignore applies). Mounted into the build stage: a ccache directory
# (CCACHE_DIR, default /var/tmp/layerps-image-ccache: a rebuild after a small change takes
# minutes, not the whole compile) and this machine's CA bundle (PyPI through a
# TLS-intercepting egress). JOBS=N limits the compile to N jobs (default: every core).
# Prints the build's time and the images' sizes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="layerps:latest"
WORKTREE=0
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --worktree) WORKTREE=1 ;;
    *) IMAGE="$a" ;;
  esac
done
BASE="${BASE:-layerps-base:bookworm}"
if ! command -v podman >/dev/null; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman
fi
podman image exists "$BASE" || bash "$ROOT/deploy/make-base-image.sh" "$BASE"
read -r -a FLAGS <<<"$(bash "$ROOT/deploy/podman-flags.sh" "$BASE")"

CONTEXT="$(mktemp -d /var/tmp/layerps-context.XXXXXX)"
trap 'rm -rf "$CONTEXT"' EXIT
if [ "$WORKTREE" = 1 ]; then
  CONTEXT_DIR="$ROOT"
  echo "== context: the working tree $ROOT"
else
  git -C "$ROOT" archive --format=tar HEAD | tar -x -C "$CONTEXT"
  CONTEXT_DIR="$CONTEXT"
  echo "== context: $(git -C "$ROOT" log -1 --format='%h %s' | cut -c1-100)"
fi
CCACHE="${CCACHE_DIR:-/var/tmp/layerps-image-ccache}"
mkdir -p "$CCACHE"
VOLUMES=(-v "$CCACHE:/root/.cache/ccache")
CA=/etc/ssl/certs/ca-certificates.crt
[ -r "$CA" ] && VOLUMES+=(-v "$CA:/run/host-ca/ca-certificates.crt:ro")

start=$(date +%s)
podman build "${FLAGS[@]}" "${VOLUMES[@]}" --build-arg BASE="$BASE" --build-arg JOBS="${JOBS:-}" \
  --layers -t "$IMAGE" -f "$ROOT/Dockerfile" "$CONTEXT_DIR"
secs=$(( $(date +%s) - start ))
size() { podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1/1e6}'; }
echo "build-image: $IMAGE in ${secs} s: $(size "$IMAGE") (base $BASE: $(size "$BASE"))"
