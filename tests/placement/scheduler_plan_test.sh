#!/usr/bin/env bash
# layerps-scheduler --plan from the outside: a plan written by layerps-plan is put in
# force; a missing or malformed file, or a plan made for another number of servers,
# exits 2 with one line on stderr.
# Usage: scheduler_plan_test.sh PATH/TO/layerps-plan PATH/TO/layerps-scheduler
set -u
plan=$1
scheduler=$2
work=$(mktemp -d /tmp/layerps-splan-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

"$plan" --model=bigfc --workers=2 --servers=2 --batch=32 --strategy=park \
  --write_plan="$work/park.json" >/dev/null || fail "layerps-plan could not write a plan"
echo '{"strategy": ' >"$work/bad.json"

expect_bad() {
  local what=$1 pattern=$2
  shift 2
  "$scheduler" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne 2 ]; then fail "$what: exit $rc, expected 2"; fi
  if [ "$(wc -l <"$work/err")" -ne 1 ]; then fail "$what: not one line on stderr"; cat "$work/err"; fi
  if ! grep -Eq -- "$pattern" "$work/err"; then fail "$what: no /$pattern/ in: $(cat "$work/err")"; fi
  echo "ok (exit $rc): $what: $(cat "$work/err")"
}

expect_bad "missing plan file" "cannot read plan file" --plan="$work/none.json" --num_servers=2
expect_bad "malformed plan" "plan file" --plan="$work/bad.json" --num_servers=2
expect_bad "plan for another cluster" "made for 2 server\(s\), --num_servers is 3" \
  --plan="$work/park.json" --num_servers=3

# A good plan is put in force before the scheduler listens (it then gives up at the run
# timeout: no node joins this test).
"$scheduler" --plan="$work/park.json" --num_servers=2 --num_workers=2 --run_timeout_s=1 \
  --scheduler=tcp://127.0.0.1:0 >"$work/out" 2>"$work/err"
if grep -q "placement of plan 'park' for bigfc in force" "$work/out"; then
  echo "ok: the plan is in force"
else
  fail "no 'in force' line: $(cat "$work/out")"
fi

if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
