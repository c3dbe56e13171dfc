#!/usr/bin/env bash
# All-reduce across test hosts (scripts/cluster.sh), every contender in one session on the same
# hosts: tessera's backends (`tessera bench comm`), Open MPI (bench/mpi_on_test_hosts.sh) and the
# links' own round trip and bandwidth (`tessera doctor`, plain TCP between every pair of hosts).
#
#   bench/comm_on_test_hosts.sh HOSTS PROCS_PER_HOST LINK [BACKENDS] [MIN_BYTES] [MAX_BYTES]
#
# LINK: unshaped, or a tc rate such as 1gbit. BACKENDS: comma-separated (default auto,tcp,gloo).
# Makes its own cluster (named by TESSERA_CLUSTER, default "cb") and removes it on every exit path.
# Needs root, the release build (build/tessera, build/tessera_ref_mpi_allreduce) and openmpi-bin.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hosts=${1:?usage: comm_on_test_hosts.sh HOSTS PROCS_PER_HOST LINK [BACKENDS] [MIN_BYTES] [MAX_BYTES]}
per_host=${2:?procs per host}
link=${3:?link: unshaped or a tc rate}
backends=${4:-auto,tcp,gloo}
min_bytes=${5:-4096}
max_bytes=${6:-67108864}
export TESSERA_CLUSTER=${TESSERA_CLUSTER:-cb}
cluster="$root/scripts/cluster.sh"
bin="$root/build/tessera"
out=$(mktemp -d /tmp/tessera-comm-hosts-XXXXXX)
trap 'bash "$cluster" down >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
link_args=()
[ "$link" = unshaped ] || link_args=(--link "$link")
bash "$cluster" up "$hosts" "${link_args[@]}" > "$out/cluster.log" 2>&1 || { cat "$out/cluster.log" >&2; exit 1; }
export TESSERA_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
# One job of `tessera run` per host, all started together, each bounded.
across() {  # across NPROC_PER_HOST COMMAND...
  local nproc=$1; shift
  local pids=() status=0
  for ((h = 0; h < hosts; h++)); do
    timeout -k 5 600 bash "$cluster" exec "host$((h + 1))" "$bin" run --nnodes "$hosts" --node-rank "$h" \
      --nproc-per-node "$nproc" --master-addr 198.18.0.1 --master-port 29500 -- "$@" > "$out/node$h.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  if [ $status -ne 0 ]; then for ((h = 0; h < hosts; h++)); do cat "$out/node$h.log" >&2; done; return 1; fi
  cat "$out/node0.log"
}
echo "== $hosts hosts x $per_host, link $link"
echo "-- plain TCP between the hosts (tessera doctor: 4 KiB round trip, one way)"
across 1 "$bin" doctor
echo "-- plain TCP both ways at once between host1 and host2 (bench/tcp_both_ways.py, 256 MiB)"
bash "$cluster" exec host1 python3 "$root/bench/tcp_both_ways.py" serve 29700 268435456 &
server=$!
bash "$cluster" exec host2 python3 "$root/bench/tcp_both_ways.py" connect 198.18.0.1 29700 268435456
wait $server
for b in ${backends//,/ }; do
  echo "-- tessera $b"
  across "$per_host" "$bin" bench comm --backend "$b" --op allreduce --min-bytes "$min_bytes" --max-bytes "$max_bytes"
done
echo "-- Open MPI"
bash "$root/bench/mpi_on_test_hosts.sh" "$hosts" "$per_host" "$min_bytes" "$max_bytes"
