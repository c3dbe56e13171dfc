#!/usr/bin/env bash
# DDP against local SGD / DiLoCo across 4 test hosts × 1 rank on a shaped link (scripts/cluster.sh:
# network namespaces, tc tbf), the MLP 784-512-256-10 on Fashion-MNIST for 2 epochs at a global batch
# of 256: each run's wall time and final test accuracy (docs/benchmarks.md). Needs root.
#   scripts/local_sgd_hosts.sh [RATE]          RATE: 200mbit (default), 1gbit, ...
set -u
cd "$(dirname "$0")/.."
rate=${1:-200mbit}
out=$(mktemp -d /tmp/tessera_local_sgd_hosts.XXXXXX)
cluster="env TESSERA_CLUSTER=l$(($$ % 100000)) bash scripts/cluster.sh"
bin=$PWD/build/tessera
trap '$cluster down >/dev/null 2>&1' EXIT
$cluster up 4 --link "$rate" > "$out/cluster.log" 2>&1 || { cat "$out/cluster.log"; exit 1; }
run() {  # tag, then the training's extra arguments
  local tag=$1; shift
  local start; start=$(date +%s.%N)
  export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef
  local pids=()
  for node in 0 1 2 3; do
    timeout -k 5 900 $cluster exec host$((node + 1)) "$bin" run --nnodes 4 --node-rank $node --nproc-per-node 1 \
      --master-addr 198.18.0.1 --master-port 29500 -- "$bin" train "$PWD/examples/mlp.toml" --set train.epochs=2 \
      --set train.batch_size=64 --set train.threads=1 --set train.log_every=1000 --set train.output_dir="$out/$tag" "$@" \
      > "$out/$tag-$node.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  printf '%-34s status %d, %6.1f s, %s\n' "$tag" "$status" "$(echo "$(date +%s.%N) - $start" | bc)" \
    "$(grep -ho 'final test accuracy [0-9.]*%' "$out/$tag-0.log" | tail -1)"
}
run "ddp"
run "local sgd H=4 (outer 1, no momentum)" --set distributed.local_sgd=4 --set distributed.outer_lr=1 --set distributed.outer_momentum=0
run "diloco H=4 (outer 0.7, momentum 0.5)" --set distributed.local_sgd=4 --set distributed.outer_momentum=0.5
run "diloco H=4 (outer 0.7, momentum 0.9)" --set distributed.local_sgd=4
run "diloco H=8 (outer 0.7, momentum 0.9)" --set distributed.local_sgd=8
echo "logs and metrics: $out"
