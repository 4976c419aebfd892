#!/usr/bin/env bash
# The main job: builds LayerPS and trains the sparse logistic-regression example on a
# local cluster (1 scheduler, 2 servers, 2 workers) through layerps-launch.
# Extra arguments go to the example (e.g. --steps=1000). A new build directory is configured
# with the benchmarks on (only the demo's targets are built): `cmake --build build --target
# layerps-bench` then builds the benchmark (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh core
# A build/ that exists keeps its options (scripts/test.sh's, with the tests, say): the demo
# only needs its four targets, which every configuration builds.
if [ -f build/CMakeCache.txt ]; then
  cmake -S . -B build >/dev/null
else
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPS_BUILD_CUDA=OFF \
    -DLAYERPS_BUILD_TESTS=OFF -DLAYERPS_BUILD_BENCHMARKS=ON -DLAYERPS_BUILD_PYTHON=OFF
fi
cmake --build build -j "$(nproc)" --target layerps-launch layerps-scheduler layerps-server sparse_logreg
exec build/tools/layerps-launch --num_servers=2 --num_workers=2 --timeout_s=600 --quiet_daemons -- \
  build/examples/sparse_logreg --min_accuracy=0.8 "$@"
