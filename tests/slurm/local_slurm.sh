#!/usr/bin/env bash
# local_slurm.sh - start/stop a throw-away one-node Slurm cluster (munged +
# slurmctld + slurmd) whose files all live under DIR.
#
#   local_slurm.sh start  DIR   # idempotent; prints SLURM_CONF=DIR/slurm.conf
#   local_slurm.sh stop   DIR   # idempotent; safe after a failed start
#   local_slurm.sh status DIR   # exit 0 if all daemons run and the node is up
#
# Needs root and Debian 12's packages:
#   apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
# (slurm-wlm is only a metapackage over those three.)
#
# After `start`, every Slurm command must see SLURM_CONF=DIR/slurm.conf
# (also written to DIR/env.sh).  Tunables (environment):
#   LOCAL_SLURM_CPUS         CPUs declared for the node (default: max(nproc,4);
#                            SlurmdParameters=config_overrides lets slurmd
#                            accept more than the hardware has)
#   LOCAL_SLURM_CRED_EXPIRE  AuthInfo cred_expire seconds (default 10, min 5);
#                            also the delay before a requeued job may restart;
#                            set it empty to use Slurm's default (120)
#   LOCAL_SLURM_TIMEOUT      seconds to wait for the node to become idle (30)
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin

die() { echo "local_slurm: $*" >&2; exit 1; }
log() { echo "local_slurm: $*" >&2; }

usage() { die "usage: $0 {start|stop|status} DIR"; }

[[ $# -eq 2 ]] || usage
cmd=$1
[[ -n $2 ]] || usage
if [[ ! -d $2 ]]; then
  case $cmd in
    start) mkdir -p -- "$2" ;;
    stop) exit 0 ;; # nothing was ever started there
    *) exit 1 ;;
  esac
fi
DIR=$(cd -- "$2" && pwd -P)

MUNGE_DIR=$DIR/munge
SLURM_DIR=$DIR/slurm
CONF=$DIR/slurm.conf
MUNGE_SOCKET=$MUNGE_DIR/munge.socket.2
MUNGE_PID=$MUNGE_DIR/munged.pid
SLURMCTLD_PID=$SLURM_DIR/slurmctld.pid
SLURMD_PID=$SLURM_DIR/slurmd.pid
export SLURM_CONF=$CONF

# ---------------------------------------------------------------- helpers --

