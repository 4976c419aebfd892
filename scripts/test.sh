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
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPS_BUILD_CUDA=AUTO \
  -DLAYERPS_BUILD_TESTS=ON -DLAYERPS_BUILD_BENCHMARKS=ON -DLAYERPS_BUILD_PYTHON=OFF
cmake --build build -j "$(nproc)"
# Serial on purpose: the cluster tests use real heartbeat timeouts, and on a 2-core
# machine parallel test processes starve each other's heartbeat threads.
ctest --test-dir build --output-on-failure --timeout 900
if [ -f scripts/test-python.sh ]; then
  bash scripts/test-python.sh
fi
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
