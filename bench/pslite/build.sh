#!/usr/bin/env bash
# Builds pslite-sparse-bench (sparse_bench.cc beside this script) against a ps-lite source:
# ps-lite's own sources, its protobuf message compiled with this machine's protoc, linked
# with Debian's libzmq and libprotobuf. Outside the project's build on purpose: ps-lite's
# headers are include/ps/ in namespace ps, as LayerPS's are.
# Usage: bash bench/pslite/build.sh PSLITE [OUT=/tmp/pslite-build]
#   PSLITE: a ps-lite checkout, or a bare git directory of one (its HEAD is taken);
#   e.g. the `fetch` tool's copy of github:dmlc/ps-lite. Prints the binary's path.
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -ge 1 ] && exit 0
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$1
out=${2:-/tmp/pslite-build}
mkdir -p "$out/src"
if [ -f "$src/include/ps/ps.h" ]; then
  cp -r "$src/include" "$src/src" "$out/src/"
  rev=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
else
  git --git-dir="$src" archive HEAD include src | tar -x -C "$out/src"
  rev=$(git --git-dir="$src" rev-parse HEAD)
fi
echo "$rev" > "$out/PSLITE_COMMIT"
command -v protoc >/dev/null || { echo "build.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
(cd "$out/src/src" && protoc --cpp_out=. meta.proto)
flags=(-O3 -std=c++17 -DNDEBUG -fPIC -pthread -I"$out/src/include" -I"$out/src/src" -w)
objs=()
for f in "$out"/src/src/*.cc "$out"/src/src/meta.pb.cc; do
  [ -f "$f" ] || continue
  o="$out/$(basename "${f%.cc}").o"
  case " ${objs[*]} " in *" $o "*) continue ;; esac
  g++ "${flags[@]}" -c "$f" -o "$o"
  objs+=("$o")
done
g++ "${flags[@]}" "$here/sparse_bench.cc" "${objs[@]}" -o "$out/pslite-sparse-bench" -lzmq -lprotobuf
echo "$out/pslite-sparse-bench"
