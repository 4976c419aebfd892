#!/usr/bin/env bash
# Ko et al.'s conditions for the seven algorithms (issue 43 item 6, bench/ALGORITHMS.md):
# bench/algorithms_table.py at a 1 Gbit/s server link, 3 seeds, time to a test accuracy,
# four tables: as is, one worker 2x slower, a learning-rate warm-up with cosine decay, and
# both together. Each table's output (stdout) and JSON go to OUT with a header naming the
# command, the commit and the machine.
#
# Usage (root): bench/algorithms_ko_conditions.sh [OUT=bench/results/algorithms-ko-conditions]
#               [EPOCHS=6] [TARGET=0.95]
#   --help    this text
set -eu
case "${1:-}" in -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/bench/results/algorithms-ko-conditions}
epochs=${2:-6}
target=${3:-0.95}
py=${PY:-$here/.venv/bin/python}
mkdir -p "$out"
common=(--model digits --rate 1gbit --seeds 0,1,2 --epochs "$epochs" --target "$target")
declare -A cond=(
  [plain]=""
  [straggler]="--straggler 3 --slowdown 2"
  [warmup-cosine]="--warmup_steps 50 --decay cosine"
  [straggler-warmup-cosine]="--straggler 3 --slowdown 2 --warmup_steps 50 --decay cosine"
)
for name in plain straggler warmup-cosine straggler-warmup-cosine; do
  # shellcheck disable=SC2206
  extra=(${cond[$name]})
  {
    echo "## command: bench/algorithms_table.py ${common[*]} ${extra[*]} --json $name.json"
    echo "## commit: $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo ' (with local changes)')"
    echo "## machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%FT%TZ)"
  } >"$out/$name.txt"
  "$py" "$here/bench/algorithms_table.py" "${common[@]}" "${extra[@]}" --json "$out/$name.json" | tee -a "$out/$name.txt"
done
