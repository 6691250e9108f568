#!/usr/bin/env bash
# A one-node Slurm cluster under a directory of its own, for the fleet tests (tests/integration
# /slurm.sh) and for trying `ktune sweep --slurm` on one machine. Debian 12's packages (munge,
# slurmctld, slurmd, slurm-client 22.05; scripts/install-deps.sh installs them) with nothing
# taken from /etc: a fresh munge key, a slurm.conf naming `localhost` (2 CPUs, partition
# `debug`), state, spool, logs and pid files, all under DIR.
#
#   scripts/slurm-local.sh start DIR   start munged, slurmctld and slurmd; wait until the node is
#                                      idle; print the environment Slurm's commands need
#                                      (export SLURM_CONF=DIR/slurm.conf)
#   scripts/slurm-local.sh stop DIR    stop the three daemons this script started under DIR
#   scripts/slurm-local.sh check       say whether a cluster can be started here (exit 0), else
#                                      why not (exit 3)
#
# The daemons run as root (slurmd must, to start jobs as their user), so start needs root. Exit
# codes: 0 ok; 3 this machine cannot run the cluster (not root, a package missing), with the
# reason on stderr; 1 a daemon did not start (its log's end on stderr).
#
# Accounting: there is no slurmdbd, so `sacct` has nothing. Finished jobs stay visible to
# `scontrol show job` for MinJobAge (600 s here) and each finished job is appended to
# DIR/jobcomp.txt (jobcomp/filetxt: JobId, State, NodeList, ExitCode per line).
set -euo pipefail

usage() { echo "usage: $0 start DIR | stop DIR | check" >&2; exit 2; }
cmd="${1:-}"
[[ -n "$cmd" ]] || usage

cannot() { echo "slurm-local: $*" >&2; exit 3; }

check() {
  [[ "$(id -u)" == 0 ]] || cannot "needs root (slurmd starts jobs as their user; munged and slurmctld run as root here); running as uid $(id -u)"
  local missing=()
  for exe in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
    command -v "$exe" >/dev/null 2>&1 || [[ -x "/usr/sbin/$exe" ]] || missing+=("$exe")
  done
  [[ ${#missing[@]} == 0 ]] || cannot "missing executables: ${missing[*]} (Debian packages munge slurmctld slurmd slurm-client; scripts/install-deps.sh installs them)"
}

# A TCP port nothing listens on, from a range unlikely to be used.
free_port() {
  local port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 30000))
    if ! ss -Htln "sport = :$port" 2>/dev/null | grep -q .; then echo "$port"; return; fi
  done
  echo "slurm-local: no free TCP port found" >&2
  exit 1
}

# Prints the end of a log to stderr and fails.
died() {
  local what="$1" log="$2"
  echo "slurm-local: $what did not start; the end of $log:" >&2
  tail -n 20 "$log" >&2 2>/dev/null || true
  exit 1
}

# Starts "$@" in the background (its own session, output to $log), records its pid in $pidfile.
spawn() {
  local pidfile="$1" log="$2"
  shift 2
  setsid "$@" </dev/null >>"$log" 2>&1 &
  echo $! >"$pidfile"
}

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  local dir="$1"
  check
  export PATH="$PATH:/usr/sbin:/sbin"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
  chmod 0700 "$dir/munge"

  # munge: a key of our own, a socket of our own.
  mungekey --create --keyfile="$dir/munge/munge.key" --force >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  local socket="$dir/munge/munge.socket"
  spawn "$dir/run/munged.pid" "$dir/log/munged.out" \
    munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
      --seed-file="$dir/munge/munged.seed"
  for _ in $(seq 1 50); do [[ -S "$socket" ]] && break; sleep 0.1; done
  [[ -S "$socket" ]] && alive "$dir/run/munged.pid" || died munged "$dir/log/munged.log"

  local ctld_port slurmd_port
  ctld_port="$(free_port)"
  slurmd_port="$(free_port)"
  while [[ "$slurmd_port" == "$ctld_port" ]]; do slurmd_port="$(free_port)"; done
  cat >"$dir/slurm.conf" <<CONF
# Written by scripts/slurm-local.sh: a one-node cluster under $dir.
ClusterName=ktune-local
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/run/slurmctld.pid.slurm
SlurmdPidFile=$dir/run/slurmd.pid.slurm
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
InactiveLimit=0
Waittime=0
MaxArraySize=1001
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"

  # -i: ignore state left in StateSaveLocation (there is none; a fresh cluster every time).
  spawn "$dir/run/slurmctld.pid" "$dir/log/slurmctld.out" slurmctld -D -i -f "$SLURM_CONF"
  for _ in $(seq 1 100); do
    scontrol ping 2>/dev/null | grep -q "is UP" && break
    alive "$dir/run/slurmctld.pid" || died slurmctld "$dir/log/slurmctld.log"
    sleep 0.1
  done
  scontrol ping 2>/dev/null | grep -q "is UP" || died slurmctld "$dir/log/slurmctld.log"

  spawn "$dir/run/slurmd.pid" "$dir/log/slurmd.out" slurmd -D -N localhost -f "$SLURM_CONF"
  local state=""
  for _ in $(seq 1 150); do
    state="$(sinfo -h -n localhost -o %T 2>/dev/null || true)"
    [[ "$state" == idle ]] && break
    alive "$dir/run/slurmd.pid" || died slurmd "$dir/log/slurmd.log"
    sleep 0.1
  done
  [[ "$state" == idle ]] || died "slurmd (node state '${state:-unknown}', expected idle)" "$dir/log/slurmd.log"
  echo "export SLURM_CONF=$SLURM_CONF"
}

stop() {
  local dir="$1"
  [[ -d "$dir" ]] || return 0
  local name pidfile pid
  for name in slurmd slurmctld munged; do
    pidfile="$dir/run/$name.pid"
    [[ -f "$pidfile" ]] || continue
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

case "$cmd" in
  start) [[ $# == 2 ]] || usage; start "$2" ;;
  stop) [[ $# == 2 ]] || usage; stop "$2" ;;
  check) check ;;
  *) usage ;;
esac
