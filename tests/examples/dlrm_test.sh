#!/usr/bin/env bash
# DLRM in C++ (examples/cpp/dlrm.cc) end to end under layerps-launch, with small MLPs and
# tables so that it takes seconds:
#  1. 2 workers and 1 server, bsp tables: the run says it finished, the loss falls and the
#     held-out AUC beats chance;
#  2. 1 worker on the same global batch: the same loss at every step (within rounding:
#     the all-reduce and the servers' sum of the workers' pushes add in another order);
#  3. 2 workers and 2 servers, async tables: one fused pull and one fused push per server
#     and step (4 messages to the servers per step, by the worker's traffic counters).
# Usage: dlrm_test.sh TOOLS_DIR DLRM
set -euo pipefail
tools=$1
prog=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
small=(--bottom=32,16 --top=32,16 --emb_dim=8 --rows=2000 --eval_samples=2048 --print_every=1)
launch() {  # launch SERVERS WORKERS OUT DLRM_FLAGS...
  local servers=$1 workers=$2 out=$3
  shift 3
  "$tools/layerps-launch" --num_servers="$servers" --num_workers="$workers" --timeout_s=120 --quiet_daemons -- \
    "$prog" "${small[@]}" "$@" | tee "$work/$out"
}
losses() { awk '/step [0-9]+: loss/ { print $NF }' "$work/$1"; }

launch 1 2 two --steps=40 --batch=64
grep -q "^\[worker 0\] dlrm: finished 40 steps" "$work/two"
# It learned: the mean of the last 5 steps' losses is below the first step's by 0.05.
losses two | awk 'NR == 1 { first = $1 } { l[NR] = $1 } END {
  m = (l[NR] + l[NR-1] + l[NR-2] + l[NR-3] + l[NR-4]) / 5
  if (NR != 40 || !(m < first - 0.05)) { print "the loss did not fall: " first " -> " m > "/dev/stderr"; exit 1 } }'
awk '/held out/ { a = $NF } END { if (!(a > 0.6)) { print "held-out AUC " a " <= 0.6" > "/dev/stderr"; exit 1 } }' \
  "$work/two"

launch 1 1 one --steps=40 --batch=128
paste <(losses one) <(losses two) | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
  END { printf "1 worker vs 2 workers: %d steps, largest loss difference %.1e\n", n, worst
        if (n != 40 || worst > 1e-4) exit 1 }'

launch 2 2 async --steps=20 --batch=64 --sync=async
grep -q "^\[worker 0\] dlrm: finished 20 steps" "$work/async"
grep -q "= 4.0 messages to 2 server(s)" "$work/async"
echo "dlrm_test: OK"
