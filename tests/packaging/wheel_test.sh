#!/usr/bin/env bash
# The self-contained wheel, tested as a user elsewhere would meet it:
#
#   tests/packaging/wheel_test.sh WHEEL
#
# 1. `auditwheel show` accepts it under a manylinux tag, and every shared library that
#    the module, the daemons and the tools resolve (ldd) is bundled in layerps.libs/ or
#    is part of the base system every manylinux platform has (glibc, libstdc++, libgcc_s,
#    zlib);
# 2. installed into a fresh venv (pip --no-index, no source tree on the path), it runs a
#    local cluster and a launched one (tests/packaging/check_wheel.py) with the system
#    copies of every library it bundles hidden from the loader: /dev/null is bind-mounted
#    over each in a private mount namespace (unshare, as root), so that loading one there
#    fails, which the test checks first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WHEEL="$(realpath "$1")"
VENV="${VENV:-$ROOT/.venv}"
PY=/usr/bin/python3
TMP="$(mktemp -d /tmp/layerps-wheeltest.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT

echo "== auditwheel show $(basename "$WHEEL")"
PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" show "$WHEEL" >"$TMP/show.txt"
sed -n '1,3p' "$TMP/show.txt"
grep -q 'consistent with.*' "$TMP/show.txt"
tag="$(tr '\n' ' ' <"$TMP/show.txt" | sed -n 's/.*platform tag: "\([^"]*\)".*/\1/p')"
case "$tag" in
  manylinux_*) ;;
  *) echo "wheel_test: auditwheel gives platform tag '$tag', not a manylinux one" >&2; exit 1 ;;
esac
case "$(basename "$WHEEL")" in
  *"$tag"*) ;;
  *) echo "wheel_test: the wheel's name does not carry its tag $tag" >&2; exit 1 ;;
esac

echo "== installing into a fresh venv"
"$PY" -m venv --system-site-packages "$TMP/venv"   # sees Debian's numpy, nothing of LayerPS
"$TMP/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index "$WHEEL"
PKG="$(cd "$TMP" && "$TMP/venv/bin/python" -c 'import os, layerps; print(os.path.dirname(os.path.realpath(layerps.__file__)))')"
LIBS="$(realpath "$(dirname "$PKG")/layerps.libs")"
[ -d "$LIBS" ] || { echo "wheel_test: no layerps.libs beside $PKG" >&2; exit 1; }
echo "   $(ls "$LIBS" | wc -l) bundled libraries, $(du -sh "$LIBS" | cut -f1) in $LIBS"

echo "== ldd: nothing outside the wheel but the base system"
base='^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libz\.so\.1)$'
bad=0
for elf in "$PKG"/_core*.so "$PKG"/bin/*; do
  while read -r name _ path _; do
    [ -n "$name" ] || continue
    if [[ "$name" =~ $base ]]; then
      :
    elif [ "$path" = "not" ]; then
      echo "   $(basename "$elf"): $name not found" >&2; bad=1
    elif [ -n "$path" ] && [[ "$(realpath -m "$path")" == "$LIBS"/* ]]; then
      :
    else
      echo "   $(basename "$elf"): $name resolves outside the wheel: $path" >&2; bad=1
    fi
  done < <(ldd "$elf" | sed 's/^\s*//')
done
[ "$bad" -eq 0 ] || exit 1
echo "   every dependency is in layerps.libs or the base system"

echo "== running with the system copies of the bundled libraries hidden"
hide=()
for f in "$LIBS"/*.so*; do
  # auditwheel's copy libzmq-98f0defc.so.5.2.4 is the system's libzmq.so.5.2.4.
  orig="$(basename "$f" | sed -E 's/-[0-9a-f]{8}\././')"
  for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu; do
    if [ -f "$d/$orig" ]; then hide+=("$(realpath "$d/$orig")"); break; fi
  done
done
mapfile -t hide < <(printf '%s\n' "${hide[@]}" | sort -u)
for must in libzmq libprotobuf libtbb libglog librocksdb libprometheus-cpp-core libmicrohttpd; do
  printf '%s\n' "${hide[@]}" | grep -q "/$must\." || {
    echo "wheel_test: the system has no $must to hide (is it bundled under another name?)" >&2
    echo "  bundled: $(cd "$LIBS" && ls | tr '\n' ' ')" >&2
    echo "  found to hide: ${hide[*]}" >&2
    exit 1
  }
done
echo "   hiding ${#hide[@]} system libraries (${hide[*]##*/})"
if ! unshare --mount --propagation private true 2>/dev/null; then
  echo "wheel_test: cannot make a mount namespace here (needs root): the hidden run is skipped" >&2
  echo "wheel_test: OK without the hidden run"
  exit 0
fi
cat >"$TMP/hidden.sh" <<'SH'
set -euo pipefail
for f in "$@"; do mount --bind /dev/null "$f"; done
# The hiding works: the system's ZeroMQ cannot be loaded any more.
if "$VENV_PY" -c 'import ctypes; ctypes.CDLL("libzmq.so.5")' 2>/dev/null; then
  echo "wheel_test: libzmq.so.5 still loads from the system: nothing is hidden" >&2
  exit 1
fi
cd "$TMPDIR_RUN"
exec "$VENV_PY" "$CHECK"
SH
VENV_PY="$TMP/venv/bin/python" TMPDIR_RUN="$TMP" CHECK="$ROOT/tests/packaging/check_wheel.py" \
  LAYERPS_ROOT="$ROOT" \
  EXPECTED_VERSION="$(sed -n 's/^project(LayerPS VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")" \
  unshare --mount --propagation private bash "$TMP/hidden.sh" "${hide[@]}"
echo "wheel_test: OK"
