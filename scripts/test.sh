#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything (the CUDA target
# too when nvcc is present), runs every CTest test (unit, in-process cluster,
# multi-process, consumer project, CUDA CPU references) and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
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
# Serial on purpose: the cluster tests use real heartbeat timeouts, and on a 2-core
# machine parallel test processes starve each other's heartbeat threads.
ctest --test-dir build --output-on-failure --timeout 900
# The in-process cluster tests again with 4 streams per peer, the default of a 16-core
# machine (docs/configuration.md, "Streams"), which this one would not pick.
LAYERPS_TEST_STREAMS=4 ctest --test-dir build --output-on-failure --timeout 900 \
  -L '^(cluster_test|parts_test|peer_test|allreduce_test|collectives_test|replacement_test|fault_test|curve_test|wire_dtype_test)$'
# liblayerps.so with hidden visibility: the public API exported, the internals not.
bash scripts/test-shared.sh
if [ -f scripts/test-python.sh ]; then
  bash scripts/test-python.sh
fi
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
