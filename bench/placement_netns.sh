#!/usr/bin/env bash
# Step time of the big-FC-head CNN under uniform, park and stanza (and allreduce) on a
# limited link.
#
# Two hosts made of network namespaces joined by a veth pair whose both ends are shaped
# with tc tbf to RATE (the server host's link, both directions):
#   server host (10.233.0.1): layerps-scheduler, 2 layerps-server, and for park/stanza the
#                             suffix rank (the PS worker / FC node, beside the servers)
#   worker host (10.233.0.2): the W conv workers (uniform, allreduce: the W data-parallel
#                             workers; allreduce's ring stays on this host)
# Each strategy trains examples/python/placement_cnn.py for one epoch of STEPS global
# batches and reports seconds per step (the first step, which includes setting up, is left
# out by the example's per-epoch timer only when STEPS > 1; see the printed lines).
#
# Usage (root): bench/placement_netns.sh [RATE=100mbit] [W=4] [BATCH=32] [STEPS=4] [MODEL=bigfc]
#   MODEL: bigfc, or torchvision's vgg16, alexnet or resnet18 (placement_cnn.py --model);
#   STRATEGIES="uniform park" (environment) runs only those (default: uniform park stanza;
#   allreduce is run only when named).
#   FC_NODES=N (environment, N > 1): stanza with N FC nodes (replicas), from the plan
#   layerps-plan --strategy=stanza --fc_nodes=N writes for the model at this batch; the
#   scheduler and the workers read that plan (its cut and roles).
# Needs the Python package installed in .venv (bash scripts/test-python.sh does it).
set -u
rate=${1:-100mbit}
workers=${2:-4}
batch=${3:-32}
steps=${4:-4}
model=${5:-bigfc}
here=$(cd "$(dirname "$0")/.." && pwd)
py=$here/.venv/bin/python
if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null || [ ! -x "$py" ]; then
  echo "placement_netns: needs root, tc and $py"
  exit 2
fi
bin=$("$py" -c 'import layerps; print(layerps.bin_dir())')
s=lpsS$$
w=lpsW$$
work=$(mktemp -d /tmp/layerps-pnetns-XXXXXX)
cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$s" 2>/dev/null
  ip netns del "$w" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$s" && ip netns add "$w" || exit 1
ip link add "vs$$" type veth peer name "vw$$" || exit 1
ip link set "vs$$" netns "$s" && ip link set "vw$$" netns "$w" || exit 1
ip -n "$s" addr add 10.233.0.1/24 dev "vs$$" && ip -n "$s" link set "vs$$" up && ip -n "$s" link set lo up
ip -n "$w" addr add 10.233.0.2/24 dev "vw$$" && ip -n "$w" link set "vw$$" up && ip -n "$w" link set lo up
for ns_dev in "$s vs$$" "$w vw$$"; do
  set -- $ns_dev
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 400ms || exit 1
done

common=(--token=bench --heartbeat_interval_ms=500 --heartbeat_timeout_ms=20000 --connect_timeout_ms=60000)

fc_nodes=${FC_NODES:-1}
plan_args=()
if [ "$fc_nodes" -gt 1 ]; then
  size=32
  [ "$model" = alexnet ] && size=64
  profile=$model
  if [ "$model" != bigfc ]; then
    profile=$work/profile.json
    "$py" - "$model" "$size" "$batch" "$profile" <<'EOF' || exit 1
import json, sys, torch, torchvision
from layerps.placement import profile
model, size, batch, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
net = getattr(torchvision.models, model)(weights=None, num_classes=10)
json.dump(profile(net, torch.randn(batch, 3, size, size), name=model), open(out, "w"))
EOF
  fi
  "$bin/layerps-plan" --model="$profile" --workers="$workers" --servers=2 --batch="$batch" \
    --strategy=stanza --fc_nodes="$fc_nodes" --write_plan="$work/plan.json" >/dev/null || exit 1
  plan_args=(--plan "$work/plan.json")
fi

