#!/usr/bin/env bash
# bench/hybrid_netns.sh REPEATS times, the modes' order rotating each repeat (so that no
# mode always runs first, on a cold page cache, or last), every run's output in one file.
#
# Usage (root): bench/hybrid_netns_repeats.sh OUT REPEATS RATE M STEPS [EXTRA example args...]
#   OUT: the output file (appended to); MODES (default "hybrid ps allgather") in the
#   environment, as bench/hybrid_netns.sh takes it. Ends with one line per mode: the
#   median and range of its ms/step over the repeats.
# Example: the Parallax-sized vocabulary (800k rows x 512, m = 8, 1 Gbit/s links):
#   bash bench/hybrid_netns_repeats.sh bench/results/X.txt 3 1gbit 8 52 --vocab 800000 --dim 512
set -u
if [ $# -lt 5 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = --help ] || [ "${1:-}" = -h ]
  exit $?
fi
out=$1 repeats=$2 rate=$3 machines=$4 steps=$5
shift 5
here=$(cd "$(dirname "$0")/.." && pwd)
read -r -a modes <<< "${MODES:-hybrid ps allgather}"
{
  echo "# bench/hybrid_netns_repeats.sh $out $repeats $rate $machines $steps $* (MODES=${modes[*]})"
  echo "# machine: $(hostname), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB memory," \
       "swap $(free -g | awk '/Swap:/ {print $2}') GiB; commit $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo +changes); $(date -u +%FT%TZ)"
} >> "$out"
n=${#modes[@]}
for r in $(seq 0 $((repeats - 1))); do
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${modes[$(((i + r) % n))]}"); done
  echo "== repeat $((r + 1)) ($(date -u +%H:%M:%S)): ${order[*]}" >> "$out"
  MODES="${order[*]}" bash "$here/bench/hybrid_netns.sh" "$rate" "$machines" "$steps" "$@" >> "$out" 2>&1 ||
    echo "repeat $((r + 1)) failed" >> "$out"
done
python3 - "$out" <<'EOF' | tee -a "$out"
import re, statistics, sys
runs = {}
lines = open(sys.argv[1]).read().split("\n")
start = max(i for i, l in enumerate(lines) if l.startswith("# bench/hybrid_netns_repeats.sh"))
for line in lines[start:]:  # this invocation's runs only
    m = re.match(r"(\w+)\s+([0-9.]+) ms/step", line)
    if m:
        runs.setdefault(m.group(1), []).append(float(m.group(2)))
for mode, v in runs.items():
    print(f"summary {mode}: median {statistics.median(v):.1f} ms/step over {len(v)} runs"
          f" ({min(v):.1f}-{max(v):.1f})")
EOF
