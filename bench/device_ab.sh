#!/usr/bin/env bash
# Before/after on the device machine, inside one run: runs the GPU tests of device-pack/
# (the new build), then layerps-device-bench of the old build (device-pack/bin/before/) and
# of the new one (device-pack/bin/) alternately, ROUNDS times each, at 1M and at 100k keys,
# so that every ratio compares two builds on the same machine in the same minutes.
# Results: $OUT/ab.txt (every run's output) and $OUT/summary.txt.
# Prepare here: keep the old binary as device-pack/bin/before/layerps-device-bench, then
# bash bench/device_pack.sh for the new one (it rebuilds device-pack/; copy the old binary
# back in after). About 2 minutes; run(command="bash bench/device_ab.sh", carry=["device-pack"]).
# Usage: bash bench/device_ab.sh [ROUNDS]   (default 2)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
ROUNDS=${1:-2}
export LD_LIBRARY_PATH="$PWD/device-pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GLOG_minloglevel=1
B=device-pack/bin
[ -x "$B/before/layerps-device-bench" ] || { echo "device_ab.sh: no $B/before/layerps-device-bench" >&2; exit 2; }
{ echo "cores: $(nproc)"; nvidia-smi --query-gpu=name --format=csv,noheader; cat device-pack/COMMIT; date -u; } \
  2>&1 | tee -a "$OUT/summary.txt"
echo "== gpu_tests" | tee -a "$OUT/summary.txt"
timeout 90 bash -c "$B/packing_cuda_test --gtest_brief=1 && $B/device_test --gtest_brief=1" \
  > "$OUT/gpu_tests.txt" 2>&1
echo "   rc=$?" | tee -a "$OUT/summary.txt"
tail -n 8 "$OUT/gpu_tests.txt" >> "$OUT/summary.txt"
for keys in 1000000 100000; do
  extra=()
  [ "$keys" = 100000 ] && extra=(--dense_elems=0)
  for r in $(seq "$ROUNDS"); do
    for build in before after; do
      bin=$B/layerps-device-bench
      [ "$build" = before ] && bin=$B/before/layerps-device-bench
      echo "== $build keys=$keys round $r ($(date -u +%H:%M:%S))" | tee -a "$OUT/ab.txt" "$OUT/summary.txt"
      timeout 60 "$bin" --keys="$keys" --repeats=3 "${extra[@]}" 2>&1 | tee -a "$OUT/ab.txt" |
        grep -E "device/host|verified|WRONG" >> "$OUT/summary.txt"
    done
  done
done
echo "device_ab.sh: done at $(date -u +%H:%M:%S)" | tee -a "$OUT/summary.txt"
