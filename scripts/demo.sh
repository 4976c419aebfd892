#!/usr/bin/env bash
# The main job: builds LayerPS and trains the sparse logistic-regression example on a
# local cluster (1 scheduler, 2 servers, 2 workers) through layerps-launch.
# Extra arguments go to the example (e.g. --steps=1000). A new build directory is configured
# with the benchmarks on (only the demo's targets are built): `cmake --build build --target
# layerps-bench` then builds the benchmark (docs/benchmarks.md). BUILD_DIR=DIR builds in DIR
# instead of build/.
#
# The build's output goes to build/demo-build.log, shown (its last 60 lines) only when the
# build fails; the training's output is shown and kept in build/demo-run.log. The last
# line is the verdict, saying what was checked: "demo: PASSED: ..." (exit 0) or
# "demo: FAILED: ..." (exit non-zero).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh core
B="${BUILD_DIR:-build}"
mkdir -p "$B"
BUILD_LOG="$B/demo-build.log"
RUN_LOG="$B/demo-run.log"
fail() {
  echo "demo: FAILED: $*" >&2
  exit 1
}
build() {
  # A build directory that exists keeps its options (scripts/test.sh's, with the tests, say): the
  # demo only needs its four targets, which every configuration builds.
  if [ -f "$B/CMakeCache.txt" ]; then
    cmake -S . -B "$B"
  else
    cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPS_BUILD_CUDA=OFF \
      -DLAYERPS_BUILD_TESTS=OFF -DLAYERPS_BUILD_BENCHMARKS=ON -DLAYERPS_BUILD_PYTHON=OFF
  fi
  cmake --build "$B" -j "$(nproc)" --target layerps-launch layerps-scheduler layerps-server sparse_logreg
}
echo "demo: building the library, the daemons and examples/sparse_logreg.cc into $B/" \
  "(a few minutes the first time; output in $BUILD_LOG)"
start=$(date +%s)
if ! build > "$BUILD_LOG" 2>&1; then
  tail -n 60 "$BUILD_LOG" >&2
  fail "the build failed (the last lines are above; all of it in $BUILD_LOG)"
fi
echo "demo: built in $(( $(date +%s) - start )) s; training on 2 servers and 2 workers"

# The workers print the loss as it falls and their test accuracy; each exits 1 when its
# accuracy is below --min_accuracy (0.8, or the last one given), and layerps-launch exits 0
# only when every worker exited 0.
min=0.8
prev=
for a in "$@"; do
  case "$a" in --min_accuracy=*) min=${a#*=} ;; esac
  if [ "$prev" = --min_accuracy ]; then min=$a; fi
  prev=$a
done
set +e
"$B/tools/layerps-launch" --num_servers=2 --num_workers=2 --timeout_s=600 --quiet_daemons -- \
  "$B/examples/sparse_logreg" --min_accuracy=0.8 "$@" 2>&1 | tee "$RUN_LOG"
rc=${PIPESTATUS[0]}
set -e
accuracies=$(grep -o 'worker [0-9]* done: test accuracy [0-9.]*' "$RUN_LOG" |
  sed 's/ done: test accuracy/:/' | paste -sd, - | sed 's/,/, /g')
if [ "$rc" -ne 0 ]; then
  echo "demo: FAILED: the job exited $rc (test accuracies: ${accuracies:-none}; want >= $min" \
    "on both workers; output in $RUN_LOG)" >&2
  exit "$rc"
fi
n=$(grep -c 'done: test accuracy' "$RUN_LOG" || true)
[ "$n" -eq 2 ] || fail "the job exited 0 but $n of 2 workers reported a test accuracy (output in $RUN_LOG)"
echo "demo: PASSED: sparse logistic regression trained on 2 servers and 2 workers; both" \
  "workers reached test accuracy >= $min on held-out data ($accuracies)"