# pid from a pid file if that process is alive and its command line mentions
# $2 (guards against pid reuse and against daemons of another DIR).
live_pid() {
  local file=$1 needle=$2 pid
  [[ -r $file ]] || return 1
  pid=$(tr -dc '0-9' 2>/dev/null <"$file" || true)
  [[ -n $pid ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$needle" || return 1
  echo "$pid"
}

# all descendants of a pid (children first-level and below)
descendants() {
  local p kids
  # /proc/PID/stat: "pid (comm) state ppid ..."; comm may contain spaces
  kids=$(awk -v pp="$1" '{ pid = $1; sub(/^.*\) /, ""); if ($2 == pp) print pid }' \
    /proc/[0-9]*/stat 2>/dev/null || true)
  for p in $kids; do
    echo "$p"
    descendants "$p"
  done
}

# Waits up to TENTHS tenths of a second for every given pid to exit; the
# survivors are left in `alive`.  usage: wait_gone TENTHS PID...
wait_gone() {
  local tenths=$1 i p
  shift
  for ((i = 0; i <= tenths; i++)); do
    alive=()
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    ((${#alive[@]} > 0)) || return 0
    ((i < tenths)) && sleep 0.1
  done
  return 1
}

# SIGTERM all given pids, wait up to GRACE seconds for all of them, SIGKILL
# the survivors and wait again.  usage: terminate GRACE PID...
terminate() {
  local grace=$1 alive=()
  shift
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  wait_gone $((grace * 10)) "$@" && return 0
  log "pids ${alive[*]} ignored SIGTERM for ${grace}s, sending SIGKILL"
  kill -KILL "${alive[@]}" 2>/dev/null || true
  wait_gone 50 "$@" && return 0
  log "pids ${alive[*]} did not exit"
  return 1
}

# true if TCP port $1 is bound (any state, IPv4 or IPv6)
port_in_use() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v h="$hex" 'FNR > 1 && substr($2, length($2) - 4) == h { f = 1 }
                   END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# two consecutive free ports below the ephemeral range
pick_ports() {
  local lo hi p tries
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
  for ((tries = 0; tries < 500; tries++)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 10000))
    if ((p + 1 >= lo && p <= hi)); then continue; fi
    port_in_use "$p" || port_in_use $((p + 1)) || { echo "$p"; return 0; }
  done
  die "no free port pair found"
}

node_name() { hostname -s; }

node_state() {
  sinfo -h -N -n "$(node_name)" -o '%T' 2>/dev/null | head -n1 || true
}

# node registered and usable (possibly running jobs)
node_up() {
  case $(node_state) in
    idle | mixed | allocated | completing) return 0 ;;
    *) return 1 ;;
  esac
}

dump_logs() {
  local f
  for f in "$MUNGE_DIR/munged.log" "$SLURM_DIR/slurmctld.log" \
    "$SLURM_DIR/slurmd.log" "$SLURM_DIR/slurmctld.out" "$SLURM_DIR/slurmd.out"; do
    [[ -s $f ]] || continue
    echo "===== $f (last 60 lines) =====" >&2
    tail -n 60 "$f" >&2 || true
  done
}

running() {
  live_pid "$MUNGE_PID" "$MUNGE_DIR" >/dev/null &&
    live_pid "$SLURMCTLD_PID" "$CONF" >/dev/null &&
    live_pid "$SLURMD_PID" "$CONF" >/dev/null
}

# pids of slurmstepd processes that serve our slurmd: they hold a unix socket
# named $SLURM_DIR/spool/<node>_<job>.<step>
our_stepds() {
  local inodes pid fd link
  inodes=$(awk -v d="$SLURM_DIR/spool/" 'index($8, d) == 1 { print $7 }' \
    /proc/net/unix 2>/dev/null | sort -u)
  [[ -n $inodes ]] || return 0
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    for fd in /proc/"$pid"/fd/*; do
      link=$(readlink "$fd" 2>/dev/null) || continue
      case $link in
        socket:\[*\])
          if grep -qx "${link//[!0-9]/}" <<<"$inodes"; then
            echo "$pid"
            break
          fi
          ;;
      esac
    done
  done
}

# pids of client commands (srun, salloc, ...) started with our SLURM_CONF;
# they hang once the daemons are gone, and srun ignores a single SIGTERM
our_clients() {
  local pid
  for pid in $(pgrep -x 'srun|salloc|sattach|sbcast' 2>/dev/null || true); do
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qxF "SLURM_CONF=$CONF" &&
      echo "$pid"
  done
  return 0
}

# ------------------------------------------------------------------- stop --

do_stop() {
  local pid p i
  # 1. cancel jobs while the controller still answers, so slurmstepd and the
  #    tasks exit through Slurm (bounded wait)
  if live_pid "$SLURMCTLD_PID" "$CONF" >/dev/null &&
    [[ -n $(squeue -h -o %i 2>/dev/null || true) ]]; then
    scancel --quiet --user="$(id -un)" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      [[ -z $(squeue -h -o %i 2>/dev/null || true) ]] && break
      sleep 0.2
    done
  fi
  # 2. daemons, all at once (each takes 1-2 s to exit on SIGTERM)
  local pids=()
  if pid=$(live_pid "$SLURMD_PID" "$CONF"); then pids+=("$pid"); fi
  if pid=$(live_pid "$SLURMCTLD_PID" "$CONF"); then pids+=("$pid"); fi
  if pid=$(live_pid "$MUNGE_PID" "$MUNGE_DIR"); then pids+=("$pid"); fi
  terminate 15 "${pids[@]}" || true
  # 3. step daemons (and their tasks) that outlived the cancel
  for pid in $(our_stepds); do
    for p in $(descendants "$pid") "$pid"; do kill -KILL "$p" 2>/dev/null || true; done
  done
  # 4. clients of this cluster still waiting for it
  # shellcheck disable=SC2046
  terminate 2 $(our_clients) || true
  rm -f "$SLURMD_PID" "$SLURMCTLD_PID" "$MUNGE_PID" "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  return 0
}

# ------------------------------------------------------------------ start --

start_munge() {
  id munge >/dev/null 2>&1 || die "no 'munge' user (is the munge package installed?)"
  # munged runs as 'munge' and must be able to traverse DIR and its parents
  # (mktemp -d makes DIR 0700)
  chmod go+x "$DIR"
  runuser -u munge -- test -x "$DIR" ||
    die "user munge cannot enter $DIR (a parent directory is not searchable)"

  install -d -m 0755 -o munge -g munge "$MUNGE_DIR"
  if [[ ! -s $MUNGE_DIR/munge.key ]]; then
    rm -f "$MUNGE_DIR/munge.key"
    if command -v mungekey >/dev/null 2>&1; then
      runuser -u munge -- mungekey --create --keyfile="$MUNGE_DIR/munge.key"
    else
      dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1 count=1024 status=none
    fi
  fi
  chown munge:munge "$MUNGE_DIR/munge.key"
  chmod 0400 "$MUNGE_DIR/munge.key"

  # --force: remove a stale socket left by a killed munged (and downgrade
  # some permission checks on DIR's parents to warnings)
  runuser -u munge -- munged --force \
    --socket="$MUNGE_SOCKET" \
    --key-file="$MUNGE_DIR/munge.key" \
    --pid-file="$MUNGE_PID" \
    --log-file="$MUNGE_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/munged.seed" \
    </dev/null >>"$MUNGE_DIR/munged.out" 2>&1 ||
    { dump_logs; cat "$MUNGE_DIR/munged.out" >&2; die "munged failed to start"; }

  local i
  for ((i = 0; i < 50; i++)); do
    if munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  dump_logs
  die "munged does not answer on $MUNGE_SOCKET"
}

write_conf() {
  local node cpus ports ctld_port slurmd_port nproc_ cred_expire
  node=$(node_name)
  nproc_=$(nproc)
  cpus=${LOCAL_SLURM_CPUS:-$((nproc_ > 4 ? nproc_ : 4))}
  cred_expire=${LOCAL_SLURM_CRED_EXPIRE-10}
  ports=$(pick_ports)
  ctld_port=$ports
  slurmd_port=$((ports + 1))
  mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/spool"
  chmod 0755 "$SLURM_DIR" "$SLURM_DIR/state" "$SLURM_DIR/spool"

  cat >"$CONF.tmp" <<EOF
# generated by local_slurm.sh for $DIR
ClusterName=tandemtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET${cred_expire:+,cred_expire=$cred_expire}
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=5
InactiveLimit=0
MailProg=/bin/true
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURMCTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  mv -f "$CONF.tmp" "$CONF"
  echo "export SLURM_CONF=$CONF" >"$DIR/env.sh"
}

wait_idle() {
  local timeout=${LOCAL_SLURM_TIMEOUT:-30} start state
  start=$SECONDS
  while ((SECONDS - start < timeout)); do
    state=$(node_state)
    [[ $state == idle ]] && return 0
    if ! live_pid "$SLURMCTLD_PID" "$CONF" >/dev/null && ((SECONDS - start > 3)); then
      break
    fi
    sleep 0.5
  done
  log "node '$(node_name)' not idle after ${timeout}s (state: '${state:-?}')"
  sinfo -N -l >&2 2>&1 || true
  return 1
}

do_start() {
  [[ $(id -u) -eq 0 ]] || die "must run as root"
  local b
  for b in munged munge unmunge slurmctld slurmd sinfo runuser setsid; do
    command -v "$b" >/dev/null 2>&1 || die "missing $b (apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge)"
  done
  if running && node_up; then
    log "already running in $DIR"
    echo "SLURM_CONF=$CONF"
    return 0
  fi
  do_stop # leftovers of an earlier, failed start

  start_munge
  write_conf
  log "SLURM_CONF=$CONF"

  # both daemonize (stdio -> /dev/null), write their pid files and return;
  # setsid keeps them out of the caller's process group / terminal
  # -c: ignore job/node state a previous run left in DIR/slurm/state
  setsid slurmctld -c -f "$CONF" </dev/null >>"$SLURM_DIR/slurmctld.out" 2>&1 ||
    { dump_logs; do_stop; die "slurmctld failed to start"; }
  setsid slurmd -f "$CONF" </dev/null >>"$SLURM_DIR/slurmd.out" 2>&1 ||
    { dump_logs; do_stop; die "slurmd failed to start"; }

  if ! wait_idle; then
    dump_logs
    do_stop
    exit 1
  fi
  echo "SLURM_CONF=$CONF"
}

case $cmd in
  start) do_start ;;
  stop) do_stop ;;
  status)
    running && node_up && { echo "SLURM_CONF=$CONF"; exit 0; }
    exit 1
    ;;
  *) usage ;;
esac
