# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: the one clang build both use
# (build-asan/: the library, the libFuzzer harnesses and the test binaries, all with ASan,
# UBSan and libFuzzer's coverage instrumentation), so that CI compiles the library once
# for the fuzzers and the ASan test run. The tests do not use the coverage counters; the
# ASan runtime provides the callbacks they need.
# Being clang, this build is also CI's check of the lock annotations: CMakeLists.txt compiles
# every library source with -Wthread-safety -Werror=thread-safety under clang
# (src/common/mutex.h).

LAYERPS_ASAN_DIR=build-asan
LAYERPS_ASAN_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
LAYERPS_ASAN_FLAGS="$LAYERPS_ASAN_FLAGS -fno-omit-frame-pointer -g -O1"

# Installs Debian's clang and its runtime libraries (libFuzzer, the sanitizers) when
# missing, and checks that a fuzzer links.
need_clang() {
  local missing=()
  for p in clang libclang-rt-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -ne 0 ]; then
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    echo "sanitizer-build: installing ${missing[*]}"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  local probe
  probe=$(mktemp /tmp/layerps-fuzz-probe.XXXXXX)
  if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
      clang++ -x c++ -fsanitize=fuzzer,address - -o "$probe" 2>/dev/null; then
    rm -f "$probe"
    echo "sanitizer-build: clang++ cannot link -fsanitize=fuzzer,address" >&2
    return 1
  fi
  rm -f "$probe"
}

# Configures build-asan (tools and examples are configured, since the test list names
# them, but only what a script asks for is built).
configure_clang_asan() {
  local launcher=()
  if command -v ccache >/dev/null; then
    # Objects shared between clones of the repository (paths hashed relative to it).
    export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S . -B "$LAYERPS_ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="$LAYERPS_ASAN_FLAGS" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DLAYERPS_BUILD_FUZZERS=ON -DLAYERPS_BUILD_TESTS=ON -DLAYERPS_BUILD_BENCHMARKS=OFF \
    -DLAYERPS_BUILD_PYTHON=OFF -DLAYERPS_BUILD_CUDA=OFF "${launcher[@]}" >/dev/null
}
