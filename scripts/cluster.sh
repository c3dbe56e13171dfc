#!/usr/bin/env bash
# Test hosts on this machine: each host is a process holding its own network, UTS (hostname), IPC
# and mount namespaces (with a private /dev/shm), so nothing but the network joins them. The hosts'
# veth links meet at a bridge in a namespace of its own (the "switch"); addresses come from
# 198.18.0.0/15 (RFC 2544's benchmarking range), and nothing is routed outside the namespaces.
#
#   scripts/cluster.sh up N [--link RATE] [--slow HOST=RATE]   start hosts host1..hostN (198.18.0.1..N)
#   scripts/cluster.sh exec HOST CMD...                        run CMD inside HOST (e.g. host2)
#   scripts/cluster.sh kill HOST                               lose a host: kill -9 every process in it
#   scripts/cluster.sh signal HOST SIG ARG1                    send SIG to the host's processes whose
#                                                              first argument is ARG1 (e.g. KILL train)
#   scripts/cluster.sh list                                    the hosts, their pids and addresses
#   scripts/cluster.sh down                                    end every process in the hosts, remove all
#
# --link shapes every host's link (both directions) with tc's token bucket (tbf; this kernel has no
# netem), e.g. 1gbit or 200mbit; --slow gives one host another rate. Several clusters can be up at
# once under different names: TESSERA_CLUSTER=NAME (at most 6 letters and digits; default "tc").
# Needs root (namespaces, veth, tc).
set -euo pipefail

name=${TESSERA_CLUSTER:-tc}
[[ "$name" =~ ^[a-z0-9]{1,6}$ ]] || { echo "cluster.sh: TESSERA_CLUSTER must be 1-6 lowercase letters or digits" >&2; exit 2; }
state=/tmp/tessera-cluster-$name
switch=tessera-$name-sw

die() { echo "cluster.sh: $*" >&2; exit 1; }
host_pid() { cat "$state/$1.pid" 2>/dev/null || die "no host '$1' in cluster '$name' (scripts/cluster.sh list)"; }
in_host() { local pid; pid=$(host_pid "$1"); shift; nsenter -t "$pid" -n -u -i -m -- "$@"; }

# kill -9 every process in host $1's network namespace but the host itself, which stays (reused).
# All of them are stopped first, then killed: a machine that is lost stops everywhere at once, so no
# process of it may see another die and act on it (one killed in pid order could, and did: an agent
# saw its worker die and began ending the generation before its own kill came).
kill_host() {
  local pid ns victims=()
  pid=$(host_pid "$1")
  ns=$(readlink "/proc/$pid/ns/net")
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" != "$pid" ] && [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$ns" ] && victims+=("${p#/proc/}")
  done
  [ ${#victims[@]} -eq 0 ] && return 0
  kill -STOP "${victims[@]}" 2>/dev/null || true
  kill -9 "${victims[@]}" 2>/dev/null || true
}

# Signal $2 to every process in host $1 whose first argument is $3: "train" picks a host's
# `tessera train` workers and leaves its `tessera run` agent (the hosts share one pid namespace).
signal_in_host() {
  local pid ns args
  pid=$(host_pid "$1")
  ns=$(readlink "/proc/$pid/ns/net")
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$ns" ] || continue
    args=$(tr '\0' '\n' < "$p/cmdline" 2>/dev/null | sed -n 2p) || continue
    [ "$args" = "$3" ] && kill -s "$2" "${p#/proc/}" 2>/dev/null || true
  done
}

down() {
  if [ -d "$state" ]; then
    for file in "$state"/*.pid; do
      [ -e "$file" ] || continue
      pid=$(cat "$file")
      if [ -e "/proc/$pid/ns/net" ]; then
        # Every process inside the host (what exec started too), then the host itself.
        ns=$(readlink "/proc/$pid/ns/net")
        for p in /proc/[0-9]*; do
          [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$ns" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
        done
      fi
    done
    rm -rf "$state"
  fi
  ip netns del "$switch" 2>/dev/null || true
}

up() {
  local n=$1; shift
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "up N: N must be 1..64"
  local link="" slow_host="" slow_rate=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --link) link=$2; shift 2 ;;
      --slow) slow_host=${2%%=*}; slow_rate=${2#*=}; shift 2 ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  [ ! -e "$state" ] || die "cluster '$name' is up already (scripts/cluster.sh down first)"
  mkdir -p "$state"
  trap 'down; exit 1' ERR INT TERM
  ip netns add "$switch"
  ip -n "$switch" link set lo up
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  for i in $(seq 1 "$n"); do
    local host=host$i fifo=$state/host$i.fifo
    mkfifo "$fifo"
    # The host: a sleeping process in new namespaces; it says it is ready through the fifo.
    unshare --net --uts --ipc --mount --propagation private sh -c \
      "mount -t tmpfs -o size=2g tmpfs /dev/shm && hostname $host && echo ready > $fifo && exec sleep infinity" \
      </dev/null >/dev/null 2>&1 &
    echo $! > "$state/$host.pid"
    timeout 10 cat "$fifo" >/dev/null || die "$host did not start"
    rm -f "$fifo"
    local pid; pid=$(cat "$state/$host.pid")
    local inside=t$name$i outside=s$name$i
    # Both ends are made in their namespaces: an interface that appears and vanishes in this machine's
    # own namespace would disturb what runs there meanwhile (Open MPI picks its interfaces at start,
    # and a job of the suite hung on one that had moved away).
    ip link add "$inside" netns "$pid" type veth peer name "$outside" netns "$switch"
    ip -n "$switch" link set "$outside" master br0 up
    nsenter -t "$pid" -n sh -c "ip link set lo up && ip link set $inside name eth0 && \
      ip addr add 198.18.0.$i/24 dev eth0 && ip link set eth0 up"
    local rate=$link
    [ "$host" = "$slow_host" ] && rate=$slow_rate
    if [ -n "$rate" ]; then
      nsenter -t "$pid" -n tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
      ip netns exec "$switch" tc qdisc replace dev "$outside" root tbf rate "$rate" burst 256kb latency 50ms
    fi
    echo "$host 198.18.0.$i ${rate:-unshaped}" >> "$state/hosts"
  done
  trap - ERR INT TERM
  cat "$state/hosts"
}

[ $# -ge 1 ] || die "usage: cluster.sh up N [--link RATE] [--slow HOST=RATE] | exec HOST CMD... | kill HOST | signal HOST SIG ARG1 | list | down"
command=$1; shift
case "$command" in
  up) [ $# -ge 1 ] || die "usage: cluster.sh up N"; up "$@" ;;
  exec) [ $# -ge 2 ] || die "usage: cluster.sh exec HOST CMD..."; in_host "$@" ;;
  kill) [ $# -eq 1 ] || die "usage: cluster.sh kill HOST"; kill_host "$1" ;;
  signal) [ $# -eq 3 ] || die "usage: cluster.sh signal HOST SIG ARG1"; signal_in_host "$@" ;;
  list) [ -e "$state/hosts" ] && cat "$state/hosts" || echo "cluster '$name' is not up" ;;
  down) down ;;
  *) die "unknown command '$command'" ;;
esac
