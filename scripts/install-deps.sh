#!/usr/bin/env bash
# Installs the Debian packages LayerPS needs. Idempotent: installs only what is missing,
# and runs apt-get update only then. Needs root (or sudo).
#
#   scripts/install-deps.sh          everything (C++, Python, PyTorch, LibTorch)
#   scripts/install-deps.sh core     only what the C++ library, tools and examples need
set -euo pipefail

CORE=(build-essential cmake ninja-build pkg-config ccache
      libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler libtbb-dev librocksdb-dev
      libgoogle-glog-dev libgflags-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev iproute2
      prometheus-cpp-dev libmicrohttpd-dev)
# Real tools the tests use where users have them: promtool (Debian's prometheus) checks the
# metrics endpoints; sshd and ssh run layerps-launch -H on loopback "hosts"; slurm-wlm and
# munge give srun a single-node Slurm (scripts/slurm-local.sh); python3-yaml lets
# test_kubernetes read deploy/kubernetes/ (deploy/run_pods.py).
TEST_TOOLS=(prometheus openssh-server openssh-client slurm-wlm munge python3-yaml)
# PyTorch for Python, and LibTorch's headers for the C++ training example (examples/cpp).
PYTHON=(python3-dev python3-venv python3-pip pybind11-dev python3-numpy python3-pytest
        python3-pytest-xdist
        python3-torch python3-torchvision python3-sklearn python3-matplotlib libtorch-dev)

case "${1:-all}" in
  core) WANT=("${CORE[@]}"); TOOLS=() ;;
  all) WANT=("${CORE[@]}" "${PYTHON[@]}"); TOOLS=("${TEST_TOOLS[@]}") ;;
  *) echo "usage: $0 [core|all]" >&2; exit 2 ;;
esac

missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t need < <(missing "${WANT[@]}")
mapfile -t tools < <(missing "${TOOLS[@]}")
if [ ${#need[@]} -eq 0 ] && [ ${#tools[@]} -eq 0 ]; then
  echo "install-deps: all $(( ${#WANT[@]} + ${#TOOLS[@]} )) packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -q
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# The test tools are daemons whose packages try to start services: on a machine where that
# fails, the tests that need them say they were skipped, and the build goes on.
if [ ${#tools[@]} -gt 0 ]; then
  echo "install-deps: installing the test tools ${tools[*]}"
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${tools[@]}"; then
    echo "install-deps: WARNING: could not install ${tools[*]}: the tests that use them will be skipped" >&2
  fi
fi
