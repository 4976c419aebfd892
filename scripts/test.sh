#!/usr/bin/env bash
# The test suite: installs what is missing, builds everything (the CUDA target too when
# nvcc is present) and runs the tests in tiers (docs/testing.md):
#
#   scripts/test.sh           every tier: CTest (unit, in-process cluster, multi-process,
#                             consumer project, CUDA CPU references) and the shared
#                             library's exports, beside the Python suite
#   scripts/test.sh --fast    the unit tier only (C++ `ctest -L unit`, Python `-m unit`):
#                             under 2 minutes once built, for a developer's loop
#   scripts/test.sh --help
#
# LAYERPS_TEST_JOBS: how many CTest tests and Python test processes run at once (default:
# the number of cores). Tests assert values, bytes and errors, never timings, so they hold
# on a busy machine; the cluster tests' heartbeat timeouts leave room for that.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
case "${1:-}" in
  "") ;;
  --fast) fast=1 ;;
  -h | --help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  *) echo "usage: $0 [--fast]" >&2; exit 2 ;;
esac
start=$(date +%s)
jobs=${LAYERPS_TEST_JOBS:-$(nproc)}
tick() { echo "test.sh: $1 ($(( $(date +%s) - start )) s so far)"; }
bash scripts/install-deps.sh all
# The CUDA kernels are compiled whenever the toolkit is installed, even off PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if command -v nvcc >/dev/null; then
  echo "test.sh: building the CUDA kernels with $(command -v nvcc)"
else
  echo "test.sh: no CUDA toolkit found: building without src/cuda"
fi
# ccache (installed by install-deps.sh) keeps compiled objects between runs and between
# clones of the repository: paths are hashed relative to the checkout. The Python build
# (scikit-build-core's CMake, scripts/test-python.sh) takes the launcher from the environment.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CMAKE_CXX_COMPILER_LAUNCHER=ccache
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
configure() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPS_BUILD_CUDA=AUTO \
    -DLAYERPS_BUILD_TESTS=ON -DLAYERPS_BUILD_BENCHMARKS=ON -DLAYERPS_BUILD_PYTHON=OFF "${launcher[@]}"
}
if [ "$fast" -eq 1 ]; then
  configure
  cmake --build build -j "$(nproc)"
  tick "built"
  ctest --test-dir build --output-on-failure --timeout 300 -j "$jobs" -L '^unit$'
  tick "C++ unit tier passed"
  LAYERPS_PYTEST_JOBS=1 LAYERPS_SKIP_WHEEL=1 bash scripts/test-python.sh -m unit
  echo "test.sh: the fast tier passed in $(( $(date +%s) - start )) s"
  exit 0
fi
# The C++ tier and the Python tier at once, each from its build on. In the background:
# the C++ build, CTest (unit, cluster: the binaries of tests/CMakeLists.txt's
# LAYERPS_FOUR_STREAM_TESTS with 4 streams per peer, the rest with one; multiprocess),
# `jobs` tests at a time, and the shared library's check. In the foreground: the Python
# package's build, the wheel, and the Python suite, `jobs` processes. The two builds
# compile the same objects (ccache serves the second), and the tests wait on sockets and
# timers far more than they compute; no verdict depends on how fast a test runs
# (docs/testing.md), so sharing the cores costs neither a verdict.
cxx_log=$(mktemp /tmp/layerps-ctest.XXXXXX)
(
  set -e
  configure
  cmake --build build -j "$(nproc)"
  echo "test.sh: the C++ tier built ($(( $(date +%s) - start )) s so far)"
  ctest --test-dir build --output-on-failure --timeout 900 -j "$jobs"
  echo "test.sh: CTest passed ($(( $(date +%s) - start )) s so far)"
  # liblayerps.so with hidden visibility: the public API exported, the internals not.
  bash scripts/test-shared.sh
  echo "test.sh: the shared library passed ($(( $(date +%s) - start )) s so far)"
) >"$cxx_log" 2>&1 &
cxx_pid=$!
py_rc=0
if [ -f scripts/test-python.sh ]; then
  LAYERPS_PYTEST_JOBS="$jobs" bash scripts/test-python.sh || py_rc=$?
  tick "the Python tier ended ($py_rc)"
fi
cxx_rc=0
wait "$cxx_pid" || cxx_rc=$?
echo "test.sh: the C++ tier's output (build, CTest, then the shared library):"
cat "$cxx_log"
rm -f "$cxx_log"
if [ "$cxx_rc" -ne 0 ] || [ "$py_rc" -ne 0 ]; then
  echo "test.sh: FAILED (C++ tier: exit $cxx_rc, Python tier: exit $py_rc)" >&2
  exit 1
fi
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
