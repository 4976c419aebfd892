#!/usr/bin/env bash
# A/B of the apply lanes on this machine: the build before them (old), and the build with
# them at apply_threads=0 (receive thread only) and at the default (-1: 1 lane on 2 cores),
# interleaved, 3 rounds.
set -euo pipefail
out=${1:?out dir}
OLD=/tmp/old/build/bench/layerps-bench
NEW=/work/main/build/bench/layerps-bench
args=(--modes=dense --ops=push,pull,pushpull --sizes=4K,256K,4M --inflight=8 --topologies=1x1,2x2
      --repeats=5 --seconds=0.3 --baseline=false --progress=false)
for round in 1 2 3; do
  for v in old lanes0 lanes_default; do
    case $v in
      old) bin=$OLD; extra=() ;;
      lanes0) bin=$NEW; extra=(--apply_threads=0) ;;
      lanes_default) bin=$NEW; extra=() ;;
    esac
    echo "== round $round $v: $bin ${args[*]} ${extra[*]}"
    "$bin" "${args[@]}" "${extra[@]}" --csv="$out/r$round-$v.csv" 2>&1 | grep -v "^I2026\|^W2026"
  done
done
