#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang (-fsanitize=fuzzer,address,
# undefined; the library too) in build-asan/ (scripts/sanitizer-build.sh: the build the
# ASan test run shares), and runs each for SECONDS (default 60), starting from the
# checked-in seed corpus (tests/fuzz/corpus/<harness>/; new inputs go to
# build-asan/fuzz/corpus/<harness>/, the repository's corpus is not changed). A crash, a
# sanitizer report, a leak or a broken invariant fails the script; the input is kept in
# build-asan/fuzz/artifacts/ (add it to the corpus as regression-* with its fix).
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]     e.g. scripts/fuzz.sh 600 request_fuzz
# Environment: FUZZ_JOBS (harnesses run at once, default: the number of CPUs),
# FUZZ_RUNS (executions per harness instead of a time limit, for long runs: -runs=N).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
seconds=${1:-60}
shift || true
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  harnesses=(header_fuzz map_codec_fuzz control_fuzz request_fuzz reply_fuzz shm_manifest_fuzz
             checkpoint_fuzz plan_json_fuzz profile_json_fuzz)
fi

bash scripts/install-deps.sh core
source scripts/sanitizer-build.sh
need_clang
configure_clang_asan
cmake --build "$LAYERPS_ASAN_DIR" -j "$(nproc)" --target "${harnesses[@]}"
built=$(date +%s)
echo "fuzz.sh: built ${#harnesses[@]} harnesses in $((built - start)) s"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
out="$LAYERPS_ASAN_DIR/fuzz"
mkdir -p "$out/artifacts" "$out/logs"
limit=(-max_total_time="$seconds")
if [ -n "${FUZZ_RUNS:-}" ]; then limit=(-runs="$FUZZ_RUNS"); fi
run_one() {
  local h=$1
  mkdir -p "$out/corpus/$h"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: 2 GiB is a leak or a bomb.
  if "$LAYERPS_ASAN_DIR/tests/fuzz/$h" "$out/corpus/$h" "tests/fuzz/corpus/$h" "${limit[@]}" \
      -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$h-" >"$out/logs/$h.log" 2>&1; then
    echo "fuzz.sh: $h: $(grep -E '^(stat::number_of_executed_units|#[0-9]+.*DONE)' \
      "$out/logs/$h.log" | tail -2 | tr '\n' ' ')"
    return 0
  fi
  echo "fuzz.sh: $h FAILED; the end of its log ($out/logs/$h.log):" >&2
  tail -60 "$out/logs/$h.log" >&2
  return 1
}
failed=()
jobs=${FUZZ_JOBS:-$(nproc)}
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
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $out/artifacts/)" >&2
  exit 1
fi
each="$seconds s"
if [ -n "${FUZZ_RUNS:-}" ]; then each="$FUZZ_RUNS runs"; fi
echo "fuzz.sh: no finding ($each each); total $(($(date +%s) - start)) s"
