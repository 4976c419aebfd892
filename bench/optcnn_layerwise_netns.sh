#!/usr/bin/env bash
# OptCNN's strategies executed layer by layer (layerps.placement.LayerwiseTrainer) on D
# machines with limited links: the search's pick against data, model and OWT parallelism,
# interleaved, each measured against the search's own prediction (bench/OPTCNN.md,
# "The layer-wise executor against the cost model").
#
# Usage (root): bench/optcnn_layerwise_netns.sh [RATE_MBIT=1000] [D=2] [BATCH=32] [STEPS=10]
#               [REPEATS=3] [OUT=bench/results/optcnn-layerwise] [MODEL=vgg16c]
#   --help    this text
#
# Machines are network namespaces joined to a bridge by veth pairs shaped with tc tbf to
# RATE_MBIT both ways (bench/netns_star.sh); machine k runs worker rank k, machine 0 also
# the scheduler; no servers (the executor uses collectives only). BATCH is the global batch.
# The device's compute rate is calibrated first: forward + backward of BATCH/D samples of
# the model on one thread, against its profile's FLOPs (rate = 3 x FLOPs x samples /
# seconds, the cost model's backward factor), and given to `layerps-plan --strategy=optcnn
# --worker_flops`. Then REPEATS rounds of the four strategies in turn, each STEPS timed
# steps after one untimed step, and one process on one thread for reference. Per strategy:
# the median over the rounds of the slowest rank's mean step, the spread, and bytes per
# step that left each machine (LayerPS's per-peer counters, payload + headers), beside the
# prediction. Raw output under OUT: every worker's JSON, the report, the logs, summary.txt.
# PY (default .venv/bin/python) must import layerps.
set -u
case "${1:-}" in -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
rate=${1:-1000}
devices=${2:-2}
batch=${3:-32}
steps=${4:-10}
repeats=${5:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${6:-$here/bench/results/optcnn-layerwise}
model=${7:-vgg16c}
py=${PY:-$here/.venv/bin/python}
if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null || ! "$py" -c 'import layerps' 2>/dev/null; then
  echo "optcnn_layerwise_netns: needs root, tc and a python ($py) that imports layerps"
  exit 2
fi
if [ $((batch % devices)) -ne 0 ]; then echo "optcnn_layerwise_netns: BATCH must divide by D"; exit 2; fi
bin=$("$py" -c 'import layerps; print(layerps.bin_dir())')
mkdir -p "$out/raw"
ex=$here/examples/python/layerwise_cnn.py
tag=$$
. "$here/bench/netns_star.sh"
cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  star_down lpsL "$devices"
}
trap cleanup EXIT
star_up lpsL 10.237.0 "$devices" "${rate}mbit" || exit 1
{
  echo "command: bench/optcnn_layerwise_netns.sh $rate $devices $batch $steps $repeats OUT $model"
  echo "commit: $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo ' (with local changes)')"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%FT%TZ)"
} >"$out/header.txt"

