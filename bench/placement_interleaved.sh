#!/usr/bin/env bash
# Repeated, interleaved placement runs (issue 43 item 2): for each repeat, uniform, park,
# stanza with one FC node and stanza with two run one after the other on the same shaped
# link (bench/placement_netns.sh, STEPS global batches each, the first left out of the
# median), then the predictions once (bench/placement_predict.py: the FLOP/s probe's
# reading is in its output). The summary gives each strategy's median over the repeats'
# medians and their spread, and park's and stanza's speed-up over uniform (medians).
#
# Usage (root): bench/placement_interleaved.sh RATE MODEL [STEPS=21] [REPEATS=3] [OUT]
#   e.g. bench/placement_interleaved.sh 1gbit alexnet 21 3 bench/results/placement-interleaved-DATE
# W = 4 workers x batch 8, 2 servers, as in bench/PLACEMENT.md.
set -euo pipefail
rate=${1:?RATE}
model=${2:?MODEL}
steps=${3:-21}
repeats=${4:-3}
out=${5:-/tmp/placement-interleaved}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
log=$out/$model-$rate.txt
{
  echo "# $(nproc)-core machine, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$here" rev-parse --short HEAD)"
  echo "# bench/placement_interleaved.sh $rate $model $steps $repeats"
} > "$log"
for rep in $(seq "$repeats"); do
  for variant in uniform park stanza stanza2; do
    echo "## repeat $rep $variant ($(date -u +%H:%M:%S))" >> "$log"
    case $variant in
      stanza2) FC_NODES=2 STRATEGIES=stanza bash "$here/bench/placement_netns.sh" "$rate" 4 8 "$steps" "$model" \
                 | sed 's/^stanza  /stanza2 /' >> "$log" ;;
      *) STRATEGIES=$variant bash "$here/bench/placement_netns.sh" "$rate" 4 8 "$steps" "$model" >> "$log" ;;
    esac
  done
done
for fc in 1 2; do
  echo "## prediction, fc_nodes $fc" >> "$log"
  "$here/.venv/bin/python" "$here/bench/placement_predict.py" --model "$model" --rate "$rate" \
    --workers 4 --batch 8 --fc_nodes "$fc" >> "$log" 2>&1 || echo "(prediction failed)" >> "$log"
done
python3 - "$log" <<'PY' | tee -a "$log"
import collections, re, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(uniform|park|stanza2|stanza)\s+.*median ([0-9.]+) s/step", line)
    if m:
        runs[m.group(1)].append(float(m.group(2)))
print("# summary: median of the repeats' medians [min, max], s/step; speed-up = uniform / strategy")
u = statistics.median(runs["uniform"]) if runs["uniform"] else None
for k in ("uniform", "park", "stanza", "stanza2"):
    v = runs.get(k)
    if not v:
        continue
    med = statistics.median(v)
    sp = f"  {u / med:.2f}x uniform" if u else ""
    print(f"{k:8} {med:8.3f} [{min(v):.3f}, {max(v):.3f}] over {len(v)} repeats{sp}")
PY
