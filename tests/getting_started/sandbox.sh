#!/usr/bin/env bash
# Runs one block of docs/getting-started.md as written, from the repository root, inside a
# network and mount namespace of its own (needs root):
#
#   tests/getting_started/sandbox.sh ROOT BLOCK_FILE
#
# - the network namespace has only loopback, so the page's fixed ports (9090, 9400...)
#   are free whatever runs on the machine;
# - /etc/hosts names node1 127.0.0.2 and node2 127.0.0.3 (both loopback) and this host
#   127.0.0.1;
# - an sshd listens on port 22 there, and /root/.ssh is a fresh directory with a key it
#   accepts, so the page's default `ssh node1` works without a prompt.
# Nothing outlives the namespace but /root/.ssh's mount point (created when missing).
set -euo pipefail
ROOT="$(realpath "$1")"
BLOCK="$(realpath "$2")"
if [ "$(id -u)" -ne 0 ] || ! unshare --net --mount --propagation private true 2>/dev/null; then
  echo "sandbox: needs root and unshare (network and mount namespaces)" >&2
  exit 77
fi
[ -x /usr/sbin/sshd ] || { echo "sandbox: openssh-server is not installed" >&2; exit 77; }
TMP="$(mktemp -d /tmp/layerps-gs.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p /root/.ssh && chmod 700 /root/.ssh

cat >"$TMP/inside.sh" <<'SH'
set -euo pipefail
ip link set lo up
printf '127.0.0.1 localhost %s\n127.0.0.2 node1\n127.0.0.3 node2\n' "$(hostname)" >"$TMP/hosts"
mount --bind "$TMP/hosts" /etc/hosts
mkdir -p "$TMP/dotssh" "$TMP/sshd"
chmod 700 "$TMP/dotssh"
ssh-keygen -q -t ed25519 -N '' -f "$TMP/dotssh/id_ed25519"
cp "$TMP/dotssh/id_ed25519.pub" "$TMP/sshd/authorized_keys"
ssh-keygen -q -t ed25519 -N '' -f "$TMP/sshd/host_key"
mount --bind "$TMP/dotssh" /root/.ssh
cat >"$TMP/sshd/config" <<CONF
Port 22
ListenAddress 0.0.0.0
HostKey $TMP/sshd/host_key
AuthorizedKeysFile $TMP/sshd/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
StrictModes no
UsePAM no
PidFile $TMP/sshd/sshd.pid
SetEnv PATH=$PATH
CONF
mkdir -p /run/sshd
/usr/sbin/sshd -D -e -f "$TMP/sshd/config" 2>"$TMP/sshd/log" &
sshd_pid=$!
for _ in $(seq 100); do
  if ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new node1 true 2>/dev/null &&
     ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new node2 true 2>/dev/null; then
    break
  fi
  sleep 0.1
done
cd "$ROOT"
set +e
bash -euo pipefail "$BLOCK"
rc=$?
kill "$sshd_pid" 2>/dev/null
exit "$rc"
SH
TMP="$TMP" ROOT="$ROOT" BLOCK="$BLOCK" unshare --net --mount --propagation private bash "$TMP/inside.sh"
