#!/usr/bin/env bash
# Dense push time with TableSpec::wire_dtype fp32 vs fp16 vs bf16 over a shaped link.
#
# Two network namespaces joined by a veth pair whose both ends are shaped with tc tbf to
# RATE: namespace A runs the scheduler and one layerps-server, namespace B runs
# layerps-bench --join as the one worker (dense push of SIZE, INFLIGHT requests in
# flight). A fresh cluster per wire type (the bench's Stop ends it).
#
# Usage (root): bench/wire_netns.sh [RATE=500mbit] [SIZE=64M] [INFLIGHT=2] [WIRES="fp32 fp16 bf16"]
# BUILD (default build-dev) holds bench/layerps-bench and bindings/python/layerps/bin.
# EXTRA: more layerps-bench flags (e.g. "--part_bytes=0").
set -u
rate=${1:-500mbit}
size=${2:-64M}
inflight=${3:-2}
wires=${4:-fp32 fp16 bf16}
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build-dev}
bench=$build/bench/layerps-bench
bin=$build/bindings/python/layerps/bin
if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null || [ ! -x "$bench" ] || [ ! -x "$bin/layerps-server" ]; then
  echo "wire_netns: needs root, tc, $bench and $bin/layerps-server"
  exit 2
fi
tag=$$
a=lpsWA_$tag
b=lpsWB_$tag
work=$(mktemp -d /tmp/layerps-wnetns-XXXXXX)
cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$a" && ip netns add "$b" || exit 1
ip link add "wa_$tag" type veth peer name "wb_$tag" || exit 1
ip link set "wa_$tag" netns "$a" && ip link set "wb_$tag" netns "$b" || exit 1
ip -n "$a" addr add 10.235.0.1/24 dev "wa_$tag" && ip -n "$a" link set "wa_$tag" up && ip -n "$a" link set lo up || exit 1
ip -n "$b" addr add 10.235.0.2/24 dev "wb_$tag" && ip -n "$b" link set "wb_$tag" up && ip -n "$b" link set lo up || exit 1
ip netns exec "$a" tc qdisc add dev "wa_$tag" root tbf rate "$rate" burst 256kb latency 400ms || exit 1
ip netns exec "$b" tc qdisc add dev "wb_$tag" root tbf rate "$rate" burst 256kb latency 400ms || exit 1

common=(--token=bench --heartbeat_interval_ms=500 --heartbeat_timeout_ms=30000)
echo "wire_netns: link $rate (tbf, both directions), dense push $size, $inflight in flight, extra: ${EXTRA:-none}"
for wire in $wires; do
  rm -f "$work/addr"
  ip netns exec "$a" "$bin/layerps-scheduler" --scheduler=tcp://0.0.0.0:0 --advertise_host=10.235.0.1 \
    --num_servers=1 --num_workers=1 --address_file="$work/addr" --run_timeout_s=3600 \
    "${common[@]}" >"$work/scheduler-$wire.log" 2>&1 &
  for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
  addr=$(cat "$work/addr")
  ip netns exec "$a" "$bin/layerps-server" --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
    --advertise_host=10.235.0.1 --connect_timeout_ms=60000 "${common[@]}" >"$work/server-$wire.log" 2>&1 &
  # shellcheck disable=SC2086
  ip netns exec "$b" env GLOG_minloglevel=2 "$bench" --join --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
    --advertise_host=10.235.0.2 "${common[@]}" --connect_timeout_ms=60000 --request_timeout_ms=600000 \
    --nobaseline --noprogress --modes=dense --ops=push --sizes="$size" --inflight="$inflight" \
    --repeats="${REPEATS:-3}" --seconds="${SECONDS_PER_REPEAT:-2}" --wire_dtype="$wire" ${EXTRA:-} 2>&1 \
    | grep -E "dense push" | sed "s/^/$wire: /"
  wait
done
