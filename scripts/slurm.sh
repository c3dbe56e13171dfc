#!/usr/bin/env bash
# A real Slurm cluster (Debian's slurm-wlm: slurmctld, slurmd, srun/sbatch/...; munge for
# authentication) on the test hosts of scripts/cluster.sh, so that tests can launch with srun and
# sbatch across several "machines".
#
#   scripts/slurm.sh up N [--cpus C]   start hosts host1..hostN (scripts/cluster.sh up N), slurmctld in
#                                      host1, a slurmd in every host; waits until every node is idle
#   scripts/slurm.sh exec HOST CMD...  run CMD (srun, sbatch, squeue, sinfo, scancel, ...) inside HOST
#                                      with SLURM_CONF set to this cluster's slurm.conf
#   scripts/slurm.sh down              stop the daemons, then scripts/cluster.sh down; removes all
#
# exec runs CMD in the caller's working directory (the hosts share this machine's file system), so
# sbatch's slurm-JOBID.out lands there. Run srun and sbatch inside a host, never from this machine's
# own namespace: the slurmds call srun back at its host's address (SLURM_SRUN_COMM_HOST).
# TESSERA_CLUSTER=NAME (at most 6 letters and digits; default "sl") names the cluster, as for
# cluster.sh: several can be up at once. The hosts are cluster.sh's (kill HOST, signal ... work on them
# as usual: `TESSERA_CLUSTER=NAME scripts/cluster.sh kill host2` loses a node, and slurmctld marks it
# DOWN after SlurmdTimeout, 10 s). Every node offers C CPUs (default 8) whatever the machine has
# (SlurmdParameters=config_overrides): the hosts share this machine's cores anyway, and a test may
# want more tasks on a node than there are cores. up waits at most TESSERA_SLURM_UP_TIMEOUT seconds
# (default 60) for the nodes.
#
# Design:
# - Nothing of the machine's own Slurm or munge is used or changed (/etc/slurm, /etc/munge, /var/lib,
#   /run): the configuration, munge key and socket, slurmctld's state, the slurmds' spool directories,
#   logs and pid files all live in /tmp/tessera-slurm-NAME/, and every command is given that
#   slurm.conf (-f, SLURM_CONF).
# - slurm.conf gives every node its address (NodeName=hostI NodeAddr=198.18.0.I,
#   SlurmctldHost=host1(198.18.0.1)), so Slurm itself never looks a name up. Each daemon runs inside
#   its host (cluster.sh exec), where the hostname is the node's name; slurmd gets it again with -N.
# - The jobs do look names up: Slurm hands them node lists (SLURM_JOB_NODELIST=host[1-2]), as a real
#   cluster's DNS or /etc/hosts resolves them. Each host gets an /etc/hosts of its own, bind-mounted
#   in its private mount namespace (the machine's own file is untouched): the other hosts' names at
#   their addresses, and its own name at 127.0.1.1, as Debian's installer writes it, so the trap of a
#   first node whose name means loopback on itself is there to be handled.
# - One munged, outside the hosts, serves all of them: its socket is a path in the state directory,
#   and a pathname socket works across network namespaces (AuthInfo=socket=...). A credential that
#   several nodes decode (a job's, or a message relayed from node to node) is "replayed" to that one
#   munged; Slurm expects this and goes on (munged.log notes it). TreeWidth is larger than any cluster
#   all the same, so that messages go to every node directly and a lost host relays nothing.
# - No cgroups: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none. select/cons_tres counting
#   CPUs (CR_CPU), so several tasks and jobs share a node.
# - Short timeouts (SlurmdTimeout=10, MessageTimeout=5): a lost node is DOWN within ~10-20 s.
# - down stops only what up started (pid files, checked against the process's command line, which
#   names the state directory), and cluster.sh down then ends whatever else ran in the hosts (job
#   steps). A failed or interrupted up undoes itself the same way, after printing the daemons' logs.
# Needs root (namespaces; the daemons run as root, SlurmUser=root).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export TESSERA_CLUSTER=${TESSERA_CLUSTER:-sl}
name=$TESSERA_CLUSTER
[[ "$name" =~ ^[a-z0-9]{1,6}$ ]] || { echo "slurm.sh: TESSERA_CLUSTER must be 1-6 lowercase letters or digits" >&2; exit 2; }
state=/tmp/tessera-slurm-$name
conf=$state/slurm.conf
socket=$state/munge/munge.socket
up_timeout=${TESSERA_SLURM_UP_TIMEOUT:-60}   # seconds up waits for every node to be idle

die() { echo "slurm.sh: $*" >&2; exit 1; }
cluster() { bash "$here/cluster.sh" "$@"; }
# Entering a host's mount namespace moves to its root directory: env -C goes back to ours.
in_host() { local host=$1; shift; cluster exec "$host" env -C "$PWD" SLURM_CONF="$conf" "$@"; }

# Whether process $1 is alive and one of ours: its command line names our state directory (so a stale
# pid file, its pid reused, never makes us signal a stranger). An ended process, a zombie too, has an
# empty command line.
ours() { local c; c=$({ tr "\0" " " < "/proc/$1/cmdline"; } 2>/dev/null) && [[ "$c" == *"$state/"* ]]; }
# The pid in pid file $1 if it is one of ours.
our_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && ours "$pid" || return 1
  echo "$pid"
}

