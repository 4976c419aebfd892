#!/usr/bin/env bash
# A source archive of HEAD (git archive, no .git inside) configures with the version of
# CMakeLists.txt and HEAD's commit, which git wrote into cmake/source-commit:
#
#   tests/packaging/source_archive_test.sh SOURCE_DIR
set -euo pipefail
SRC="$(realpath "$1")"
TMP="$(mktemp -d /tmp/layerps-archive.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
head="$(git -C "$SRC" rev-parse HEAD)"
version="$(sed -n 's/^project(LayerPS VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")"
git -C "$SRC" archive --format=tar HEAD | tar -x -C "$TMP"
[ ! -e "$TMP/.git" ] || { echo "source_archive_test: the archive has a .git" >&2; exit 1; }
cmake -S "$TMP" -B "$TMP/build" -DLAYERPS_BUILD_TESTS=OFF -DLAYERPS_BUILD_BENCHMARKS=OFF \
  -DLAYERPS_BUILD_EXAMPLES=OFF -DLAYERPS_BUILD_CUDA=OFF -DLAYERPS_BUILD_PYTHON=OFF \
  -DLAYERPS_BUILD_TOOLS=OFF >"$TMP/configure.log" 2>&1 || { cat "$TMP/configure.log" >&2; exit 1; }
want="LayerPS $version (commit ${head:0:12})"
if ! grep -qF -- "$want" "$TMP/configure.log"; then
  echo "source_archive_test: configure did not say '$want':" >&2
  grep 'LayerPS' "$TMP/configure.log" >&2 || true
  exit 1
fi
echo "source_archive_test: $want"
