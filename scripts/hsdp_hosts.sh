#!/usr/bin/env bash
# DDP, ZeRO-3 and hybrid sharding (HSDP, ZeRO-3 inside each host) across 2 test hosts × 2 ranks on a
# shaped link (scripts/cluster.sh: network namespaces, tc tbf): the MLP 784-512-256-10 on
# Fashion-MNIST for 1 epoch at a global batch of 256: each run's wall time, final test accuracy and
# the bytes the hosts sent each other (their eth0 counters). Needs root.
#   scripts/hsdp_hosts.sh [RATE]          RATE: 1gbit (default), 200mbit, ...
set -u
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
out=$(mktemp -d /tmp/tessera_hsdp_hosts.XXXXXX)
cluster="env TESSERA_CLUSTER=h$(($$ % 100000)) bash scripts/cluster.sh"
bin=$PWD/build/tessera
trap '$cluster down >/dev/null 2>&1' EXIT
$cluster up 2 --link "$rate" > "$out/cluster.log" 2>&1 || { cat "$out/cluster.log"; exit 1; }
sent() {  # bytes both hosts have sent on eth0 (each host's own /proc/net/dev)
  local total=0
  for host in 1 2; do
    total=$((total + $($cluster exec host$host cat /proc/net/dev | awk -F'[: ]+' '/eth0:/ {print $11}')))
  done
  echo "$total"
}
run() {  # tag, then the training's extra arguments
  local tag=$1; shift
  local before; before=$(sent)
  local start; start=$(date +%s.%N)
  export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef
  local pids=()
  for node in 0 1; do
    timeout -k 5 900 $cluster exec host$((node + 1)) "$bin" run --nnodes 2 --node-rank $node --nproc-per-node 2 \
      --master-addr 198.18.0.1 --master-port 29500 -- "$bin" train "$PWD/examples/mlp.toml" --set train.epochs=1 \
      --set train.batch_size=64 --set train.threads=1 --set train.log_every=1000 --set train.output_dir="$out/$tag" "$@" \
      > "$out/$tag-$node.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  printf '%-8s status %d, %6.1f s, %s, %d MB between the hosts\n' "$tag" "$status" \
    "$(echo "$(date +%s.%N) - $start" | bc)" "$(grep -ho 'final test accuracy [0-9.]*%' "$out/$tag-0.log" | tail -1)" \
    "$((($(sent) - before) / 1000000))"
}
run ddp
run zero3 --set distributed.strategy=zero --set distributed.zero_stage=3
run hsdp --set distributed.strategy=hsdp --set distributed.zero_stage=3
echo "logs and metrics: $out"
