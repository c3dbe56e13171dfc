# Sourced by the scripts that train across test hosts (hsdp_hosts.sh, local_sgd_hosts.sh): test hosts
# on a shaped link (scripts/cluster.sh, removed on exit) and a training job across them. Needs root.
#   hosts_up N RATE               N hosts, each link shaped to RATE; sets $out (logs and runs)
#   host_job TAG NODES NPROC ...  `tessera train examples/mlp.toml` on NODES hosts × NPROC ranks with the
#                                 extra arguments, bounded; prints TAG, status, wall time, final accuracy
#   sent_bytes                    what hosts 1 and 2 have sent on eth0 (their own /proc/net/dev)
cluster="env TESSERA_CLUSTER=j$(($$ % 100000)) bash $PWD/scripts/cluster.sh"
bin=$PWD/build/tessera
config=$PWD/examples/mlp.toml  # absolute: inside a host the working directory differs
trap '$cluster down >/dev/null 2>&1' EXIT

hosts_up() {
  out=$(mktemp -d /tmp/tessera_host_jobs.XXXXXX)
  $cluster up "$1" --link "$2" > "$out/cluster.log" 2>&1 || { cat "$out/cluster.log"; exit 1; }
}

sent_bytes() {
  local total=0
  for host in 1 2; do
    total=$((total + $($cluster exec host$host cat /proc/net/dev | awk -F'[: ]+' '/eth0:/ {print $11}')))
  done
  echo "$total"
}

host_job() {
  local tag=$1 nodes=$2 nproc=$3; shift 3
  local start; start=$(date +%s.%N)
  export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef
  local pids=()
  for ((node = 0; node < nodes; ++node)); do
    timeout -k 5 900 $cluster exec host$((node + 1)) "$bin" run --nnodes "$nodes" --node-rank $node \
      --nproc-per-node "$nproc" --master-addr 198.18.0.1 --master-port 29500 -- "$bin" train "$config" \
      --set train.batch_size=64 --set train.threads=1 --set train.log_every=1000 --set train.output_dir="$out/$tag" \
      "$@" > "$out/$tag-$node.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  printf '%-36s status %d, %6.1f s, %s' "$tag" "$status" "$(echo "$(date +%s.%N) - $start" | bc)" \
    "$(grep -ho 'final test accuracy [0-9.]*%' "$out/$tag-0.log" | tail -1)"
}
