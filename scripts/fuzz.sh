#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang (-fsanitize=fuzzer,address,
# undefined; the library too) in build-fuzz/, and runs each for SECONDS (default 60),
# starting from the checked-in seed corpus (tests/fuzz/corpus/<harness>/; new inputs go
# to build-fuzz/corpus/<harness>/, the repository's corpus is not changed). A crash, a
# sanitizer report or a leak fails the script; the input is kept in build-fuzz/artifacts/.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]     e.g. scripts/fuzz.sh 600 request_fuzz
# Environment: FUZZ_JOBS (harnesses run at once, default 1), FUZZ_RUNS (executions per
# harness instead of a time limit, for long runs: -runs=N).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
seconds=${1:-60}
shift || true
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  harnesses=(header_fuzz map_codec_fuzz control_fuzz request_fuzz reply_fuzz shm_manifest_fuzz)
fi

bash scripts/install-deps.sh core
if ! command -v clang++ >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "fuzz.sh: installing clang"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends clang
fi
# libFuzzer's runtime comes with Debian's clang (libclang-rt-*-dev); check before building.
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer - -o /tmp/layerps-fuzz-probe.$$ 2>/dev/null; then
  echo "fuzz.sh: clang++ cannot link -fsanitize=fuzzer (install libclang-rt-dev)" >&2
  exit 1
fi
rm -f /tmp/layerps-fuzz-probe.$$

flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
flags="$flags -fno-omit-frame-pointer -g -O1"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DLAYERPS_BUILD_FUZZERS=ON -DLAYERPS_BUILD_TESTS=OFF \
  -DLAYERPS_BUILD_BENCHMARKS=OFF -DLAYERPS_BUILD_TOOLS=OFF -DLAYERPS_BUILD_EXAMPLES=OFF \
  -DLAYERPS_BUILD_PYTHON=OFF -DLAYERPS_BUILD_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${harnesses[@]}"
built=$(date +%s)
echo "fuzz.sh: built ${#harnesses[@]} harnesses in $((built - start)) s"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p build-fuzz/artifacts build-fuzz/logs
limit=(-max_total_time="$seconds")
if [ -n "${FUZZ_RUNS:-}" ]; then limit=(-runs="$FUZZ_RUNS"); fi
run_one() {
  local h=$1
  mkdir -p "build-fuzz/corpus/$h"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: 2 GiB is a leak or a bomb.
  if "build-fuzz/tests/fuzz/$h" "build-fuzz/corpus/$h" "tests/fuzz/corpus/$h" "${limit[@]}" \
      -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/artifacts/$h-" >"build-fuzz/logs/$h.log" 2>&1; then
    echo "fuzz.sh: $h: $(grep -E '^(stat::number_of_executed_units|#[0-9]+.*DONE)' \
      "build-fuzz/logs/$h.log" | tail -2 | tr '\n' ' ')"
    return 0
  fi
  echo "fuzz.sh: $h FAILED; the end of its log (build-fuzz/logs/$h.log):" >&2
  tail -60 "build-fuzz/logs/$h.log" >&2
  return 1
}
failed=()
jobs=${FUZZ_JOBS:-1}
pids=() names=()
for h in "${harnesses[@]}"; do
  run_one "$h" &
  pids+=($!) names+=("$h")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed+=("${names[0]}")
    pids=("${pids[@]:1}") names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed+=("${names[$i]}"); done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in build-fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz.sh: every harness ran ${seconds} s without a finding; total $(($(date +%s) - start)) s"
