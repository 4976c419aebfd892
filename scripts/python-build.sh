# Sourced by scripts/test-python.sh and scripts/build-wheel.sh: the venv and a pip build
# of bindings/python that shows CMake's progress and reuses one build tree.
#
#   VENV      the venv (made with Debian's python3 and --system-site-packages if missing)
#   BUILD_DIR CMake's build tree for the package, kept between runs: only what changed
#             is rebuilt (pip's default build isolation would make a new tree each time)

PY=/usr/bin/python3
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV"
    "$PY" -m venv --system-site-packages "$VENV"
  fi
  # The build requirements of bindings/python/pyproject.toml, in the venv, used without
  # build isolation (see BUILD_DIR above).
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "scikit-build-core>=0.10" "pybind11>=2.10"
}

# pip_build install|wheel [PIP ARGS...]: pip's verbose output filtered to the build's
# progress lines ("[12/240] Building CXX object ...") and errors; the whole log goes to
# $BUILD_DIR/pip.log and its tail is printed when pip fails.
pip_build() {
  local what="$1"
  shift
  mkdir -p "$BUILD_DIR"
  local log="$BUILD_DIR/pip-$what.log" rc=0
  "$VENV/bin/python" -m pip "$what" -v --disable-pip-version-check --no-build-isolation \
    --config-settings=build-dir="$BUILD_DIR" "$@" >"$log" 2>&1 &
  local pid=$!
  # The progress lines as they come (the log is read while pip writes it).
  tail -n +1 -f --pid="$pid" "$log" | grep --line-buffered -E '^\s*\[[0-9]+/[0-9]+\] |error:' || true
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "pip $what failed ($rc); the end of $log:" >&2
    tail -n 60 "$log" >&2
    return "$rc"
  fi
}
