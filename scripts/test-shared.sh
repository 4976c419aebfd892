#!/usr/bin/env bash
# The shared-library build (LAYERPS_SHARED=ON, hidden visibility): builds liblayerps.so and
# the daemons in build-shared/, installs them into a fresh prefix, builds and runs the
# consumer project (tests/consumer: a cluster in one process through the public API)
# against it, and checks what the library exports: the public classes (ps::Worker,
# ps::Server, ps::Scheduler, ps::Trainer) and none of the internals (the node runtime,
# the request tracker, the store, the transport).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
dir=build-shared
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPS_SHARED=ON \
  -DLAYERPS_BUILD_TESTS=OFF -DLAYERPS_BUILD_BENCHMARKS=OFF -DLAYERPS_BUILD_EXAMPLES=OFF \
  -DLAYERPS_BUILD_PYTHON=OFF -DLAYERPS_BUILD_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
version=$(sed -n 's/^project(LayerPS VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$dir/CMakeCache.txt")
libdir=${libdir:-lib}
# (The pkg-config build of the consumer has no RPATH: the loader finds the installed
# library through LD_LIBRARY_PATH.)
LD_LIBRARY_PATH="$PWD/$dir/consumer_work/prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  cmake -DBUILD_DIR="$dir" -DSOURCE_DIR="$PWD/tests/consumer" -DWORK_DIR="$PWD/$dir/consumer_work" \
  -DVERSION="$version" -DLIBDIR="$libdir" -DWAY=pkg-config -P tests/consumer/run_consumer.cmake
so=$(ls "$dir"/liblayerps.so.* | head -n 1)
exports=$(nm -DC --defined-only "$so")
fail=0
for want in 'ps::Worker::Push' 'ps::Communicator::AllReduce' 'ps::Server::Start' 'ps::Scheduler::Join' 'ps::Trainer::Create'; do
  if ! grep -qF "$want" <<<"$exports"; then
    echo "test-shared.sh: $so does not export $want" >&2
    fail=1
  fi
done
for hidden in 'ps::NodeRuntime' 'ps::RequestTracker' 'ps::Store::' 'ps::ZmqTransport' 'ps::Collectives::'; do
  if grep -qF "$hidden" <<<"$exports"; then
    echo "test-shared.sh: $so exports internal symbols: $(grep -F "$hidden" <<<"$exports" | head -n 3)" >&2
    fail=1
  fi
done
[ "$fail" -eq 0 ]
echo "test-shared.sh: $(wc -l <<<"$exports") symbols exported by $(basename "$so"); the consumer ran against it; $(( $(date +%s) - start )) s"
