#!/usr/bin/env bash
# Open MPI's MPI_Allreduce across test hosts (scripts/cluster.sh), the reference beside
# `tessera bench comm` on the same hosts (docs/benchmarks.md). mpirun runs inside host1 and starts
# its daemons in the other hosts through an rsh agent that enters a host by its address (198.18.0.N
# is hostN), so every byte goes over the hosts' veth links, as tessera's does.
#
#   bench/mpi_on_test_hosts.sh HOSTS [PROCS_PER_HOST] [MIN_BYTES] [MAX_BYTES]
#
# Needs a cluster that is up (TESSERA_CLUSTER names it, as for cluster.sh), the release build
# (build/tessera_ref_mpi_allreduce) and openmpi-bin. Prints the reference's JSON lines.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hosts=${1:?usage: mpi_on_test_hosts.sh HOSTS [PROCS_PER_HOST] [MIN_BYTES] [MAX_BYTES]}
per_host=${2:-1}
min_bytes=${3:-4096}
max_bytes=${4:-67108864}
cluster="$root/scripts/cluster.sh"
agent=$(mktemp /tmp/tessera-rsh-XXXXXX)
trap 'rm -f "$agent"' EXIT
# mpirun calls the agent as: AGENT [options] HOST COMMAND...; the command is one shell string.
cat > "$agent" <<EOF
#!/usr/bin/env bash
while [ "\${1:-}" != "" ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
exec env TESSERA_CLUSTER=${TESSERA_CLUSTER:-tc} bash "$cluster" exec "host\${host##*.}" bash -c "\$*"
EOF
chmod +x "$agent"
list=""
for ((h = 1; h <= hosts; h++)); do list+="${list:+,}198.18.0.$h:$per_host"; done
exec bash "$cluster" exec host1 mpirun --allow-run-as-root --bind-to none -np $((hosts * per_host)) -H "$list" \
  --mca plm_rsh_agent "$agent" --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  "$root/build/tessera_ref_mpi_allreduce" "$min_bytes" "$max_bytes"
