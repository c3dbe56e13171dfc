#!/usr/bin/env bash
# DDP against local SGD / DiLoCo across 4 test hosts × 1 rank on a shaped link, the MLP 784-512-256-10
# on Fashion-MNIST for 2 epochs at a global batch of 256: each run's wall time and final test accuracy
# (docs/benchmarks.md). Needs root.
#   scripts/local_sgd_hosts.sh [RATE]          RATE: 200mbit (default), 1gbit, ...
set -u
cd "$(dirname "$0")/.."
source scripts/host_jobs.sh
hosts_up 4 "${1:-200mbit}"
run() { host_job "$1" 4 1 --set train.epochs=2 "${@:2}"; echo; }
run "ddp"
run "local sgd H=4 (outer 1, no momentum)" --set distributed.local_sgd=4 --set distributed.outer_lr=1 --set distributed.outer_momentum=0
run "diloco H=4 (outer 0.7, momentum 0.5)" --set distributed.local_sgd=4 --set distributed.outer_momentum=0.5
run "diloco H=4 (outer 0.7, momentum 0.9)" --set distributed.local_sgd=4
run "diloco H=8 (outer 0.7, momentum 0.9)" --set distributed.local_sgd=8
echo "logs and metrics: $out"
