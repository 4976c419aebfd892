#!/usr/bin/env bash
# Builds and installs the layerps Python package into .venv (a venv that sees Debian's
# python3-torch, python3-numpy and python3-sklearn), then runs the Python test suite.
#
#   scripts/test-python.sh [PYTEST ARGS...]
#
# Needs the Debian packages of scripts/install-deps.sh (python3-venv, python3-dev,
# pybind11-dev, python3-numpy, python3-torch, python3-sklearn, python3-pytest) and PyPI
# for the build requirements (scikit-build-core, pybind11). Exits non-zero on any
# failure, including when no test was collected.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
VENV="$ROOT/.venv"
# CMake's build tree for the wheel: inside the repo but ignored (/build*/), and reused by
# the next run so that only what changed is rebuilt.
BUILD_DIR="$ROOT/build-python"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  "$PY" -m venv --system-site-packages "$VENV"
fi

echo "== pip install bindings/python (scikit-build-core; build tree $BUILD_DIR)"
# The build requirements of bindings/python/pyproject.toml, installed into the venv and
# used without build isolation: an isolated build environment has a new path every time,
# which makes scikit-build-core configure and rebuild everything from scratch; this way a
# second run rebuilds only what changed.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "scikit-build-core>=0.10" "pybind11>=2.10"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
  --config-settings=build-dir="$BUILD_DIR" "$ROOT/bindings/python"

echo "== the installed package"
"$VENV/bin/python" - <<'PY'
import os, layerps, numpy, torch
print("layerps", layerps.__version__, "from", os.path.dirname(layerps.__file__))
print("numpy", numpy.__version__, "torch", torch.__version__)
for tool in ("layerps-scheduler", "layerps-server", "layerps-launch"):
    print(" ", layerps.tool_path(tool))
PY

echo "== the wheel, installed in a fresh venv without the source tree"
# pip wheel reuses the build tree above (nothing is rebuilt); the venv sees Debian's numpy.
WHEEL_DIR="$(mktemp -d /tmp/layerps-wheel.XXXXXX)"
trap 'rm -rf "$WHEEL_DIR"' EXIT
"$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --config-settings=build-dir="$BUILD_DIR" -w "$WHEEL_DIR/dist" "$ROOT/bindings/python"
"$PY" -m venv --system-site-packages "$WHEEL_DIR/venv"
"$WHEEL_DIR/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  --no-index "$WHEEL_DIR"/dist/layerps-*.whl
EXPECTED_VERSION="$(sed -n 's/^project(LayerPS VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")"
(cd "$WHEEL_DIR" && LAYERPS_ROOT="$ROOT" EXPECTED_VERSION="$EXPECTED_VERSION" \
  "$WHEEL_DIR/venv/bin/python" - <<'PY'
import os, subprocess, sys
import numpy as np
import layerps
root = os.path.realpath(os.environ["LAYERPS_ROOT"])
where = os.path.realpath(layerps.__file__)
assert not where.startswith(root + os.sep), f"layerps imported from the source tree: {where}"
assert layerps.__version__ == os.environ["EXPECTED_VERSION"], layerps.__version__
from importlib.metadata import version
assert version("layerps") == layerps.__version__, (version("layerps"), layerps.__version__)
for tool in ("layerps-scheduler", "layerps-server", "layerps-launch", "layerps-keygen", "layerps-plan"):
    out = subprocess.run([layerps.tool_path(tool), "--version"], capture_output=True, text=True,
                         check=True).stdout
    assert f"LayerPS {layerps.__version__}" in out, out
with layerps.LocalCluster(num_servers=2, num_workers=1) as c:
    w = c.workers[0]
    t = w.declare_dense("w", 1000)
    w.push(t, np.full(1000, 2.0, dtype=np.float32)).wait()
    assert (w.pull(t).wait() == 2.0).all()
print(f"wheel: layerps {layerps.__version__} (commit {layerps.__commit__}) from {where}: OK")
PY
)

echo "== pytest tests/python"
# Run from the tests folder so that `import layerps` finds the installed package, not the
# source tree (bindings/python is not on sys.path).
set +e
(cd "$ROOT/tests/python" && "$VENV/bin/python" -m pytest -v -rsP -p no:cacheprovider "$@" .)
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test-python: no tests were collected" >&2
  exit 1
fi
exit "$rc"
