#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for the `slurm`-marked tests and local trials.
#
#   bash scripts/slurm_local.sh start    # install Debian's slurm-wlm if missing, start daemons
#   bash scripts/slurm_local.sh stop     # stop the daemons this script started (by pid)
#   bash scripts/slurm_local.sh status
#   eval "$(bash scripts/slurm_local.sh env)"   # SLURM_CONF for sbatch/squeue in this shell
#
# slurmctld and slurmd run as root with auth/none and cred/none (no munge), one `debug`
# partition holding this node, no accounting daemon (so `sacct` has nothing to say: the
# orchestrator reads job state from squeue and the job's own result files). State, logs and the
# config live in $ORCH_SLURM_DIR (default /tmp/orchestrator-slurm). Several users of one machine
# share the cluster: `start` counts users, `stop` stops the daemons when the last one leaves and
# only if this script started them. Needs root (apt-get and the daemons).
set -euo pipefail
D=${ORCH_SLURM_DIR:-/tmp/orchestrator-slurm}
CONF=$D/slurm.conf
export SLURM_CONF=$CONF
LOCK=$D/.lock

log() { echo "slurm_local: $*" >&2; }

ping_ok() { [ -f "$CONF" ] && scontrol ping 2>/dev/null | grep -q "is UP"; }

node_ready() { sinfo -h -p debug -o "%t" 2>/dev/null | grep -Eq "^(idle|mix|alloc)"; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then log "slurm-wlm is missing and installing it needs root"; return 1; fi
  log "installing slurm-wlm (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends slurm-wlm >/dev/null
}

write_conf() {
  local host node
  host=$(hostname -s)
  node=$(slurmd -C | head -1 | sed -e "s/^NodeName=[^ ]*/NodeName=$host NodeAddr=127.0.0.1/" \
         -e 's/ *UpTime=.*//')
  mkdir -p "$D/state" "$D/spool"
  cat > "$CONF" <<CONF
# written by scripts/slurm_local.sh: a single-node test cluster
ClusterName=orchlocal
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort=${ORCH_SLURMCTLD_PORT:-6817}
SlurmdPort=${ORCH_SLURMD_PORT:-6818}
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
JobRequeue=1
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
}

start() {
  mkdir -p "$D"
  exec 9>"$LOCK"; flock 9
  local users=0
  [ -f "$D/users" ] && users=$(cat "$D/users")
  if ping_ok; then
    echo $((users + 1)) > "$D/users"
    log "already running ($CONF), users: $((users + 1))"
    return 0
  fi
  install
  write_conf
  rm -f "$D/started_by_us"
  slurmctld -c -f "$CONF"   # -c: fresh state, no jobs left from an earlier cluster
  slurmd -f "$CONF"
  echo yes > "$D/started_by_us"
  echo 1 > "$D/users"
  for _ in $(seq 60); do
    if ping_ok && node_ready; then log "up: partition debug on $(hostname -s) ($CONF)"; return 0; fi
    sleep 1
  done
  log "daemons did not come up; see $D/slurmctld.log and $D/slurmd.log"
  return 1
}

stop_pid() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$f"
}

stop() {
  [ -d "$D" ] || return 0
  exec 9>"$LOCK"; flock 9
  local users=1
  [ -f "$D/users" ] && users=$(cat "$D/users")
  users=$((users - 1))
  if [ "$users" -gt 0 ]; then echo "$users" > "$D/users"; log "still used by $users"; return 0; fi
  rm -f "$D/users"
  if [ ! -f "$D/started_by_us" ]; then log "not started by this script; left alone"; return 0; fi
  stop_pid "$D/slurmd.pid"
  stop_pid "$D/slurmctld.pid"
  rm -f "$D/started_by_us"
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if ping_ok; then sinfo; squeue; else echo "not running"; exit 1; fi ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
