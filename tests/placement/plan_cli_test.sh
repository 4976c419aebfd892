#!/usr/bin/env bash
# layerps-plan from the outside: --help, the choices it prints, the files it writes, and
# every bad input exiting 2 with exactly one line on stderr.
# Usage: plan_cli_test.sh PATH/TO/layerps-plan
set -u
plan=$1
work=$(mktemp -d /tmp/layerps-plan-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# expect_bad "what it is" ARGS...: exit 2, one line on stderr, nothing on stdout.
expect_bad() {
  local what=$1
  shift
  "$plan" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$work/err")
  if [ $rc -ne 2 ]; then fail "$what: exit $rc, expected 2 ($*)"; fi
  if [ "$lines" -ne 1 ]; then fail "$what: $lines lines on stderr ($*)"; cat "$work/err"; fi
  if [ -s "$work/out" ]; then fail "$what: wrote to stdout ($*)"; fi
  echo "ok (exit $rc): $what: $(cat "$work/err")"
}

# expect_ok "what" PATTERN ARGS...: exit 0 and PATTERN (grep -E) in stdout.
expect_ok() {
  local what=$1 pattern=$2
  shift 2
  "$plan" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne 0 ]; then fail "$what: exit $rc ($*): $(cat "$work/err")"; return; fi
  if ! grep -Eq -- "$pattern" "$work/out"; then fail "$what: no /$pattern/ in output ($*)"; return; fi
  echo "ok: $what"
}

expect_ok "help lists the strategies" "park +FC suffix" --help
expect_ok "help lists the flags" "--bandwidth" --help
expect_ok "vgg16 picks a cut at fc6" "^\* park +fc6" --model=vgg16 --workers=4 --batch=32 --servers=2 --bandwidth=1Gbit
expect_ok "resnet50 picks no cut" "^Chosen: (uniform|balanced|allreduce)" --model=resnet50 --workers=4 --batch=32 --servers=2 --bandwidth=1Gbit
expect_ok "resnet50 park row has no cut" "^ +park +none" --model=resnet50 --nolayers
expect_ok "forced cut ratio" "park +fc +.* 0\.9[12][0-9] " --model=resnet50 --cut=fc --strategy=park --nolayers
expect_ok "the ratio column says what it divides" "PS/uni" --model=vgg16 --nolayers
# allreduce uses no server: "-" in the PS MB, PS/uni and server MB columns, numbers elsewhere.
expect_ok "allreduce has no PS columns" "^ +allreduce +none +worker [0-9]+ +[0-9.]+ +- +- +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +-$" --model=vgg16 --nolayers
expect_ok "uniform keeps its PS columns" "^[ *] uniform +none +server [0-9]+ +[0-9.]+ +[0-9.]+ +1\.000 .* [0-9.]+$" --model=vgg16 --nolayers
expect_ok "help prints doubles short" "min_cut_gain \(double, default 0\.1\)" --help
expect_ok "help points at the strategies above" "strategies listed above" --help
expect_ok "conv suffixes on request" "^[ *] park +layer" --model=resnet50 --bandwidth=1Gbit --park_conv_suffix --nolayers
expect_ok "per-layer table" "fc6 +fc +102,764,544" --model=vgg16 --strategy=park
expect_ok "json comparison" "\"chosen\": \"park\"" --model=alexnet --json
expect_ok "json single plan" "\"strategy\": \"stanza\"" --model=alexnet --json --strategy=stanza

# Files: the profile written and read back gives the same model; the plan is JSON.
expect_ok "write files" "Chosen" --model=inception_v3 --write_profile="$work/inc.json" --write_plan="$work/plan.json" --nolayers
grep -q '"format": "layerps.model_profile"' "$work/inc.json" || fail "profile file"
grep -q '"format": "layerps.plan"' "$work/plan.json" || fail "plan file"
expect_ok "profile file as --model" "23,834,568 parameters" --model="$work/inc.json" --nolayers
printf '{"servers": 3, "workers": 6, "bandwidth": "1Gbit"}' >"$work/cluster.json"
expect_ok "cluster file" "6 workers \(1\.000 Gbit/s.*3 servers" --model=bigfc --cluster="$work/cluster.json" --nolayers
expect_ok "flags override the cluster file" "8 workers.*3 servers" --model=bigfc --cluster="$work/cluster.json" --workers=8 --nolayers

printf '{"name": "m", "layers": [' >"$work/broken.json"
printf '{"name": "m", "layers": [{"name": "a", "kind": "fc", "param_bytes": -1}]}' >"$work/neg.json"
printf '{"name": "m", "layers": [{"name": "a", "kind": "rnn"}]}' >"$work/kind.json"
printf '{"name": "m", "layers": [{"name": "a", "kind": "fc", "inputs": ["b"]}, {"name": "b", "kind": "fc", "inputs": ["a"]}]}' >"$work/cycle.json"
printf '{"servers": 0}' >"$work/badcluster.json"

expect_bad "no model" --workers=4
expect_bad "unknown model" --model=lenet
expect_bad "unreadable file" --model="$work/missing.json"
expect_bad "bad JSON" --model="$work/broken.json"
expect_bad "negative size" --model="$work/neg.json"
expect_bad "unknown kind" --model="$work/kind.json"
expect_bad "cycle" --model="$work/cycle.json"
expect_bad "W=0" --model=vgg16 --workers=0
expect_bad "S=-1" --model=vgg16 --servers=-1
expect_bad "b=0" --model=vgg16 --batch=0
expect_bad "bad bandwidth" --model=vgg16 --bandwidth=fast
expect_bad "zero bandwidth" --model=vgg16 --bandwidth=0Gbit
expect_bad "bad latency" --model=vgg16 --latency=soon
expect_bad "bad flops" --model=vgg16 --worker_flops=lots
expect_bad "bad memory" --model=vgg16 --server_memory=big
expect_bad "unknown strategy" --model=vgg16 --strategy=optimal
expect_bad "unknown cut layer" --model=vgg16 --cut=fc9
expect_bad "cut inside a block" --model=inception_v3 --cut=Mixed_5b.branch5x5_2
expect_bad "dedicated server out of range" --model=vgg16 --servers=2 --dedicated_servers=2
expect_bad "bad dedicated list" --model=vgg16 --dedicated_servers=a,b
expect_bad "too many FC nodes" --model=vgg16 --servers=2 --fc_nodes=3 --strategy=stanza
expect_bad "unreadable cluster" --model=vgg16 --cluster="$work/missing.json"
expect_bad "bad cluster" --model=vgg16 --cluster="$work/badcluster.json"
expect_bad "unknown flag" --model=vgg16 --wrokers=4
expect_bad "non-integer flag" --model=vgg16 --workers=four
expect_bad "bad min_cut_gain" --model=vgg16 --min_cut_gain=1.5
expect_bad "bad backward_factor" --model=vgg16 --backward_factor=-1
expect_bad "stray argument" --model=vgg16 extra
# The documented maxima: every strategy at 65536 workers and servers (stanza's FC node
# index overflowed int there), and optcnn refused past its 1024 devices at once.
expect_ok "every strategy at the maxima" "^Chosen: " --model=vgg16 --workers=65536 --servers=65536
expect_bad "optcnn past its device limit" --model=vgg16 --strategy=optcnn --workers=2048
if ! grep -q "at most 1024" "$work/err"; then fail "optcnn's limit is not named: $(cat "$work/err")"; fi

if [ $fails -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "all passed"
