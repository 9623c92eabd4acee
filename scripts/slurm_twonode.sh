#!/usr/bin/env bash
# A real two-node Slurm cluster on this one machine, for the multi-node tests (issue 46).
#
#   bash scripts/slurm_twonode.sh start    # network namespaces, slurmctld and two slurmd
#   bash scripts/slurm_twonode.sh stop     # the daemons, the namespaces, the hosts entries
#   bash scripts/slurm_twonode.sh status
#   bash scripts/slurm_twonode.sh kill-node orchn2   # a node that dies: every process in it
#   bash scripts/slurm_twonode.sh start-node orchn2  # its slurmd again (back in service)
#   eval "$(bash scripts/slurm_twonode.sh env)"      # SLURM_CONF for sbatch/squeue here
#
# Each node is a network namespace with a UTS namespace of its own (its own host name,
# orchn1 / orchn2) and its own address on a bridge this script makes (orchbr0, 10.77.0.0/24);
# slurmctld runs in the root namespace at 10.77.0.1 (orchctl), where sbatch is run. The jobs
# really go through slurmctld to two slurmd: a job step over both nodes starts a task in each
# namespace, and its ranks reach each other over the bridge (gloo). The nodes share this
# machine's file system (a run directory is seen from both, as on a cluster's shared file
# system) and its cores (each node claims them all: Slurm's CPU counts are not a performance
# model here). auth/none, cred/none, no accounting, as scripts/slurm_local.sh. The host names
# resolve through /etc/hosts lines this script adds and removes (marked). Needs root, Debian's
# slurm-wlm (installed if missing) and iproute2.
set -euo pipefail
D=${ORCH_SLURM2_DIR:-/tmp/orchestrator-slurm2}
CONF=$D/slurm.conf
export SLURM_CONF=$CONF
NET=10.77.0
BRIDGE=orchbr0
NODES=(orchn1 orchn2)
MARK="# orchestrator two-node test cluster"
CTLD_PORT=${ORCH_SLURM2_CTLD_PORT:-6827}
SLURMD_PORT=${ORCH_SLURM2_SLURMD_PORT:-6828}

log() { echo "slurm_twonode: $*" >&2; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then log "slurm-wlm is missing and installing it needs root"; return 1; fi
  log "installing slurm-wlm (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends slurm-wlm >/dev/null
}

addr_of() { case $1 in orchn1) echo "$NET.11";; orchn2) echo "$NET.12";; esac; }

network_up() {
  ip link show "$BRIDGE" >/dev/null 2>&1 || {
    ip link add "$BRIDGE" type bridge
    ip addr add "$NET.1/24" dev "$BRIDGE"
  }
  ip link set "$BRIDGE" up
  ip link set lo up
  for n in "${NODES[@]}"; do
    ip netns list | grep -qw "$n" || ip netns add "$n"
    if ! ip link show "v$n" >/dev/null 2>&1; then
      ip link add "v$n" type veth peer name eth0 netns "$n"
      ip link set "v$n" master "$BRIDGE"
      ip link set "v$n" up
      ip netns exec "$n" ip addr add "$(addr_of "$n")/24" dev eth0
      ip netns exec "$n" ip link set eth0 up
      ip netns exec "$n" ip link set lo up
    fi
  done
  hosts_add
}

hosts_add() {
  grep -q "$MARK" /etc/hosts 2>/dev/null && return 0
  {
    echo "$NET.1 orchctl $MARK"
    for n in "${NODES[@]}"; do echo "$(addr_of "$n") $n $MARK"; done
  } >> /etc/hosts
}

hosts_remove() {
  [ -f /etc/hosts ] || return 0
  grep -v "$MARK" /etc/hosts > "$D/hosts.tmp" || true
  cat "$D/hosts.tmp" > /etc/hosts  # in place: /etc/hosts may be a bind mount
  rm -f "$D/hosts.tmp"
}

network_down() {
  for n in "${NODES[@]}"; do
    ip link del "v$n" 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
}

write_conf() {
  local cpus mem
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
  mkdir -p "$D/state" "$D/spool"
  for n in "${NODES[@]}"; do mkdir -p "$D/spool/$n"; done
  cat > "$CONF" <<CONF
# written by scripts/slurm_twonode.sh: a two-node test cluster in network namespaces
ClusterName=orchtwo
SlurmctldHost=$(hostname -s)($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.%n.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.%n.log
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
SlurmdTimeout=15
MessageTimeout=10
MinJobAge=600
KillWait=5
InactiveLimit=0
JobRequeue=1
NodeName=orchn1 NodeAddr=$NET.11 CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=orchn2 NodeAddr=$NET.12 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=two Nodes=orchn1,orchn2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

ping_ok() { [ -f "$CONF" ] && scontrol ping 2>/dev/null | grep -q "is UP"; }

nodes_ready() {
  [ "$(sinfo -h -p two -o '%t %D' 2>/dev/null | awk '$1 ~ /^(idle|mix|alloc)/ {s += $2} END {print s+0}')" = 2 ]
}

start_node() {
  local n=$1
  # the node's own host name (UTS namespace) inside its network namespace; slurmd daemonizes
  # and what it starts (job steps, tasks) stays in both namespaces. nsenter, not ip netns
  # exec: that remounts /sys for the namespace, and slurmd needs the machine's cgroup mount
  nsenter --net="/var/run/netns/$n" unshare --uts sh -c "hostname $n && exec slurmd -N $n -f $CONF"
}

start() {
  mkdir -p "$D"
  exec 9>"$D/.lock"; flock 9
  if ping_ok && nodes_ready; then log "already running ($CONF)"; return 0; fi
  install
  network_up
  write_conf
  slurmctld -c -f "$CONF"
  for n in "${NODES[@]}"; do start_node "$n"; done
  echo yes > "$D/started_by_us"
  for _ in $(seq 90); do
    if ping_ok && nodes_ready; then log "up: partition two on ${NODES[*]} ($CONF)"; return 0; fi
    sleep 1
  done
  log "daemons did not come up; see $D/slurmctld.log and $D/slurmd.*.log"
  sinfo -p two >&2 || true
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

kill_node() {  # every process of the node: its slurmd, its job steps, their tasks
  local n=$1 pids
  pids=$(ip netns pids "$n" 2>/dev/null || true)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
  rm -f "$D/slurmd.$n.pid"
}

stop() {
  [ -d "$D" ] || { network_down; hosts_remove; return 0; }
  exec 9>"$D/.lock"; flock 9
  if [ -f "$D/started_by_us" ]; then
    scancel --full --signal=KILL -p two 2>/dev/null || true
    for n in "${NODES[@]}"; do kill_node "$n"; done
    stop_pid "$D/slurmctld.pid"
    rm -f "$D/started_by_us"
  fi
  network_down
  hosts_remove
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if ping_ok; then sinfo -p two; else echo "not running"; exit 1; fi ;;
  kill-node) kill_node "${2:?node}" ;;
  start-node) start_node "${2:?node}"; scontrol update nodename="$2" state=resume 2>/dev/null || true ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|kill-node N|start-node N|env" >&2; exit 2 ;;
esac