run() {  # run STRATEGY: prints the suffix rank's or rank 0's epoch line
  local strategy=$1 ranks=$workers suffixes=0
  case $strategy in uniform|allreduce) ;; *) suffixes=1 ;; esac
  [ "$strategy" = stanza ] && suffixes=$fc_nodes
  ranks=$((workers + suffixes))
  local plan=()
  [ "$strategy" = stanza ] && plan=("${plan_args[@]}")
  rm -f "$work/addr"
  ip netns exec "$s" "$bin/layerps-scheduler" --scheduler=tcp://0.0.0.0:0 --advertise_host=10.233.0.1 \
    --num_servers=2 --num_workers="$ranks" --address_file="$work/addr" --run_timeout_s=1800 \
    "${common[@]}" "${plan[@]}" >"$work/scheduler-$strategy.log" 2>&1 &
  for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
  local addr
  addr=$(cat "$work/addr")
  for i in 0 1; do
    ip netns exec "$s" "$bin/layerps-server" --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
      --advertise_host=10.233.0.1 --rank="$i" "${common[@]}" >"$work/server$i-$strategy.log" 2>&1 &
  done
  local env=(LAYERPS_SCHEDULER="$addr" LAYERPS_TOKEN=bench LAYERPS_BIND=tcp://0.0.0.0:0
             LAYERPS_HEARTBEAT_INTERVAL_MS=500 LAYERPS_HEARTBEAT_TIMEOUT_MS=20000
             LAYERPS_CONNECT_TIMEOUT_MS=60000 LAYERPS_REQUEST_TIMEOUT_MS=600000 GLOG_minloglevel=2)
  local args=(--model "$model" --test_limit 32 --strategy "$strategy" --epochs 1 --batch $((batch * workers)) --limit $((batch * workers * steps))
              --lr 0.05 --json "$work/$strategy-{rank}.json" "${plan[@]}")
  local pids=()
  for r in $(seq 0 $((workers - 1))); do
    ip netns exec "$w" env "${env[@]}" LAYERPS_ADVERTISE_HOST=10.233.0.2 LAYERPS_RANK="$r" \
      "$py" "$here/examples/python/placement_cnn.py" "${args[@]}" >"$work/worker$r-$strategy.log" 2>&1 &
    pids+=($!)
  done
  for r in $(seq "$workers" $((ranks - 1))); do  # the suffix ranks, beside the servers
    ip netns exec "$s" env "${env[@]}" LAYERPS_ADVERTISE_HOST=10.233.0.1 LAYERPS_RANK="$r" \
      "$py" "$here/examples/python/placement_cnn.py" "${args[@]}" >"$work/suffix$r-$strategy.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  wait
  if [ $status -ne 0 ]; then
    echo "placement_netns: $strategy failed"
    tail -n 5 "$work"/*-"$strategy".log
    exit 1
  fi
  local report=0
  case $strategy in uniform|allreduce) ;; *) report=$((ranks - 1)) ;; esac  # the last suffix rank reports the loss
  "$py" - "$work" "$strategy" "$steps" "$report" "$workers" <<'EOF'
import json, statistics, sys
work, strategy, steps, report, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
r = json.load(open(f"{work}/{strategy}-{report}.json"))
h = r["history"][0]
later = r.get("step_seconds", [])[1:]  # the first step also sets up
# The payload through the W workers' NICs per step: table payload to and from the servers
# plus activations, labels and gradients to and from the suffix rank.
mb = sum(json.load(open(f"{work}/{strategy}-{k}.json"))["ps_payload_bytes_per_step"]
         + json.load(open(f"{work}/{strategy}-{k}.json"))["peer_payload_bytes_per_step"]
         for k in range(workers)) / 1e6
print(f"{strategy:9} {h['seconds']:8.2f} s for {steps} steps = {h['seconds'] / steps:7.3f} s/step"
      + (f"; after the first: median {statistics.median(later):.3f} s/step"
         f" [{min(later):.3f}, {max(later):.3f}]" if later else "")
      + (f"; workers' ring payload {mb:.1f} MB/step (on the worker host)" if strategy == "allreduce"
         else f"; workers' payload {mb:.1f} MB/step") + (f"  loss {h['loss']:.4f}" if "loss" in h else ""))
EOF
}

echo "$model, W=$workers workers x batch $batch, 2 servers, link $rate (tbf, both directions), $steps steps" \
  "$([ "$fc_nodes" -gt 1 ] && echo "; stanza with $fc_nodes FC nodes")"
for strategy in ${STRATEGIES:-uniform park stanza}; do run "$strategy"; done
