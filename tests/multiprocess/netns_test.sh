#!/usr/bin/env bash
# Two hosts made of network namespaces joined by a veth pair: the daemons and workers
# run across them with wildcard binds and advertised addresses, as on real machines.
#   host A (10.231.7.1): layerps-scheduler, layerps-server, a worker
#   host B (10.231.7.2): layerps-server, a worker
# Usage: netns_test.sh TOOLS_DIR EXAMPLES_DIR. Exits 77 (skipped) without root or ip.
set -u
tools=$1
examples=$2
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "netns_test: needs root and iproute2; skipping"
  exit 77
fi
a=lpsA$$
b=lpsB$$
work=$(mktemp -d /tmp/layerps-netns-XXXXXX)
cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null || ! ip netns add "$b"; then
  echo "netns_test: cannot create network namespaces here; skipping"
  exit 77
fi
ip link add "va$$" type veth peer name "vb$$" || exit 1
ip link set "va$$" netns "$a" && ip link set "vb$$" netns "$b" || exit 1
ip -n "$a" addr add 10.231.7.1/24 dev "va$$" && ip -n "$a" link set "va$$" up && ip -n "$a" link set lo up
ip -n "$b" addr add 10.231.7.2/24 dev "vb$$" && ip -n "$b" link set "vb$$" up && ip -n "$b" link set lo up

common=(--token=netns-secret --heartbeat_interval_ms=100 --heartbeat_timeout_ms=3000 --connect_timeout_ms=20000)
ip netns exec "$a" "$tools/layerps-scheduler" --scheduler=tcp://0.0.0.0:0 --advertise_host=10.231.7.1 \
  --num_servers=2 --num_workers=2 --address_file="$work/addr" --run_timeout_s=120 "${common[@]}" \
  >"$work/scheduler.log" 2>&1 &
sched=$!
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(cat "$work/addr" 2>/dev/null)
case "$addr" in
  tcp://10.231.7.1:*) ;;
  *) echo "netns_test: scheduler advertised '$addr'"; cat "$work/scheduler.log"; exit 1 ;;
esac
ip netns exec "$a" "$tools/layerps-server" --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
  --advertise_host=10.231.7.1 "${common[@]}" >"$work/server-a.log" 2>&1 &
srv_a=$!
ip netns exec "$b" "$tools/layerps-server" --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
  --advertise_host=10.231.7.2 "${common[@]}" >"$work/server-b.log" 2>&1 &
srv_b=$!
env_common=(LAYERPS_SCHEDULER="$addr" LAYERPS_TOKEN=netns-secret LAYERPS_BIND=tcp://0.0.0.0:0
            LAYERPS_HEARTBEAT_INTERVAL_MS=100 LAYERPS_HEARTBEAT_TIMEOUT_MS=3000)
ip netns exec "$a" env "${env_common[@]}" LAYERPS_ADVERTISE_HOST=10.231.7.1 \
  "$examples/sparse_logreg" --steps=150 --min_accuracy=0.7 >"$work/worker-a.log" 2>&1 &
wk_a=$!
ip netns exec "$b" env "${env_common[@]}" LAYERPS_ADVERTISE_HOST=10.231.7.2 \
  "$examples/sparse_logreg" --steps=150 --min_accuracy=0.7 >"$work/worker-b.log" 2>&1 &
wk_b=$!
status=0
for p in $wk_a $wk_b $sched $srv_a $srv_b; do wait "$p" || status=1; done
for f in "$work"/*.log; do echo "== $(basename "$f")"; grep -v "^I20" "$f" | tail -5; done
grep -q "10.231.7.2" "$work/scheduler.log" || { echo "netns_test: no node registered from host B"; status=1; }
[ $status -eq 0 ] && echo "netns_test: cluster across two hosts OK"
exit $status
