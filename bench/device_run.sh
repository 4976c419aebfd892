#!/usr/bin/env bash
# Runs the 16-core and GPU measurements on the device machine from device-pack/ (made here by
# bench/device_pack.sh), in order of what matters most, each step under its own time limit
# (a step that fails or runs out is recorded and the next one runs):
#  - the GPU tests (device_test, packing_cuda_test; tests/python/test_gpu.py through the wheel);
#  - layerps-device-bench at 1M and at 100k keys: the GPU path against cudaMemcpy plus the
#    host call;
#  - layerps-bench 1x1 over tcp: dense push/pull at 256K/4M/32M with 1, 2 and 4 streams
#    beside one raw ZeroMQ baseline; sparse 100k x 16 (uniform, zipf); 2x2 against 1x1;
#    4 KiB pushpull (the default streams and one); the --targets preset with the default streams;
#    the apply lanes against the receive thread alone (apply_threads 0 and the default);
#  - layerps-microbench BM_SparseBoundedSum (the row store's bounded policies);
#  - the typed collectives against torch.distributed gloo (W = 2, 4, 8; 4 KiB - 64 MiB),
#    and the checkpoint write and restore rate: both through the layerps wheel in
#    device-pack/wheel (built for the device's Python) and that machine's own PyTorch;
#  - diagnostics run only when named: collectives_a2a, pull_inflight, ring_direct, small_io1
#    (below).
# Results: $OUT/summary.txt (each step's tail) and $OUT/results.tgz (every file; rebuilt
# after each step, so a run cut short still brings back what it measured).
# About 8 minutes on the 16-core machine (the limits of the steps run by default add up
# to 18.5 minutes); give run() timeout_s=580.
# Usage: [REPEATS=N] [SECONDS_PER=S] bash bench/device_run.sh [--quick] [STEP ...]
#        (--quick: a rehearsal on a small machine, short cases; STEPs: run only these, by
#        name; REPEATS, SECONDS_PER: the layerps-bench repeats, default 3 of 0.25 s)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT"
RES=$(mktemp -d /tmp/layerps-device-run.XXXXXX)
export LD_LIBRARY_PATH="$ROOT/device-pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GLOG_minloglevel=1 PYTHONUNBUFFERED=1
B=$ROOT/device-pack/bin
# The Python steps run without device-pack/lib (its libstdc++ is older than the one that
# machine's PyTorch needs; the wheel carries its own libraries).
PY=(env -u LD_LIBRARY_PATH "${DEVICE_RUN_PYTHON:-python3}")
QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
ONLY=" $* "
if [ "$QUICK" = 1 ]; then
  SECONDS_PER=${SECONDS_PER:-0.1} REPEATS=${REPEATS:-1} KEYS_BIG=100000 KEYS_SMALL=20000 WORLDS=2 MAX_MIB=4
  CKPT=(--dense_mib 16 --rows 50000 --dim 16 --reps 1) MICRO_REPS=1
else
  SECONDS_PER=${SECONDS_PER:-0.25} REPEATS=${REPEATS:-3} KEYS_BIG=1000000 KEYS_SMALL=100000 WORLDS=2,4,8 MAX_MIB=64
  CKPT=(--dense_mib 128 --rows 500000 --dim 64 --reps 3) MICRO_REPS=3
fi
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  if [ "$ONLY" != "  " ] && [[ "$ONLY" != *" $name "* ]]; then return; fi
  echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s)" | tee -a "$OUT/summary.txt"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" > "$RES/$name.txt" 2>&1
  local rc=$?
  echo "   rc=$rc in $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
  tail -n 45 "$RES/$name.txt" >> "$OUT/summary.txt"
  tar -czf "$OUT/results.tgz" --exclude=./site -C "$RES" . 2>/dev/null
}
named() {  # named NAME LIMIT_S COMMAND...: a diagnostic step, run only when named
  [[ "$ONLY" == *" $1 "* ]] && step "$@"
}
{
  echo "cores: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo
  free -g | sed -n 2p
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "commit: $(cat device-pack/COMMIT)"
  date -u
} > "$RES/machine.txt" 2>&1
cat "$RES/machine.txt" | tee -a "$OUT/summary.txt"

