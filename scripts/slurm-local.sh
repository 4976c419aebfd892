#!/usr/bin/env bash
# A single-node Slurm of its own for tests and trials (Debian's slurm-wlm and munge), all
# state in DIR: its own munge key and socket, slurmctld and slurmd on the ports given by
# SLURMCTLD_PORT and SLURMD_PORT (default 16817, 16818).
#
#   scripts/slurm-local.sh start DIR   prints DIR/slurm.conf once the node is idle
#   scripts/slurm-local.sh stop DIR    stops its daemons
#
# Then: SLURM_CONF=DIR/slurm.conf srun -n 2 python train.py
set -euo pipefail
CMD=${1:?usage: slurm-local.sh start|stop DIR}
DIR=${2:?usage: slurm-local.sh start|stop DIR}
if [ "$CMD" = stop ]; then
  for f in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  exit 0
fi
[ "$CMD" = start ] || { echo "usage: slurm-local.sh start|stop DIR" >&2; exit 2; }
mkdir -p "$DIR"/{spool,state,log,munge}
HOST=$(hostname -s)
CPUS=$(nproc)
# munge: a key of our own, its socket in DIR
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$DIR/munge/munge.key"
munged --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/seed" -f
cat > "$DIR/slurm.conf" <<CONF
ClusterName=layerps-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CryptoType=crypto/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$DIR/slurm.conf"
slurmctld -f "$DIR/slurm.conf"
slurmd -f "$DIR/slurm.conf"
for i in $(seq 1 50); do
  if sinfo -h -o %T 2>/dev/null | grep -q idle; then echo "$DIR/slurm.conf"; exit 0; fi
  sleep 0.2
done
echo "slurm did not come up" >&2; sinfo >&2 || true; tail -5 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
exit 1
