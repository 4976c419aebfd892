#!/usr/bin/env bash
# Receiving in the waiting thread (WorkerOptions::wait_receive_us), old build against new
# inside one run: ROUNDS rounds, each running, in an order that alternates per round,
#   old      layerps-bench of the build before the change (OLD; requests complete through
#            callbacks: the bench's one-in-flight loop had no Worker::Wait then);
#   new-cb   the new build with --nowait_one (the same callback loop: no regression?);
#   new-off  the new build waiting with Worker::Wait, LAYERPS_WAIT_RECEIVE_US=0 (the receive
#            thread hands the reply over, as before);
#   new      the new build waiting with Worker::Wait, wait_receive_us at its default;
# on 4 KiB push-pull with 1 in flight against raw ZeroMQ round trips (the small-message
# target), plus, unless CASES=small, 256 KiB push/pull and 4 KiB/256 KiB push-pull with 8
# in flight (nothing there is received in a wait: no regression).
# Every run's output goes to OUT/ab.txt; OUT/summary.txt has the case lines.
# Usage: bash bench/wait_receive_ab.sh OLD_BENCH NEW_BENCH [ROUNDS=3] [OUT=bench/results/wait-receive]
set -uo pipefail
if [ $# -lt 2 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -lt 2 ] && [ "${1:-}" != --help ] && [ "${1:-}" != -h ] && exit 2
  exit 0
fi
OLD=$1
NEW=$2
ROUNDS=${3:-3}
OUT=${4:-bench/results/wait-receive}
for b in "$OLD" "$NEW"; do
  [ -x "$b" ] || { echo "wait_receive_ab.sh: $b is not an executable" >&2; exit 2; }
done
mkdir -p "$OUT"
export GLOG_minloglevel=1
{
  echo "wait_receive_ab.sh $*"
  echo "machine: $(hostname), $(nproc) cores, $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo +changes)"
} | tee "$OUT/summary.txt" > "$OUT/ab.txt"
CASES=${CASES:-all}
run() {  # label bench [flag] env...
  local label=$1 bin=$2 flag=$3
  shift 3
  local sets=("--ops=pushpull --sizes=4K --inflight=1")
  [ "$CASES" = small ] || sets+=("--ops=pushpull --sizes=4K,256K --inflight=8" "--ops=push,pull --sizes=256K --inflight=1,8")
  for args in "${sets[@]}"; do
    echo "== $label $flag $args ($(date -u +%H:%M:%S))" | tee -a "$OUT/ab.txt" >> "$OUT/summary.txt"
    # shellcheck disable=SC2086
    env "$@" timeout 300 "$bin" $args $flag --repeats=5 --seconds=0.3 --transports=tcp 2>&1 |
      tee -a "$OUT/ab.txt" | grep -E "^(layerps|raw-zmq) " >> "$OUT/summary.txt"
  done
}
for r in $(seq "$ROUNDS"); do
  echo "== round $r" | tee -a "$OUT/ab.txt" >> "$OUT/summary.txt"
  order=(old new-cb new-off new)
  [ $((r % 2)) = 0 ] && order=(new new-off new-cb old)
  for v in "${order[@]}"; do
    case $v in
      old) run old "$OLD" "" X=1 ;;
      new-cb) run new-cb "$NEW" --nowait_one X=1 ;;
      new-off) run new-off "$NEW" "" LAYERPS_WAIT_RECEIVE_US=0 ;;
      new) run new "$NEW" "" X=1 ;;
    esac
  done
done
echo "wait_receive_ab.sh: done at $(date -u +%H:%M:%S)" | tee -a "$OUT/summary.txt"
