#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (controller and compute node), for
# trying deploy/slurm/caduceus-workers.sbatch and for the tests/tests/slurm.rs
# suite. Debian's slurm-wlm 22.05 with munge; jobs run as root.
#
#   deploy/slurm/local-cluster.sh start     # install if missing, configure, start; waits for the node
#   deploy/slurm/local-cluster.sh stop      # stops slurmd, slurmctld and munged (by their pid files)
#   deploy/slurm/local-cluster.sh status    # sinfo
#
# Needs root. The configuration (/etc/slurm/slurm.conf) is written only when
# there is none, or when it is the one this script wrote: an existing site
# configuration is never touched. ProctrackType=proctrack/linuxproc and
# TaskPlugin=task/none: they need no cgroup hierarchy, which these machines do
# not fully have; no cgroup.conf (22.05 has no "disabled" plugin and refuses one).
set -euo pipefail

MARK="# written by caduceus deploy/slurm/local-cluster.sh"
CONF=/etc/slurm/slurm.conf

log() { echo "local-cluster.sh: $*" >&2; }

need_root() {
  if [[ $(id -u) != 0 ]]; then
    log "needs root (munged, slurmctld and slurmd are started as system daemons)"
    exit 1
  fi
}

install() {
  if command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 &&
    command -v munged >/dev/null 2>&1 && command -v sbatch >/dev/null 2>&1; then
    return
  fi
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq slurm-wlm munge >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null; }
}

configure() {
  if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
    log "$CONF exists and was not written by this script; using it as it is"
    return
  fi
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  cat >"$CONF" <<CONF
$MARK
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
JobAcctGatherType=jobacct_gather/none
# scancel: SIGTERM first, SIGKILL this many seconds later; longer than a
# worker's graceful stop (10 s by default).
KillWait=30
NodeName=$host CPUs=$cpus RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    head -c 1024 /dev/urandom >/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  if ! running /run/munge/munged.pid; then
    runuser -u munge -- /usr/sbin/munged --force
  fi
}

start() {
  need_root
  install
  configure
  start_munge
  running /run/slurmctld.pid || /usr/sbin/slurmctld
  running /run/slurmd.pid || /usr/sbin/slurmd
  local host
  host=$(hostname -s)
  for _ in $(seq 1 60); do
    state=$(sinfo -h -n "$host" -o '%t' 2>/dev/null || true)
    case $state in
      idle* | mix* | alloc*) log "node $host is $state"; return 0 ;;
      down* | drain*) scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
  done
  log "the node did not come up; see /var/log/slurm/slurmctld.log and slurmd.log"
  sinfo >&2 || true
  exit 1
}

stop() {
  need_root
  for pidfile in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
    if running "$pidfile"; then
      kill "$(cat "$pidfile")"
    fi
  done
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) sinfo ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
