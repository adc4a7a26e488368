#!/usr/bin/env bash
# Starts a one-node Slurm cluster on this machine (slurmctld + slurmd, munge auth), for
# the Slurm executor's tests, the compatibility suite and the benchmark. Installs
# Debian's slurm-wlm and munge when they are missing (needs root). Idempotent: a
# cluster that already answers is left as it is.
#
#   scripts/slurm-one-node.sh          # start (or check) the cluster
#   scripts/slurm-one-node.sh stop
set -euo pipefail

CONF=/etc/slurm/slurm.conf
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm

if [ "${1:-}" = stop ]; then
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  exit 0
fi

if ! command -v sbatch >/dev/null || [ ! -x /usr/sbin/munged ]; then
  echo "slurm: installing slurm-wlm and munge" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null
  }
fi

# munge: the authentication every Slurm daemon and command uses.
mkdir -p /run/munge && chown munge:munge /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || { /usr/sbin/mungekey -c 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
  echo "slurm: the cluster answers" >&2
  exit 0
fi

HOST=$(hostname -s)
CPUS=$(nproc)
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
mkdir -p /etc/slurm "$STATE" "$SPOOL" "$LOGS" /run/slurm
chown slurm:slurm "$STATE" "$LOGS" /run/slurm 2>/dev/null || true
cat >"$CONF" <<EOF
# Written by qanat's scripts/slurm-one-node.sh: one node, this machine.
ClusterName=qanat
SlurmctldHost=$HOST
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
MinJobAge=3600
SchedulerParameters=sched_min_interval=0
KillWait=5
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
/usr/sbin/slurmctld
/usr/sbin/slurmd
for _ in $(seq 100); do
  if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "slurm: one-node cluster '$HOST' up ($CPUS cpus, $MEM MiB)" >&2
    exit 0
  fi
  sleep 0.2
done
echo "slurm: the cluster did not come up; see $LOGS" >&2
sinfo >&2 || true
exit 1
