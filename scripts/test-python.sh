#!/usr/bin/env bash
# Builds and installs the layerps Python package into .venv (a venv that sees Debian's
# python3-torch, python3-numpy and python3-sklearn), then runs the Python test suite.
#
#   scripts/test-python.sh [PYTEST ARGS...]      (-m unit: the fast tier; docs/testing.md)
#
# LAYERPS_PYTEST_JOBS=N runs N test processes (pytest-xdist); LAYERPS_SKIP_WHEEL=1 skips
# the wheel's build and test (the fast tier does).
#
# Needs the Debian packages of scripts/install-deps.sh (python3-venv, python3-dev,
# pybind11-dev, python3-numpy, python3-torch, python3-sklearn, python3-pytest) and PyPI
# for the build requirements (scikit-build-core, pybind11). Exits non-zero on any
# failure, including when no test was collected.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
# CMake's build tree for the package: inside the repo but ignored (/build*/), and reused by
# the next run so that only what changed is rebuilt.
BUILD_DIR="$ROOT/build-python"
# shellcheck source=python-build.sh
source "$ROOT/scripts/python-build.sh"
ensure_venv

echo "== pip install bindings/python (scikit-build-core; build tree $BUILD_DIR)"
pip_build install "$ROOT/bindings/python"

echo "== the installed package"
"$VENV/bin/python" - <<'PY'
import os, layerps, numpy, torch
print("layerps", layerps.__version__, "from", os.path.dirname(layerps.__file__))
print("numpy", numpy.__version__, "torch", torch.__version__)
for tool in ("layerps-scheduler", "layerps-server", "layerps-launch"):
    print(" ", layerps.tool_path(tool))
PY

if [ "${LAYERPS_SKIP_WHEEL:-0}" = 1 ]; then
  echo "== the self-contained wheel: skipped (LAYERPS_SKIP_WHEEL=1, the fast tier)"
else
  echo "== the self-contained wheel (scripts/build-wheel.sh), installed and run elsewhere"
  # The same build tree again: pip wheel rebuilds nothing. The test installs it in a fresh
  # venv and runs clusters with the system copies of its libraries hidden.
  WHEEL_DIR="$(mktemp -d /tmp/layerps-wheel.XXXXXX)"
  trap 'rm -rf "$WHEEL_DIR"' EXIT
  VENV="$VENV" BUILD_DIR="$BUILD_DIR" bash "$ROOT/scripts/build-wheel.sh" "$WHEEL_DIR"
  if grep -q 'Building CXX' "$BUILD_DIR/pip-wheel.log"; then
    echo "test-python: pip wheel compiled again although the build tree was current:" >&2
    grep 'Building CXX' "$BUILD_DIR/pip-wheel.log" | head >&2
    exit 1
  fi
  VENV="$VENV" bash "$ROOT/tests/packaging/wheel_test.sh" "$WHEEL_DIR"/layerps-*manylinux*.whl
fi

echo "== pytest tests/python"
# LAYERPS_PYTEST_JOBS > 1: that many test processes (pytest-xdist, Debian's
# python3-pytest-xdist), each test module kept in one process (--dist loadfile: a module's
# tests share its fixtures and launched clusters).
parallel=()
if [ "${LAYERPS_PYTEST_JOBS:-1}" -gt 1 ] && "$VENV/bin/python" -c "import xdist" 2>/dev/null; then
  parallel=(-n "$LAYERPS_PYTEST_JOBS" --dist loadfile)
fi
# Run from the tests folder so that `import layerps` finds the installed package, not the
# source tree (bindings/python is not on sys.path).
set +e
(cd "$ROOT/tests/python" &&
  "$VENV/bin/python" -m pytest -v -rsP -p no:cacheprovider --durations=15 "${parallel[@]}" "$@" .)
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test-python: no tests were collected" >&2
  exit 1
fi
exit "$rc"
