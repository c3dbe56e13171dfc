#!/usr/bin/env bash
# Figures of issue 52's context parallelism and mixture of experts, each from real `tessera train`
# runs of examples/char_lm.toml on this machine (the step records' metrics):
#   1. per-rank peak memory and tokens/s of the GPT (2 layers, width 64) at contexts 256-4096 and
#      parallel.cp = 1, 2, 4 (ring, and Ulysses at CP = 4), global batch 8;
#   2. the mixture of experts (4 layers, width 128, 8 experts, top 2) beside the dense GPT, under DDP,
#      ZeRO-3 and parallel.ep = 2, 2 ranks, batch 32 each: tokens/s, peak memory per rank, and the
#      all-to-all's time in the step with expert parallelism;
#   3. `tessera bench comm --op alltoall` at the size of the experts' all-to-all, in the same run;
#   4. context parallelism inside the mesh: TP = 2 and PP = 2 with and without CP = 2 (and sequence
#      parallelism) at 1024 tokens: peak memory per rank and tokens/s.
# Usage: bench/long_context_and_experts.sh [TESSERA_BINARY]   (about 5 minutes on 2 cores)
set -euo pipefail
tessera=${1:-build/tessera}
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-lcx.XXXXXX")
trap 'rm -rf "$work"' EXIT

last_step() {  # run dir, then the keys to print from the median of the last records
  python3 - "$@" <<'PY'
import json, statistics, sys
run, keys = sys.argv[1], sys.argv[2:]
steps = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if r.get("type") == "step"]
tail = steps[-max(1, len(steps) // 2):]
print(" ".join(f"{k}={statistics.median(r.get(k, 0) for r in tail):.6g}" for k in keys))
PY
}

echo "# context parallelism: peak MiB per rank, tokens/s"
for layout in "1 256 ring" "1 512 ring" "1 1024 ring" "2 512 ring" "2 1024 ring" "2 2048 ring" "4 1024 ring" \
              "4 2048 ring" "4 4096 ring" "4 1024 ulysses"; do
  read -r cp context attention <<<"$layout"
  out="$work/cp-$cp-$context-$attention"
  "$tessera" train examples/char_lm.toml --nproc "$cp" --set parallel.cp="$cp" --set parallel.cp_attention="$attention" \
    --set model.context="$context" --set model.layers=2 --set model.embed_dim=64 --set model.dropout=0 \
    --set train.global_batch_size=8 --set train.max_steps=6 --set train.log_every=1 --set train.output_dir="$out" \
    >"$out.log" 2>&1
  echo "cp=$cp context=$context $attention $(last_step "$out" peak_allocated_bytes tokens_per_s)"
done

echo "# context parallelism inside the mesh: the GPT of 2 layers, width 64, context 1024, 4 sequences a step"
for layout in "tp2|2|--set parallel.tp=2" "tp2cp2|4|--set parallel.tp=2 --set parallel.cp=2" \
              "tp2cp2sp|4|--set parallel.tp=2 --set parallel.cp=2 --set parallel.sequence_parallel=true" \
              "pp2|2|--set parallel.pp=2 --set parallel.microbatches=2" \
              "pp2cp2|4|--set parallel.pp=2 --set parallel.cp=2 --set parallel.microbatches=2"; do
  IFS='|' read -r name nproc extra <<<"$layout"
  out="$work/mesh-$name"
  # shellcheck disable=SC2086
  "$tessera" train examples/char_lm.toml --nproc "$nproc" $extra --set model.layers=2 --set model.embed_dim=64 \
    --set model.context=1024 --set model.dropout=0 --set train.batch_size=4 --set train.max_steps=8 \
    --set train.log_every=1 --set train.output_dir="$out" >"$out.log" 2>&1
  echo "$name $(last_step "$out" peak_allocated_bytes tokens_per_s)"
done

echo "# mixture of experts, 2 ranks"
for layout in "dense|" "dense-zero3|--set distributed.strategy=zero --set distributed.zero_stage=3" \
              "experts-replicated|--set model.experts=8" \
              "experts-zero3|--set model.experts=8 --set distributed.strategy=zero --set distributed.zero_stage=3" \
              "experts-ep2|--set model.experts=8 --set parallel.ep=2"; do
  name=${layout%%|*}
  out="$work/$name"
  # shellcheck disable=SC2086
  "$tessera" train examples/char_lm.toml --nproc 2 ${layout#*|} --set model.layers=4 --set model.embed_dim=128 \
    --set model.dropout=0 --set train.batch_size=32 --set train.max_steps=60 --set train.log_every=1 \
    --set train.output_dir="$out" >"$out.log" 2>&1
  echo "$name $(last_step "$out" tokens_per_s peak_allocated_bytes moe_alltoall_ms moe_alltoall_calls moe_alltoall_bytes_per_call)"
done
bytes=$(python3 -c "import json; print([r for r in map(json.loads, open('$work/experts-ep2/metrics.jsonl')) if r.get('type') == 'step'][-1]['moe_alltoall_bytes_per_call'])")
echo "# tessera bench comm --backend shm --op alltoall at $bytes bytes (warm, then a first call)"
"$tessera" run --nproc-per-node 2 -- "$tessera" bench comm --backend shm --op alltoall --min-bytes "$bytes" --max-bytes "$bytes" 2>&1 | grep -v '#' | tail -1
"$tessera" run --nproc-per-node 2 -- "$tessera" bench comm --backend shm --op alltoall --min-bytes "$bytes" --max-bytes "$bytes" --warmup 0 --iters 1 2>&1 | grep -v '#' | tail -1
