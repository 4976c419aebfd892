#!/usr/bin/env bash
# bench/overlap_bench.py (overlap on/off, alternating blocks) on M machines made of network
# namespaces joined by a bridge, each link shaped with tc tbf to RATE in both directions
# (as bench/hybrid_netns.sh). Machine k runs layerps-server rank k and the worker of rank
# k; machine 0 also the scheduler. Prints rank 0's JSON line.
#
# Usage (root): bench/overlap_netns.sh [RATE=300mbit] [M=2] [overlap_bench.py args...]
# PY (default /usr/bin/python3) must import layerps (e.g. PYTHONPATH=build-dev/bindings/python).
set -u
rate=${1:-300mbit}
machines=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PY:-/usr/bin/python3}
if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null || ! "$py" -c 'import layerps' 2>/dev/null; then
  echo "overlap_netns: needs root, tc and a python ($py) that imports layerps"
  exit 2
fi
bin=$("$py" -c 'import layerps; print(layerps.bin_dir())')
tag=$$
. "$here/bench/netns_star.sh"
work=$(mktemp -d /tmp/layerps-onetns-XXXXXX)
cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  star_down lpsO "$machines"
  rm -rf "$work"
}
trap cleanup EXIT
star_up lpsO 10.235.0 "$machines" "$rate" || exit 1
common=(--token=bench --heartbeat_interval_ms=500 --heartbeat_timeout_ms=30000)
ip netns exec "lpsO0_$tag" "$bin/layerps-scheduler" --scheduler=tcp://0.0.0.0:0 --advertise_host=10.235.0.1 \
  --num_servers="$machines" --num_workers="$machines" --address_file="$work/addr" --run_timeout_s=3600 \
  "${common[@]}" >"$work/scheduler.log" 2>&1 &
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(cat "$work/addr")
for k in $(seq 0 $((machines - 1))); do
  ip netns exec "lpsO${k}_$tag" "$bin/layerps-server" --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
    --advertise_host="10.235.0.$((k + 1))" --rank="$k" --connect_timeout_ms=120000 "${common[@]}" >"$work/server$k.log" 2>&1 &
done
env=(LAYERPS_SCHEDULER="$addr" LAYERPS_TOKEN=bench LAYERPS_BIND=tcp://0.0.0.0:0
     LAYERPS_HEARTBEAT_INTERVAL_MS=500 LAYERPS_HEARTBEAT_TIMEOUT_MS=30000
     LAYERPS_CONNECT_TIMEOUT_MS=120000 LAYERPS_REQUEST_TIMEOUT_MS=600000 GLOG_minloglevel=2)
pids=()
for k in $(seq 0 $((machines - 1))); do
  ip netns exec "lpsO${k}_$tag" env "${env[@]}" LAYERPS_ADVERTISE_HOST="10.235.0.$((k + 1))" LAYERPS_RANK="$k" \
    "$py" "$here/bench/overlap_bench.py" "${extra[@]}" >"$work/worker$k.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
if [ $status -ne 0 ]; then
  echo "overlap_netns: a worker failed"
  tail -n 5 "$work"/*.log
  exit 1
fi
echo "link $rate (tbf, both directions), $machines machines (1 worker + 1 server each)"
grep '^{' "$work/worker0.log"
