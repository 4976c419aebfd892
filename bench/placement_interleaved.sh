#!/usr/bin/env bash
# Repeated, interleaved placement runs (issue 43 item 2): for each repeat, uniform, park,
# stanza with one FC node and stanza with two run one after the other on the same shaped
# link (bench/placement_netns.sh, STEPS global batches each, the first left out of the
# median), then the predictions once (bench/placement_predict.py --fc_nodes 2: the layer
# times, FLOP/s and loopback rate it measured are in its output). The summary gives each
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
  --workers 4 --batch 8 --fc_nodes 2 >> "$log" 2>&1 || echo "(prediction failed)" >> "$log"
python3 - "$log" <<'PY' | tee -a "$log"
import collections, re, statistics, sys
runs = collections.defaultdict(list)
predicted = {}  # the prediction table's rows for the strategies run here
auto_step = None  # auto's predicted step (its pick is the row with that prediction)
for line in open(sys.argv[1]):
    m = re.match(r"(uniform|allreduce|park|stanza2|stanza)\s+.*median ([0-9.]+) s/step", line)
    if m:
        runs[m.group(1)].append(float(m.group(2)))
    m = re.match(r"\| auto \| .* \| ([0-9.]+) \| [0-9.]+ \|$", line)
    if m:
        auto_step = float(m.group(1))
    m = re.match(r"\| (uniform|allreduce|park at \S+|stanza, 1 FC node\(s\)|stanza, 2 FC node\(s\)) \| .* \| ([0-9.]+) \| [0-9.]+ \|$", line)
    if m:
        key = {"stanza, 1 FC node(s)": "stanza", "stanza, 2 FC node(s)": "stanza2"}.get(
            m.group(1), "park" if m.group(1).startswith("park at") else m.group(1))
        predicted[key] = float(m.group(2))
print("# summary: median of the repeats' medians [min, max], s/step; speed-up = uniform / strategy")
u = statistics.median(runs["uniform"]) if runs["uniform"] else None
for k in ("uniform", "allreduce", "park", "stanza", "stanza2"):
    v = runs.get(k)
    if not v:
        continue
    med = statistics.median(v)
    sp = f"  {u / med:.2f}x uniform" if u else ""
    pr = f"  predicted {predicted[k]:.3f}, measured/predicted {med / predicted[k]:.2f}" if k in predicted else ""
    print(f"{k:9} {med:8.3f} [{min(v):.3f}, {max(v):.3f}] over {len(v)} repeats{sp}{pr}")
both = [k for k in runs if k in predicted]
if both:
    fast_m = min(both, key=lambda k: statistics.median(runs[k]))
    fast_p = min(both, key=lambda k: predicted[k])
    gap = statistics.median(runs[fast_p]) / statistics.median(runs[fast_m])
    print(f"fastest measured: {fast_m}; fastest predicted: {fast_p}, {gap:.2f}x the fastest measured step "
          f"({'within' if gap <= 1.05 else 'NOT within'} 5%)")
    picked = [k for k in both if auto_step is not None and abs(predicted[k] - auto_step) < 5e-4]
    if picked:
        gap = statistics.median(runs[picked[0]]) / statistics.median(runs[fast_m])
        print(f"auto picks {picked[0]} (predicted {auto_step:.3f}), {gap:.2f}x the fastest measured step "
              f"({'within' if gap <= 1.05 else 'NOT within'} 5%)")
    elif auto_step is not None:
        print(f"auto's pick (predicted {auto_step:.3f}) was not run here")
PY
