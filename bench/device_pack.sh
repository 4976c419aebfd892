#!/usr/bin/env bash
# Prepares the measurements for the device machine (16 cores, an H100 or H200; it has no
# -dev packages and reaches no registry): builds the benchmarks, the micro-benchmarks and
# the GPU tests here with CUDA, and copies them with every shared library `ldd` lists
# (glibc's excepted) into device-pack/ (git-ignored). With DEVICE_PYTHON set (an
# interpreter of the device's Python version, 3.12 there), it also builds the layerps wheel
# for that version (scripts/build-wheel.sh: the libraries inside it) into device-pack/wheel,
# for the collectives and checkpoint benchmarks. Then, from the device tool:
#   run(command="bash bench/device_run.sh", carry=["device-pack"], timeout_s=560)
# Usage: [DEVICE_PYTHON=~/.pyenv/versions/3.12.1/bin/python3] bash bench/device_pack.sh [build-dir]
#        (default build-dir: build-device)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-device}
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
command -v nvcc >/dev/null || { echo "device_pack.sh: no CUDA toolkit (nvcc) found" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPS_BUILD_CUDA=ON \
  -DLAYERPS_BUILD_TESTS=ON -DLAYERPS_BUILD_BENCHMARKS=ON -DLAYERPS_BUILD_PYTHON=OFF \
  -DLAYERPS_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
targets=(layerps-bench layerps-device-bench layerps-microbench device_test packing_cuda_test)
echo "device_pack.sh: building ${targets[*]} in $BUILD"
cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
rm -rf device-pack && mkdir -p device-pack/bin device-pack/lib
cp "$BUILD/bench/layerps-bench" "$BUILD/bench/layerps-device-bench" "$BUILD/bench/layerps-microbench" \
  device-pack/bin/
cp "$(find "$BUILD" -name device_test -type f -perm -u+x | head -1)" device-pack/bin/
cp "$(find "$BUILD" -name packing_cuda_test -type f -perm -u+x | head -1)" device-pack/bin/
# Every library the binaries load, except glibc's own (the device machine has those).
for b in device-pack/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*) continue ;;
  esac
  cp -L "$lib" device-pack/lib/
done
if [ -n "${DEVICE_PYTHON:-}" ]; then
  # A venv of that interpreter and a build tree of its own; pybind11 new enough for numpy 2.
  venv=${DEVICE_VENV:-$PWD/build-device-venv}
  [ -x "$venv/bin/python" ] || "$DEVICE_PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pybind11>=2.12,<3" numpy
  VENV="$venv" BUILD_DIR="$(realpath -m "${BUILD}-python")" bash scripts/build-wheel.sh device-pack/wheel
  # pytest and its pure-Python dependencies, for tests/python/test_gpu.py there (that
  # machine reaches no package index).
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
    -d device-pack/pywheels pytest
fi
git rev-parse --short HEAD > device-pack/COMMIT
du -sh device-pack
echo "device_pack.sh: ready (commit $(cat device-pack/COMMIT)); carry device-pack (64 MiB at most)"
