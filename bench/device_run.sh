#!/usr/bin/env bash
# Runs the issue-14 measurements on the device machine from device-pack/ (made here by
# bench/device_pack.sh), writing every result to $OUT (default ./device-out):
#  - the GPU tests (device_test, packing_cuda_test);
#  - layerps-device-bench: the GPU path against cudaMemcpy plus the host call (item 7);
#  - layerps-bench 1x1 over tcp, streams 1, 2 and 4 in one run beside one raw ZeroMQ
#    baseline (items 1, 2); --targets with the default streams and with one;
#    2x2 against 1x1 (item 3); 4 KiB pushpull (item 5).
# About 6 minutes on the 16-core machine; give run() timeout_s=540.
# Each step is bounded; a failed step is recorded and the next one runs.
# Usage: bash bench/device_run.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/device-pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GLOG_minloglevel=1
B=device-pack/bin
SECONDS_PER=0.3
REPEATS=3
[ "${1:-}" = "--quick" ] && { SECONDS_PER=0.1; REPEATS=1; }
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date -u +%H:%M:%S))" | tee -a "$OUT/summary.txt"
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "   rc=$rc" | tee -a "$OUT/summary.txt"
  tail -n 40 "$OUT/$name.txt" >> "$OUT/summary.txt"
}
{ nproc; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; cat device-pack/COMMIT; } \
  > "$OUT/machine.txt" 2>&1
step gpu_tests 90 bash -c "$B/packing_cuda_test --gtest_brief=1 && $B/device_test --gtest_brief=1"
step device_bench 120 "$B/layerps-device-bench" --repeats="$REPEATS"
common=(--ops=push,pull --inflight=8 --repeats="$REPEATS" --seconds="$SECONDS_PER" --verify=true)
step dense_streams 200 "$B/layerps-bench" "${common[@]}" --sizes=256K,4M,32M \
  --sweep_streams=1,2,4 --json="$OUT/dense_streams.json"
# The RESULTS target table as a new user gets it (streams from the core count), and with
# one stream, for the ratio inside this machine.
step targets 90 "$B/layerps-bench" --targets --json="$OUT/targets.json"
step targets_streams1 90 "$B/layerps-bench" --targets --streams=1 --json="$OUT/targets_streams1.json"
step sparse 60 "$B/layerps-bench" --modes=sparse "${common[@]}" --sparse_keys=100000 \
  --dist=uniform,zipf --json="$OUT/sparse.json"
step topologies 75 "$B/layerps-bench" "${common[@]}" --sizes=256K,4M,32M --topologies=1x1,2x2 \
  --baseline=false --json="$OUT/topologies.json"
step small 45 "$B/layerps-bench" --ops=pushpull --sizes=4K --inflight=1 --repeats="$REPEATS" \
  --seconds="$SECONDS_PER" --json="$OUT/small.json"
echo "device_run.sh: done; results in $OUT" | tee -a "$OUT/summary.txt"
