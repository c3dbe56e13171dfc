#!/usr/bin/env bash
# DDP, ZeRO-3 and hybrid sharding (HSDP, ZeRO-3 inside each host) across 2 test hosts × 2 ranks on a
# shaped link: the MLP 784-512-256-10 on Fashion-MNIST for 1 epoch at a global batch of 256: each
# run's wall time, final test accuracy and the bytes the hosts sent each other (their eth0 counters).
# Needs root.
#   scripts/hsdp_hosts.sh [RATE]          RATE: 1gbit (default), 200mbit, ...
set -u
cd "$(dirname "$0")/.."
source scripts/host_jobs.sh
hosts_up 2 "${1:-1gbit}"
run() {  # tag, then the training's extra arguments
  local before; before=$(sent_bytes)
  host_job "$1" 2 2 --set train.epochs=1 "${@:2}"
  echo ", $((($(sent_bytes) - before) / 1000000)) MB between the hosts"
}
run ddp
run zero3 --set distributed.strategy=zero --set distributed.zero_stage=3
run hsdp --set distributed.strategy=hsdp --set distributed.zero_stage=3
echo "logs and metrics: $out"