# SIGTERM the daemons of pid files "$@", SIGKILL those still there after 10 s.
stop() {
  local file pid pids=()
  for file in "$@"; do
    pid=$(our_pid "$file") && { kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); }
  done
  local deadline=$((SECONDS + 10))
  for pid in ${pids[@]+"${pids[@]}"}; do
    while ours "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if ours "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
}

down() {
  # Only a cluster this script made (its state directory is made first): a plain cluster.sh cluster
  # of the same name is not ours to remove.
  [ -d "$state" ] || return 0
  stop "$state"/run/slurmd-*.pid "$state/run/slurmctld.pid"
  stop "$state/run/munged.pid"
  cluster down
  rm -rf "$state"
}

write_conf() {
  local n=$1 cpus=$2 i
  cat > "$conf" <<EOF
# Made by scripts/slurm.sh for cluster '$name' ($n hosts); removed by scripts/slurm.sh down.
ClusterName=tessera-$name
SlurmctldHost=host1(198.18.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$state/slurmctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd-%n.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
TreeWidth=65533
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=5
MinJobAge=300
MailProg=/bin/true
SchedulerParameters=batch_sched_delay=0
EOF
  for i in $(seq 1 "$n"); do
    echo "NodeName=host$i NodeAddr=198.18.0.$i CPUs=$cpus State=UNKNOWN" >> "$conf"
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$conf"
}

# Start daemon "$@" (it forks into the background itself); its early output goes to a file, so that a
# caller reading our output through a pipe is not kept waiting by a daemon holding the pipe.
start() {
  local log=$1; shift
  "$@" </dev/null >"$log" 2>&1 || { cat "$log" >&2; die "could not start: $*"; }
}

idle_nodes() { in_host host1 sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | wc -l; }

show_logs() {
  local f
  for f in "$state"/log/*; do
    if [ -s "$f" ]; then echo "--- $f (last lines)"; tail -n 15 "$f"; fi
  done >&2
}

up() {
  local n=$1; shift
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "up N: N must be 1..64"
  local cpus=8
  while [ $# -gt 0 ]; do
    case "$1" in
      --cpus) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "up: --cpus C: C must be a positive number"
              cpus=$2; shift 2 ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  local b
  for b in munged munge slurmctld slurmd sinfo; do
    command -v "$b" >/dev/null || die "$b not found: install slurm-wlm and munge (scripts/setup.sh)"
  done
  [ ! -e "$state" ] || die "slurm cluster '$name' is up already (scripts/slurm.sh down first)"
  [ ! -e "/tmp/tessera-cluster-$name" ] || die "cluster '$name' is up already (scripts/cluster.sh down first)"

  up_done=0
  trap '[ $up_done = 1 ] || { show_logs || true; down; }' EXIT
  trap 'exit 1' INT TERM
  # munged insists on directories that only root can write to.
  mkdir -m 0755 "$state"
  mkdir -m 0755 "$state/munge" "$state/run" "$state/log" "$state/spool"
  mkdir -m 0700 "$state/slurmctld"
  head -c 1024 /dev/urandom > "$state/munge/munge.key"
  chmod 0400 "$state/munge/munge.key"
  write_conf "$n" "$cpus"

  start "$state/log/munged.start" munged --socket="$socket" --key-file="$state/munge/munge.key" \
    --pid-file="$state/run/munged.pid" --seed-file="$state/munge/munged.seed" --log-file="$state/log/munged.log"
  munge -S "$socket" -n | unmunge -S "$socket" >/dev/null || die "munged does not answer on $socket"

  cluster up "$n" >/dev/null
  local i j
  for i in $(seq 1 "$n"); do
    { echo "127.0.0.1 localhost"; echo "127.0.1.1 host$i"
      for j in $(seq 1 "$n"); do [ "$j" = "$i" ] || echo "198.18.0.$j host$j"; done; } > "$state/hosts-host$i"
    cluster exec "host$i" mount --bind "$state/hosts-host$i" /etc/hosts
  done
  start "$state/log/slurmctld.start" cluster exec host1 slurmctld -f "$conf" -c
  for i in $(seq 1 "$n"); do
    mkdir -m 0755 "$state/spool/host$i"
    start "$state/log/slurmd-host$i.start" cluster exec "host$i" slurmd -f "$conf" -N "host$i"
  done

  local deadline=$((SECONDS + up_timeout))
  until [ "$(idle_nodes)" -eq "$n" ]; do
    [ $SECONDS -lt $deadline ] || die "not every node idle after ${up_timeout} s: $(in_host host1 sinfo -N 2>&1 || true)"
    sleep 0.2
  done
  up_done=1
  trap - EXIT INT TERM
  in_host host1 sinfo -N -o '%N %T %c %P'
}

[ $# -ge 1 ] || die "usage: slurm.sh up N [--cpus C] | exec HOST CMD... | down"
command=$1; shift
case "$command" in
  up) [ $# -ge 1 ] || die "usage: slurm.sh up N [--cpus C]"; up "$@" ;;
  exec) [ $# -ge 2 ] || die "usage: slurm.sh exec HOST CMD..."
        [ -e "$conf" ] || die "slurm cluster '$name' is not up (scripts/slurm.sh up N)"
        in_host "$@" ;;
  down) down ;;
  *) die "unknown command '$command'" ;;
esac
