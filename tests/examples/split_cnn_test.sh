#!/usr/bin/env bash
# The C++ split step (examples/cpp/split_cnn.cc) end to end: its profile goes to
# layerps-plan, whose stanza plan (1 and 2 FC nodes) pins the tables through the launcher
# and gives the program its cut and FC nodes; the program checks that the cluster's model
# equals one process trained on the global batch (--check: exit 1 otherwise).
# Usage: split_cnn_test.sh TOOLS_DIR SPLIT_CNN
set -euo pipefail
tools=$1
prog=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$prog" --write_profile="$work/cnn.json"
run() {  # run WORKERS PLAN_ARGS...
  local workers=$1
  shift
  "$tools/layerps-plan" --model="$work/cnn.json" --servers=2 --strategy=stanza "$@" \
    --write_plan="$work/plan.json" >/dev/null
  "$tools/layerps-launch" --num_servers=2 --num_workers="$workers" --timeout_s=240 \
    --plan="$work/plan.json" -- "$prog" --plan="$work/plan.json" --check --steps=40 | tee "$work/out"
  grep -q ": MATCH$" "$work/out"
  # It learned: the last step's loss is below half the first's.
  awk '/step [0-9]+: loss/ { l = $NF; if (first == "") first = l } END { exit !(first != "" && l < first / 2) }' \
    "$work/out"
}
run 3 --workers=2
run 6 --workers=4 --fc_nodes=2
# A plan for other roles than launched is refused, naming what to launch.
if "$tools/layerps-launch" --num_servers=2 --num_workers=4 --timeout_s=60 --plan="$work/plan.json" -- \
    "$prog" --plan="$work/plan.json" >"$work/bad" 2>&1; then
  echo "a plan for 6 workers ran with 4" >&2
  exit 1
fi
grep -q "launch 6 workers, not 4" "$work/bad"
echo "split_cnn_test: OK"
