#!/usr/bin/env bash
# LayerPS's sparse pull against ps-lite's, side by side: ROUNDS rounds, each running (in an
# order that alternates per round)
#   pslite    pslite-sparse-bench (bench/pslite/build.sh): a ps-lite scheduler, server and
#             worker, three processes over loopback tcp;
#   layerps   layerps-bench --join under layerps-launch: a LayerPS scheduler, server and
#             worker, three processes over loopback tcp;
# on the same case: OP (pull) of KEYS keys (100000) of DIM floats (16) with INFLIGHT (8)
# requests in flight, 4 batches of uniform keys from [0, 10M), 5 repeats of 0.3 s.
# Every run's output goes to OUT/runs.txt; OUT/summary.txt has one line per run (median
# keys/s) and, at the end, the median over rounds of each and their ratio.
# Usage: bash bench/pslite_sparse_ab.sh PSLITE_BENCH BUILD_DIR [ROUNDS=5] [OUT=bench/results/pslite-sparse]
#   PSLITE_BENCH: the binary bench/pslite/build.sh printed; BUILD_DIR: LayerPS's build
#   (bench/layerps-bench, tools/layerps-launch). Env: OP, KEYS, DIM, INFLIGHT; SORTED=1
#   gives LayerPS the batches ps-lite gets (distinct keys, ascending: --sorted_keys);
#   by default LayerPS's batches are in random order with their few repeats. BASE=DIR adds
#   a second LayerPS build (an older commit's) as a third side, "layerps-base", in every
#   round: old and new compared within one run.
set -uo pipefail
if [ $# -lt 2 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -lt 2 ] && [ "${1:-}" != --help ] && [ "${1:-}" != -h ] && exit 2
  exit 0
fi
PSL=$1
BUILD=$2
ROUNDS=${3:-5}
OUT=${4:-bench/results/pslite-sparse}
OP=${OP:-pull}
KEYS=${KEYS:-100000}
DIM=${DIM:-16}
INFLIGHT=${INFLIGHT:-8}
SORTED=${SORTED:-0}
BASE=${BASE:-}
[ -x "$PSL" ] || { echo "pslite_sparse_ab.sh: $PSL is not an executable" >&2; exit 2; }
for d in "$BUILD" ${BASE:+"$BASE"}; do
  for b in bench/layerps-bench tools/layerps-launch; do
    [ -x "$d/$b" ] || { echo "pslite_sparse_ab.sh: no $d/$b" >&2; exit 2; }
  done
done
mkdir -p "$OUT"
export GLOG_minloglevel=1
{
  echo "pslite_sparse_ab.sh $* (OP=$OP KEYS=$KEYS DIM=$DIM INFLIGHT=$INFLIGHT SORTED=$SORTED)"
  echo "machine: $(hostname), $(nproc) cores, $(date -u +%FT%TZ)"
  echo "layerps commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo +changes)"
  echo "ps-lite commit: $(cat "$(dirname "$PSL")/PSLITE_COMMIT" 2>/dev/null || echo unknown)"
  [ -n "$BASE" ] && echo "layerps-base: $BASE ($(git -C "$BASE" rev-parse --short HEAD 2>/dev/null || echo unknown))"
} | tee "$OUT/summary.txt" > "$OUT/runs.txt"
common=(--keys="$KEYS" --dim="$DIM" --inflight="$INFLIGHT" --key_batches=4 --key_space=10000000
        --repeats=5 --seconds=0.3)

run_pslite() {
  local port=$((20000 + RANDOM % 20000)) pids=() log
  log=$(mktemp)
  export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port
  export DMLC_NODE_HOST=127.0.0.1 DMLC_INTERFACE=lo
  DMLC_ROLE=scheduler timeout 120 "$PSL" "${common[@]}" --op="$OP" >/dev/null 2>&1 & pids+=($!)
  DMLC_ROLE=server timeout 120 "$PSL" "${common[@]}" --op="$OP" >/dev/null 2>&1 & pids+=($!)
  DMLC_ROLE=worker timeout 120 "$PSL" "${common[@]}" --op="$OP" >"$log" 2>&1
  local rc=$?
  wait "${pids[@]}" 2>/dev/null
  cat "$log" >> "$OUT/runs.txt"
  local med
  med=$(grep -o "median [0-9.]*M" "$log" | grep -o "[0-9.]*" || true)
  echo "pslite rc=$rc median ${med:-?}M keys/s" | tee -a "$OUT/runs.txt" >> "$OUT/summary.txt"
  rm -f "$log"
}

# run_layerps [BUILD_DIR LABEL]: the build under test, or another one (BASE).
run_layerps() {
  local build=${1:-$BUILD} label=${2:-layerps} log extra=()
  log=$(mktemp)
  [ "$SORTED" = 1 ] && extra=(--sorted_keys)
  timeout 300 "$build/tools/layerps-launch" --num_servers=1 --num_workers=1 -- \
    "$build/bench/layerps-bench" --join --modes=sparse --ops="$OP" --sparse_keys="$KEYS" \
    --dim="$DIM" --inflight="$INFLIGHT" --key_batches=4 --key_space=10000000 --repeats=5 \
    --seconds=0.3 --nobaseline --dist=uniform "${extra[@]}" >"$log" 2>&1
  local rc=$?
  cat "$log" >> "$OUT/runs.txt"
  # The case line (the worker's summary table): after "inflight=K" come bytes, GB/s med,
  # [min, max], ops/s med and keys/s med.
  local line med
  line=$(grep -E "layerps .*sparse $OP .*inflight=$INFLIGHT " "$log" | grep -v "eta" | tail -1)
  med=$(echo "$line" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^inflight=/) {print $(i + 6); exit}}')
  echo "$label rc=$rc median ${med:-?} keys/s | $line" | tee -a "$OUT/runs.txt" >> "$OUT/summary.txt"
  rm -f "$log"
}

