#!/usr/bin/env bash
# OptCNN's cost model against measurement (issue 12): the strategies LayerPS executes for the
# big-FC-head CNN of examples/python/placement_cnn.py — data parallelism, OWT, and the
# search's pick — each predicted by `layerps-plan --strategy=optcnn` and run through the
# placement executor on machines whose links are limited.
#
# D machines (the cost model's devices) made of network namespaces, each joined to a bridge
# (in a namespace of its own) by a veth pair whose both ends are shaped with tc tbf to
# RATE_MBIT (the device's link, both directions). Machine k runs layerps-server rank k and
# conv worker rank k (machine 0 also the scheduler); the FC nodes of a stanza execution plan
# run beside the server ranks the plan names. One server per machine is what makes the
# PS's traffic the model's ring all-reduce: a worker's share for its own machine's server
# never crosses a link.
#
# The device's compute rate is calibrated first: forward + backward of one worker's batch
# of the model, timed in this process on one thread, against the profile's FLOPs
# (rate = 3 x FLOPs x batch / seconds, the cost model's own backward factor). The profile is
# the PyTorch model's (layerps.placement.profile). Measured per strategy: seconds per step
# (mean over the steps after the first, of the slowest rank) and bytes per step that
# crossed machines (LayerPS's counters by peer address; payload and 64-byte headers, not
# TCP/IP's), next to the prediction; error = measured / predicted - 1.
#
# Usage (root): bench/optcnn_netns.sh [RATE_MBIT=100] [D=2] [BATCH=16] [STEPS=6] [JSON_OUT]
# PY (default .venv/bin/python) must import layerps (e.g. PY=/usr/bin/python3 with
# PYTHONPATH=build/bindings/python). RUNS (default "data owt optcnn") picks the strategies.
set -u
rate=${1:-100}
devices=${2:-2}
batch=${3:-16}
steps=${4:-6}
json_out=${5:-}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PY:-$here/.venv/bin/python}
if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null || ! "$py" -c 'import layerps' 2>/dev/null; then
  echo "optcnn_netns: needs root, tc and a python ($py) that imports layerps"
  exit 2
fi
bin=$("$py" -c 'import layerps; print(layerps.bin_dir())')
tag=$$
. "$here/bench/netns_star.sh"
work=$(mktemp -d /tmp/layerps-onetns-XXXXXX)
cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  star_down lpsC "$devices"
  rm -rf "$work"
}
trap cleanup EXIT
star_up lpsC 10.235.0 "$devices" "${rate}mbit" || exit 1

