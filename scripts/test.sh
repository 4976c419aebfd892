#!/usr/bin/env bash
# The test suite: installs what is missing, builds everything (the CUDA target too when
# nvcc is present) and runs the tests in tiers (docs/testing.md):
#
#   scripts/test.sh           every tier: CTest (unit, in-process cluster, multi-process,
#                             consumer project, CUDA CPU references) in parallel, the
#                             shared library's exports, and the Python suite
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
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPS_BUILD_CUDA=AUTO \
  -DLAYERPS_BUILD_TESTS=ON -DLAYERPS_BUILD_BENCHMARKS=ON -DLAYERPS_BUILD_PYTHON=OFF "${launcher[@]}"
cmake --build build -j "$(nproc)"
tick "built"
if [ "$fast" -eq 1 ]; then
  ctest --test-dir build --output-on-failure --timeout 300 -j "$jobs" -L '^unit$'
  tick "C++ unit tier passed"
  LAYERPS_PYTEST_JOBS=1 LAYERPS_SKIP_WHEEL=1 bash scripts/test-python.sh -m unit
  echo "test.sh: the fast tier passed in $(( $(date +%s) - start )) s"
  exit 0
fi
# Every CTest test at once, `jobs` at a time: unit, cluster (the binaries of
# tests/CMakeLists.txt's LAYERPS_FOUR_STREAM_TESTS with 4 streams per peer, the rest with
# one) and multiprocess.
ctest --test-dir build --output-on-failure --timeout 900 -j "$jobs"
tick "CTest passed"
# liblayerps.so with hidden visibility: the public API exported, the internals not.
bash scripts/test-shared.sh
tick "the shared library passed"
if [ -f scripts/test-python.sh ]; then
  LAYERPS_PYTEST_JOBS="$jobs" bash scripts/test-python.sh
fi
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
