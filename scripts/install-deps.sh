#!/usr/bin/env bash
# Installs the Debian packages LayerPS needs. Idempotent: installs only what is missing,
# and runs apt-get update only then. Needs root (or sudo).
#
#   scripts/install-deps.sh          everything (C++, Python, PyTorch)
#   scripts/install-deps.sh core     only what the C++ library, tools and examples need
set -euo pipefail

CORE=(build-essential cmake ninja-build pkg-config
      libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler libtbb-dev librocksdb-dev
      libgoogle-glog-dev libgflags-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev iproute2
      prometheus-cpp-dev)
# Real tools the tests use where users have them: promtool (Debian's prometheus) checks the
# metrics endpoints; sshd and ssh run layerps-launch -H on loopback "hosts"; slurm-wlm and
# munge give srun a single-node Slurm (scripts/slurm-local.sh).
TEST_TOOLS=(prometheus openssh-server openssh-client slurm-wlm munge)
PYTHON=(python3-dev python3-venv python3-pip pybind11-dev python3-numpy python3-pytest
        python3-torch python3-sklearn python3-matplotlib)

case "${1:-all}" in
  core) WANT=("${CORE[@]}") ;;
  all) WANT=("${CORE[@]}" "${PYTHON[@]}" "${TEST_TOOLS[@]}") ;;
  *) echo "usage: $0 [core|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${WANT[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#WANT[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