# The model's profile and the calibrated device rate.
flops=$("$py" - "$here/examples/python" "$work/profile.json" "$batch" <<'EOF'
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import torch.nn.functional as F
from placement_cnn import big_fc_cnn
from layerps.placement import profile
torch.set_num_threads(1)
model = big_fc_cnn(0)
batch = int(sys.argv[3])
prof = profile(model, torch.zeros(2, 1, 32, 32), name="bigfc1")
json.dump(prof, open(sys.argv[2], "w"))
x, y = torch.randn(batch, 1, 32, 32), torch.randint(0, 10, (batch,))
times = []
for i in range(12):
    t0 = time.perf_counter()
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    times.append(time.perf_counter() - t0)
t = sorted(times[2:])[len(times[2:]) // 2]
print(f"{3 * sum(l['flops_per_sample'] for l in prof['layers']) * batch / t:.4g}")
EOF
)
[ -n "$flops" ] || { echo "optcnn_netns: calibration failed"; exit 1; }

common=(--token=bench --heartbeat_interval_ms=500 --heartbeat_timeout_ms=30000)
plan_args=("$bin/layerps-plan" --model="$work/profile.json" --workers="$devices" --servers="$devices"
           --batch="$batch" --bandwidth="${rate}Mbit" --worker_flops="$flops" --strategy=optcnn)
"${plan_args[@]}" --json >"$work/report.json" || exit 1

run() {  # run STRATEGY (optcnn, data, owt): prints predicted vs measured
  local run=$1 plan=$work/plan-$1.json
  if ! "${plan_args[@]}" --optcnn_run="$run" --write_plan="$plan" >/dev/null 2>"$work/plan-$run.err"; then
    echo "$run: $(cat "$work/plan-$run.err")"
    return
  fi
  local fc_nodes conv=$devices ranks
  fc_nodes=$("$py" -c 'import json,sys; p=json.load(open(sys.argv[1])); print(" ".join(str(s) for s in (p["roles"]["fc_nodes"] if p["strategy"] == "stanza" else [])))' "$plan")
  ranks=$((conv + $(echo "$fc_nodes" | wc -w)))
  rm -f "$work/addr"
  ip netns exec "lpsC0_$tag" "$bin/layerps-scheduler" --scheduler=tcp://0.0.0.0:0 --advertise_host=10.235.0.1 \
    --num_servers="$devices" --num_workers="$ranks" --address_file="$work/addr" --run_timeout_s=3600 \
    --plan="$plan" "${common[@]}" >"$work/scheduler-$run.log" 2>&1 &
  for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
  local addr
  addr=$(cat "$work/addr")
  for k in $(seq 0 $((devices - 1))); do
    ip netns exec "lpsC${k}_$tag" "$bin/layerps-server" --scheduler="$addr" --bind=tcp://0.0.0.0:0 \
      --advertise_host="10.235.0.$((k + 1))" --rank="$k" --connect_timeout_ms=120000 "${common[@]}" \
      >"$work/server$k-$run.log" 2>&1 &
  done
  local env=(LAYERPS_SCHEDULER="$addr" LAYERPS_TOKEN=bench LAYERPS_BIND=tcp://0.0.0.0:0
             LAYERPS_HEARTBEAT_INTERVAL_MS=500 LAYERPS_HEARTBEAT_TIMEOUT_MS=30000
             LAYERPS_CONNECT_TIMEOUT_MS=120000 LAYERPS_REQUEST_TIMEOUT_MS=600000 GLOG_minloglevel=2)
  local args=(--plan "$plan" --epochs 1 --batch $((batch * devices)) --limit $((batch * devices * steps))
              --lr 0.05 --json "$work/$run-{rank}.json")
  local pids=() r=0 machine
  for machine in $(seq 0 $((devices - 1))) $fc_nodes; do
    ip netns exec "lpsC${machine}_$tag" env "${env[@]}" LAYERPS_ADVERTISE_HOST="10.235.0.$((machine + 1))" \
      LAYERPS_RANK="$r" "$py" "$here/examples/python/placement_cnn.py" "${args[@]}" \
      >"$work/worker$r-$run.log" 2>&1 &
    pids+=($!)
    r=$((r + 1))
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  wait
  if [ $status -ne 0 ]; then
    echo "optcnn_netns: $run failed"
    tail -n 5 "$work"/*-"$run".log
    exit 1
  fi
  "$py" - "$work" "$run" "$ranks" "$json_out" <<'EOF'
import json, sys
work, run, ranks, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rs = [json.load(open(f"{work}/{run}-{r}.json")) for r in range(ranks)]
report = json.load(open(f"{work}/report.json"))
pred = report["optcnn"] if run == "optcnn" else [b for b in report["baselines"] if b["name"] == run][0]
timed = [r["step_seconds"][1:] or r["step_seconds"] for r in rs]
t = max(sum(s) / len(s) for s in timed)
b = sum(r["remote_bytes_per_step"] for r in rs)
plan = json.load(open(f"{work}/plan-{run}.json"))
configs = ", ".join(f"{l['layer']} {l['config']}" for l in pred["layers"] if l["kind"] == "fc")
row = dict(strategy=run, executed_as=plan["strategy"] + (f" ({plan['fc_parallel']})" if plan["strategy"] == "stanza" else ""),
           fc_configs=configs, predicted_step_s=pred["step_time_s"], measured_step_s=t,
           step_error=t / pred["step_time_s"] - 1, predicted_bytes=pred["bytes_per_step"], measured_bytes=b,
           bytes_error=b / pred["bytes_per_step"] - 1 if pred["bytes_per_step"] else None,
           predicted_compute_s=pred["compute_s"], predicted_sync_s=pred["sync_s"],
           predicted_transfer_s=pred["transfer_s"], steps_timed=len(timed[0]))
be = "n/a" if row["bytes_error"] is None else f"{row['bytes_error'] * 100:+.0f}%"
print(f"{run:7} as {row['executed_as']:17} step {pred['step_time_s'] * 1e3:8.1f} ms predicted, {t * 1e3:8.1f} measured "
      f"({row['step_error'] * 100:+.0f}%); bytes/step {pred['bytes_per_step'] / 1e6:7.2f} MB predicted, {b / 1e6:7.2f} "
      f"measured ({be}); FC: {configs}", flush=True)
if out:
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
EOF
}

echo "optcnn_netns: bigfc1 on D=$devices machines (1 server + 1 conv worker each, FC nodes beside their servers)," \
     "link ${rate} Mbit/s (tbf, both directions), batch $batch per worker, $steps steps;" \
     "calibrated device rate $flops FLOP/s"
for r in ${RUNS:-data owt optcnn}; do run "$r"; done