"$py" "$ex" --model "$model" --write_profile "$out/profile.json" || exit 1
flops=$("$py" - "$here/examples/python" "$out/profile.json" "$model" $((batch / devices)) <<'EOF'
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import torch.nn.functional as F
from layerwise_cnn import make
torch.set_num_threads(1)
model, sample = make(sys.argv[3], 0)
prof = json.load(open(sys.argv[2]))
b = int(sys.argv[4])
x, y = torch.randn((b,) + sample), torch.randint(0, 10, (b,))
times = []
for i in range(8):
    t0 = time.perf_counter()
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    times.append(time.perf_counter() - t0)
t = sorted(times[2:])[len(times[2:]) // 2]
print(f"{3 * sum(l['flops_per_sample'] for l in prof['layers']) * b / t:.4g}")
EOF
)
[ -n "$flops" ] || { echo "optcnn_layerwise_netns: calibration failed"; exit 1; }
echo "calibrated device rate: $flops FLOP/s" >>"$out/header.txt"
plan=("$bin/layerps-plan" --model="$out/profile.json" --workers="$devices" --servers=1 --batch=$((batch / devices))
      --bandwidth="${rate}Mbit" --worker_flops="$flops" --strategy=optcnn)
echo "plan: ${plan[*]#$bin/}" >>"$out/header.txt"
"${plan[@]}" --json >"$out/report.json" || exit 1
"${plan[@]}" >"$out/report.txt" || exit 1
cat "$out/header.txt" "$out/report.txt"

common=(--token=bench --heartbeat_interval_ms=500 --heartbeat_timeout_ms=60000)
run() {  # run STRATEGY ROUND
  local s=$1 k=$2 addr p pids=() status=0
  rm -f "$out/raw/addr"
  ip netns exec "lpsL0_$tag" "$bin/layerps-scheduler" --scheduler=tcp://0.0.0.0:0 --advertise_host=10.237.0.1 \
    --num_servers=0 --num_workers="$devices" --address_file="$out/raw/addr" --run_timeout_s=3600 "${common[@]}" \
    >"$out/raw/scheduler-$s-$k.log" 2>&1 &
  for _ in $(seq 100); do [ -s "$out/raw/addr" ] && break; sleep 0.1; done
  addr=$(cat "$out/raw/addr")
  for m in $(seq 0 $((devices - 1))); do
    ip netns exec "lpsL${m}_$tag" env LAYERPS_SCHEDULER="$addr" LAYERPS_TOKEN=bench LAYERPS_BIND=tcp://0.0.0.0:0 \
      LAYERPS_ADVERTISE_HOST="10.237.0.$((m + 1))" LAYERPS_RANK="$m" LAYERPS_HEARTBEAT_INTERVAL_MS=500 \
      LAYERPS_HEARTBEAT_TIMEOUT_MS=60000 LAYERPS_CONNECT_TIMEOUT_MS=120000 LAYERPS_REQUEST_TIMEOUT_MS=1800000 \
      GLOG_minloglevel=2 "$py" "$ex" --model "$model" --report "$out/report.json" --strategy "$s" \
      --batch "$batch" --steps "$steps" --json "$out/raw/$s-$k-{rank}.json" >"$out/raw/worker$m-$s-$k.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  wait
  if [ $status -ne 0 ]; then
    echo "optcnn_layerwise_netns: $s (round $k) failed"
    tail -n 5 "$out"/raw/*-"$s"-"$k".log
    exit 1
  fi
  cat "$out"/raw/worker*-"$s"-"$k".log
}

for k in $(seq 1 "$repeats"); do
  "$py" "$ex" --model "$model" --local --batch "$batch" --steps "$steps" --json "$out/raw/local-$k-0.json" \
    | tee "$out/raw/local-$k.log"
  for s in ${RUNS:-optcnn data model owt}; do run "$s" "$k"; done
done

"$py" - "$out" "$repeats" "$devices" ${RUNS:-optcnn data model owt} <<'EOF' | tee "$out/summary.txt"
import json, statistics, sys
out, repeats, devices, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
report = json.load(open(f"{out}/report.json"))
by = {"optcnn": report["optcnn"], **{b["name"]: b for b in report["baselines"]}}
def mean(v): return sum(v) / len(v)
local = [mean(json.load(open(f"{out}/raw/local-{k}-0.json"))["step_seconds"]) for k in range(1, repeats + 1)]
print(f"one process, one thread: {statistics.median(local):.3f} s/step (rounds {', '.join(f'{v:.3f}' for v in local)})")
print(f"{'strategy':8} {'predicted s':>11} {'measured s':>10} {'spread':>15} {'meas/pred':>9} {'pred MB':>8} "
      f"{'sent MB':>8} {'counted MB':>10} {'vs optcnn':>9}  configurations")
rows = {}
for s in runs:
    per_round, sent, counted = [], [], []
    for k in range(1, repeats + 1):
        ranks = [json.load(open(f"{out}/raw/{s}-{k}-{r}.json")) for r in range(devices)]
        per_round.append(max(mean(r["step_seconds"]) for r in ranks))
        sent.append(sum(r["remote_bytes_sent_per_step"] for r in ranks))
        counted.append(sum(r["exchange_bytes"] + r["sync_bytes"] for r in ranks))
    rows[s] = (statistics.median(per_round), per_round, statistics.median(sent), statistics.median(counted), ranks[0]["configs"])
for s, (t, rounds, sent, counted, configs) in rows.items():
    p = by[s]
    conf = " ".join(f"{n}={c.replace('c1', '').replace('h1', '').replace('w1', '').replace('n1', '') or '1'}"
                    for n, c in configs.items() if not n.startswith(("relu", "flat")))
    print(f"{s:8} {p['step_time_s']:11.3f} {t:10.3f} {min(rounds):6.3f}-{max(rounds):6.3f} {t / p['step_time_s']:9.2f} "
          f"{p['bytes_per_step'] / 1e6:8.2f} {sent / 1e6:8.2f} {counted / 1e6:10.2f} "
          f"{t / rows['optcnn'][0] if 'optcnn' in rows else float('nan'):8.2f}x  {conf}")
print("(measured: median over rounds of the slowest rank's mean step; spread: the rounds' min-max; sent MB: bytes "
      "per step that left the machines, headers included; counted MB: the executor's own count of exchanged and "
      "all-reduced bytes, which the cost model predicts; vs optcnn: measured step over the search's pick's)")
EOF
