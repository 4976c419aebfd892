#!/usr/bin/env bash
# Step time of examples/python/hybrid_lm.py under --mode=hybrid, ps and allreduce when
# every machine's link is limited.
#
# M machines made of network namespaces, each joined to a bridge (in a namespace of its
# own, the "switch") by a veth pair whose both ends are shaped with tc tbf to RATE (the
# machine's link, both directions). Machine k runs layerps-server rank k and the worker of
# rank k (machine 0 also the scheduler); every worker is its own host (--hosts rank).
# Each mode trains STEPS steps; the example times the steps after its warm-up, ending
# with a barrier (seconds_per_step_with_barrier, the slowest worker's).
#
# Usage (root): bench/hybrid_netns.sh [RATE=100mbit] [M=8] [STEPS=12] [EXTRA example args...]
# PY (default .venv/bin/python) must import layerps (e.g. PY=/usr/bin/python3 with
# PYTHONPATH=build/bindings/python).
set -u
rate=${1:-100mbit}
machines=${2:-8}
steps=${3:-12}
shift $(( $# < 3 ? $# : 3 ))
extra=("$@")
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PY:-$here/.venv/bin/python}
if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null || ! "$py" -c 'import layerps' 2>/dev/null; then
  echo "hybrid_netns: needs root, tc and a python ($py) that imports layerps"
  exit 2
fi
bin=$("$py" -c 'import layerps; print(layerps.bin_dir())')
tag=$$
. "$here/bench/netns_star.sh"
work=$(mktemp -d /tmp/layerps-hnetns-XXXXXX)
cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  star_down lpsH "$machines"
  rm -rf "$work"
}
trap cleanup EXIT
star_up lpsH 10.234.0 "$machines" "$rate" || exit 1

common=(--token=bench --heartbeat_interval_ms=500 --heartbeat_timeout_ms=30000)

run() {  # run MODE: prints the step time
  local mode=$1 began=$SECONDS
  rm -f "$work/addr"
  ip netns exec "lpsH0_$tag" "$bin/layerps-scheduler" --scheduler=tcp://0.0.0.0:0 --advertise_host=10.234.0.1 \
    --num_servers="$machines" --num_workers="$machines" --address_file="$work/addr" --run_timeout_s=3600 \
    "${common[@]}" >"$work/scheduler-$mode.log" 2>&1 &
  for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
  local addr
  addr=$(cat "$work/addr")
  for k in $(seq 0 $((machines - 1))); do
    ip netns exec "lpsH${k}_$tag" "$bin/layerps-server" --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
      --advertise_host="10.234.0.$((k + 1))" --rank="$k" --connect_timeout_ms=120000 "${common[@]}" >"$work/server$k-$mode.log" 2>&1 &
  done
  local env=(LAYERPS_SCHEDULER="$addr" LAYERPS_TOKEN=bench LAYERPS_BIND=tcp://0.0.0.0:0
             LAYERPS_HEARTBEAT_INTERVAL_MS=500 LAYERPS_HEARTBEAT_TIMEOUT_MS=30000
             LAYERPS_CONNECT_TIMEOUT_MS=120000 LAYERPS_REQUEST_TIMEOUT_MS=600000 GLOG_minloglevel=2)
  local pids=()
  for k in $(seq 0 $((machines - 1))); do
    ip netns exec "lpsH${k}_$tag" env "${env[@]}" LAYERPS_ADVERTISE_HOST="10.234.0.$((k + 1))" LAYERPS_RANK="$k" \
      "$py" "$here/examples/python/hybrid_lm.py" --mode "$mode" --hosts rank --steps "$steps" --warmup 2 \
      --json "$work/$mode-{rank}.json" "${extra[@]}" >"$work/worker$k-$mode.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  wait
  if [ $status -ne 0 ]; then
    echo "hybrid_netns: $mode failed"
    tail -n 5 "$work"/*-"$mode".log
    exit 1
  fi
  "$py" - "$work" "$mode" "$machines" <<'EOF'
import json, sys
work, mode, m = sys.argv[1], sys.argv[2], int(sys.argv[3])
rs = [json.load(open(f"{work}/{mode}-{r}.json")) for r in range(m)]
t = max(r["seconds_per_step_with_barrier"] for r in rs)
print(f"{mode:9} {t * 1e3:9.1f} ms/step  (rank 0 without the final barrier {rs[0]['seconds_per_step'] * 1e3:.1f} ms;"
      f" {rs[0]['measured_steps']} steps timed; eval loss {rs[0]['eval_loss']:.4f};"
      f" peak RSS of a worker {max(r['max_rss_mb'] for r in rs):.0f} MB)", flush=True)
print(f"          (start-up on rank 0: DistributedOptimizer {rs[0]['construct_seconds']:.1f} s, the first step"
      f" {rs[0]['step_seconds'][0]:.1f} s)", flush=True)
EOF
  echo "          (the whole run, start-up included: $((SECONDS - began)) s)"
}

echo "hybrid_lm, M=$machines machines (1 worker + 1 server each), link $rate (tbf, both directions), $steps steps, extra: ${extra[*]:-none}"
for mode in ${MODES:-hybrid ps allreduce}; do run "$mode"; done
