#!/usr/bin/env bash
# Repeated, interleaved placement runs (issue 43 item 2): for each repeat, uniform, park,
# stanza with one FC node and stanza with two run one after the other on the same shaped
# link (bench/placement_netns.sh, STEPS global batches each, the first left out of the
# median), then the predictions once (bench/placement_predict.py --fc_nodes 2: the layer
# times, FLOP/s and loopback rate it measured are in its output and, to predict again
# later, in OUT/MODEL-RATE-profile.json). The summary gives each
# strategy's median over the repeats' medians and their spread, park's and stanza's
# speed-up over uniform (medians), each strategy's measured / predicted step, and whether
# the fastest predicted of the four is the fastest measured or within 5% of it, and the
# same for auto's pick when it was run.
#
# Usage (root): bench/placement_interleaved.sh RATE MODEL [STEPS=21] [REPEATS=3] [OUT]
#   VARIANTS="allreduce stanza2 uniform" (environment) runs those, in that order, instead
#   of the default "uniform park stanza stanza2"; allreduce is data parallelism by the
#   workers' ring all-reduce (placement_cnn.py --strategy=allreduce).
#   UNIFORM_STEPS=N (environment) runs uniform for N global batches instead of STEPS (at
#   100 Mbit/s its step is link-bound and takes minutes; the header records it).
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
  echo "# ${VARIANTS:+VARIANTS=\"$VARIANTS\" }${UNIFORM_STEPS:+UNIFORM_STEPS=$UNIFORM_STEPS }bench/placement_interleaved.sh $rate $model $steps $repeats"
} > "$log"
for rep in $(seq "$repeats"); do
  for variant in ${VARIANTS:-uniform park stanza stanza2}; do
    echo "## repeat $rep $variant ($(date -u +%H:%M:%S))" >> "$log"
    case $variant in
      stanza2) FC_NODES=2 STRATEGIES=stanza bash "$here/bench/placement_netns.sh" "$rate" 4 8 "$steps" "$model" \
                 | sed 's/^stanza  /stanza2 /' >> "$log" ;;
      uniform) STRATEGIES=uniform bash "$here/bench/placement_netns.sh" "$rate" 4 8 "${UNIFORM_STEPS:-$steps}" "$model" >> "$log" ;;
      *) STRATEGIES=$variant bash "$here/bench/placement_netns.sh" "$rate" 4 8 "$steps" "$model" >> "$log" ;;
    esac
  done
done
echo "## prediction" >> "$log"
"$here/.venv/bin/python" "$here/bench/placement_predict.py" --model "$model" --rate "$rate" \
  --workers 4 --batch 8 --fc_nodes 2 --save_profile "$out/$model-$rate-profile.json" >> "$log" 2>&1 \
  || echo "(prediction failed)" >> "$log"
python3 "$here/bench/placement_summary.py" "$log" | tee -a "$log"