for r in $(seq "$ROUNDS"); do
  echo "== round $r ($(date -u +%H:%M:%S))" | tee -a "$OUT/runs.txt" >> "$OUT/summary.txt"
  if [ -z "$BASE" ]; then
    if [ $((r % 2)) = 1 ]; then run_pslite; run_layerps; else run_layerps; run_pslite; fi
  else  # three sides: each goes first, second and third in turn
    case $((r % 3)) in
      1) run_pslite; run_layerps; run_layerps "$BASE" layerps-base ;;
      2) run_layerps; run_layerps "$BASE" layerps-base; run_pslite ;;
      0) run_layerps "$BASE" layerps-base; run_pslite; run_layerps ;;
    esac
  fi
done
python3 - "$OUT/summary.txt" <<'EOF' | tee -a "$OUT/summary.txt"
import re, statistics, sys
# Per round: each side's median keys/s; then the medians over rounds and each round's
# ratio to ps-lite (a ratio is only taken inside one round).
rounds, cur = [], None
unit = {"M": 1e6, "K": 1e3, "": 1}
for line in open(sys.argv[1]):
    if line.startswith("== round"):
        cur = {}
        rounds.append(cur)
        continue
    m = re.match(r"pslite rc=0 median ([0-9.]+)M", line)
    if m and cur is not None: cur["ps-lite"] = float(m.group(1)) * 1e6
    m = re.match(r"(layerps|layerps-base) rc=0 median ([0-9.]+)([MK]?) ", line)
    if m and cur is not None: cur[m.group(1)] = float(m.group(2)) * unit[m.group(3)]
sides = [s for s in ("ps-lite", "layerps", "layerps-base") if any(s in r for r in rounds)]
if "ps-lite" not in sides or "layerps" not in sides:
    print("medians over rounds: a side has no successful run")
    sys.exit(0)
parts = []
for s in sides:
    v = [r[s] for r in rounds if s in r]
    parts.append(f"{s} {statistics.median(v)/1e6:.2f}M keys/s ({len(v)} runs)")
print("medians over rounds: " + ", ".join(parts))
for s in sides[1:]:
    ratios = [r[s] / r["ps-lite"] for r in rounds if s in r and "ps-lite" in r]
    if ratios:
        print(f"{s} / ps-lite per round: " + " ".join(f"{x:.2f}" for x in ratios) +
              f"; median {statistics.median(ratios):.2f}")
if "layerps-base" in sides:
    ratios = [r["layerps"] / r["layerps-base"] for r in rounds
              if "layerps" in r and "layerps-base" in r]
    if ratios:
        print("layerps / layerps-base per round: " + " ".join(f"{x:.2f}" for x in ratios) +
              f"; median {statistics.median(ratios):.2f}")
EOF