# The wheel for the Python steps (pip --target: nothing outside /tmp is touched).
if ls device-pack/wheel/layerps-*.whl >/dev/null 2>&1; then
  # pip where it is there; else the wheel unpacked by hand (a wheel is a zip; the
  # daemons in layerps/bin need their execute bits back).
  if ! "${PY[@]}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$RES/site" device-pack/wheel/layerps-*.whl > "$RES/pip.txt" 2>&1; then
    "${PY[@]}" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
      device-pack/wheel/layerps-*.whl "$RES/site" >> "$RES/pip.txt" 2>&1
    chmod +x "$RES"/site/layerps/bin/* 2>/dev/null
  fi
  if ls device-pack/pywheels/*.whl >/dev/null 2>&1; then  # pytest, for py_gpu_tests
    "${PY[@]}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$RES/site" device-pack/pywheels/*.whl >> "$RES/pip.txt" 2>&1
  fi
  tail -n 3 "$RES/pip.txt" >> "$OUT/summary.txt"
  export PYTHONPATH="$RES/site${PYTHONPATH:+:$PYTHONPATH}"
  "${PY[@]}" -c "import layerps, numpy, torch; print('layerps', layerps.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)" \
    2>&1 | tail -n 2 | tee -a "$OUT/summary.txt"
fi

step gpu_tests 60 bash -c "$B/packing_cuda_test --gtest_brief=1 && $B/device_test --gtest_brief=1"
# The Python device route (CUDA tensors through every call, module and optimizer mode).
step py_gpu_tests 120 "${PY[@]}" -m pytest -q -p no:cacheprovider -m gpu tests/python/test_gpu.py
step device_1m 70 "$B/layerps-device-bench" --keys="$KEYS_BIG" --repeats="$REPEATS"
step device_100k 40 "$B/layerps-device-bench" --keys="$KEYS_SMALL" --dense_elems=0 --repeats="$REPEATS"
common=(--ops=push,pull --inflight=8 --repeats="$REPEATS" --seconds="$SECONDS_PER" --verify=true
        --progress=false)
step dense_streams 110 "$B/layerps-bench" "${common[@]}" --sizes=256K,4M,32M \
  --sweep_streams=1,2,4 --json="$RES/dense_streams.json"
# The apply lanes (server/apply_lanes.h): the receive thread alone (--apply_threads=0)
# against the default (a quarter of the cores), interleaved, twice.
step apply_lanes 150 bash -c 'for r in 1 2; do for a in 0 -1; do "$0" "${@:2}" \
  --apply_threads=$a --json="$1/apply_lanes-r$r-a$a.json"; done; done' "$B/layerps-bench" "$RES" \
  "${common[@]}" --ops=push,pull,pushpull --sizes=256K,4M,32M --topologies=1x1,2x2 --baseline=false
step sparse 45 "$B/layerps-bench" --modes=sparse "${common[@]}" --sparse_keys=100000 \
  --dist=uniform,zipf --json="$RES/sparse.json"
step topologies 60 "$B/layerps-bench" "${common[@]}" --sizes=256K,4M,32M --topologies=1x1,2x2 \
  --baseline=false --json="$RES/topologies.json"
step small 30 "$B/layerps-bench" --ops=pushpull --sizes=4K --inflight=1 --repeats="$REPEATS" \
  --seconds="$SECONDS_PER" --progress=false --json="$RES/small.json"
step small_streams1 30 "$B/layerps-bench" --ops=pushpull --sizes=4K --inflight=1 --streams=1 \
  --repeats="$REPEATS" --seconds="$SECONDS_PER" --progress=false --json="$RES/small_streams1.json"
step micro_bounded 60 "$B/layerps-microbench" --benchmark_filter=BM_SparseBoundedSum \
  --benchmark_repetitions="$MICRO_REPS" --benchmark_report_aggregates_only=true
step collectives 200 "${PY[@]}" bench/collectives_bench.py --worlds="$WORLDS" --max_mib="$MAX_MIB" \
  --json="$RES/collectives.json"
step checkpoint 60 "${PY[@]}" bench/checkpoint_bench.py --servers 2 "${CKPT[@]}" --dir /tmp/layerps-ckpt
# The RESULTS target table as a new user gets it (streams from the core count).
step targets 90 "$B/layerps-bench" --targets --repeats="$REPEATS" --seconds="$SECONDS_PER" \
  --progress=false --json="$RES/targets.json"
# Diagnostics, run only when named: all-to-all with and without its round of lengths;
# pulls with fewer in flight (does 32 MiB keep up with 4 MiB when the destinations fit in
# the cache?); 4 KiB round trips with 4 streams over one I/O thread.
named collectives_a2a 150 "${PY[@]}" bench/collectives_bench.py --worlds="$WORLDS" \
  --max_mib="$MAX_MIB" --ops=alltoall,alltoallv --json="$RES/collectives_a2a.json"
named pull_inflight 60 "$B/layerps-bench" --ops=pull --sizes=4M,32M --inflight=1,2,8 \
  --repeats="$REPEATS" --seconds="$SECONDS_PER" --baseline=false --progress=false \
  --json="$RES/pull_inflight.json"
named ring_direct 120 bash -c '"$@" bench/allreduce_algorithms.py 4 && "$@" bench/allreduce_algorithms.py 8' \
  _ "${PY[@]}"
named small_io1 30 "$B/layerps-bench" --ops=pushpull --sizes=4K --inflight=1 --io_threads=1 \
  --repeats="$REPEATS" --seconds="$SECONDS_PER" --progress=false --json="$RES/small_io1.json"
echo "device_run.sh: done at $(date -u +%H:%M:%S); every file in $OUT/results.tgz" | tee -a "$OUT/summary.txt"
rm -rf /tmp/layerps-ckpt
