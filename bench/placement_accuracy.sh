#!/usr/bin/env bash
# Accuracy of a distributed training against one process: trains
# examples/python/placement_cnn.py twice with the same seed, global batches and learning
# rate, once in one process (--local) and once with STRATEGY (uniform: W data-parallel
# workers; park: W conv workers and the PS worker) and 2 servers on this machine
# (layerps.launch, loopback), then prints both per-epoch losses and test accuracies and
# their largest differences.
#
# Usage: bench/placement_accuracy.sh [MODEL=resnet18] [STRATEGY=uniform] [W=4] [BATCH=32]
#                                    [EPOCHS=7] [LR=0.05] [LIMIT=0]
#   MODEL: bigfc, vgg16, alexnet or resnet18 (placement_cnn.py --model); BATCH: the global
#   batch, split over the W (conv) workers; LIMIT: training samples (0: all 1437, 44 global
#   batches of 32 per epoch).
# Needs the Python package installed in .venv (bash scripts/test-python.sh does it).
set -u
model=${1:-resnet18}
strategy=${2:-uniform}
workers=${3:-4}
batch=${4:-32}
epochs=${5:-7}
lr=${6:-0.05}
limit=${7:-0}
here=$(cd "$(dirname "$0")/.." && pwd)
py=$here/.venv/bin/python
if [ ! -x "$py" ]; then
  echo "placement_accuracy: needs $py with the package (bash scripts/test-python.sh)"
  exit 2
fi
work=$(mktemp -d /tmp/layerps-pacc-XXXXXX)
trap 'rm -rf "$work"' EXIT
args=(--model "$model" --epochs "$epochs" --batch "$batch" --lr "$lr" --limit "$limit")
ranks=$workers
[ "$strategy" != uniform ] && ranks=$((workers + 1))
echo "$model: global batch $batch, lr $lr, $epochs epochs; one process, then $strategy with $workers (conv) workers"
start=$(date +%s)
"$py" "$here/examples/python/placement_cnn.py" --local "${args[@]}" --json "$work/local.json" \
  >"$work/local.log" 2>&1 || { echo "placement_accuracy: the one-process run failed"; tail -n 5 "$work/local.log"; exit 1; }
echo "one process: $(( $(date +%s) - start )) s"
start=$(date +%s)
GLOG_minloglevel=2 "$py" -m layerps.launch -s 2 -w "$ranks" --quiet_daemons --timeout_s=7200 -- \
  "$py" "$here/examples/python/placement_cnn.py" --strategy "$strategy" "${args[@]}" --json "$work/dist.json" \
  >"$work/dist.log" 2>&1 || { echo "placement_accuracy: the $strategy run failed"; tail -n 5 "$work/dist.log"; exit 1; }
echo "$strategy: $(( $(date +%s) - start )) s"
"$py" - "$work" "$strategy" <<'EOF'
import json, sys
work, strategy = sys.argv[1], sys.argv[2]
local, dist = (json.load(open(f"{work}/{k}.json"))["history"] for k in ("local", "dist"))
print(f"| epoch | one process: loss | accuracy | {strategy}: loss | accuracy |")
print("|---|---|---|---|---|")
for a, b in zip(local, dist):
    print(f"| {a['epoch']} | {a['loss']:.4f} | {a['accuracy']:.4f} | {b['loss']:.4f} | {b['accuracy']:.4f} |")
dl = max(abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-12) for a, b in zip(local, dist))
da = max(abs(a["accuracy"] - b["accuracy"]) for a, b in zip(local, dist))
k = min(3, len(local))
mean = lambda h: sum(e["accuracy"] for e in h[-k:]) / k
print(f"largest difference over the epochs: loss {dl:.2e} relative, test accuracy {da:.4f}")
print(f"test accuracy after the last epoch: one process {local[-1]['accuracy']:.4f}, {strategy} "
      f"{dist[-1]['accuracy']:.4f}; mean of the last {k} epochs: {mean(local):.4f}, {mean(dist):.4f} "
      f"(difference {abs(mean(local) - mean(dist)):.4f})")
EOF
