// Causal self-attention with its heads split over the tensor-parallel group (Megatron-LM §3,
// Figure 3b): rank r keeps heads [H·r/world, H·(r+1)/world) — their q, k and v rows of the fused qkv
// weight (a column-parallel Linear of three blocks) and their columns of the output projection (a
// row-parallel Linear). Attention itself needs no communication; the projection's all-reduce joins
// the heads. The number of heads must be divisible by the group's size. With sequence parallelism the
// input and output are this rank's tokens (B, T/world, C); attention runs on the whole sequence.
// A full layer spread over a context group (context parallelism) gives a shard that attends over it.
#pragma once
#include "tessera/nn/transformer.h"
#include "tessera/parallel/tensor/column_parallel_linear.h"
#include "tessera/parallel/tensor/row_parallel_linear.h"

namespace tessera::parallel::tensor {

class ParallelCausalSelfAttention : public nn::Module {
 public:
  ParallelCausalSelfAttention(const nn::CausalSelfAttention& full, dist::ProcessGroupPtr group,
                              SequenceParallel sequence = {});
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C), replicated (or this rank's tokens)
  std::string name() const override { return "ParallelCausalSelfAttention"; }
  int64_t embed_dim, num_heads;  // of the full layer
  int64_t local_heads;           // num_heads / world
  std::shared_ptr<ColumnParallelLinear> qkv;  // C -> 3 x (local_heads x head_dim)
  std::shared_ptr<RowParallelLinear> proj;    // local_heads x head_dim -> C
  std::shared_ptr<nn::Dropout> drop;

 private:
  dist::ProcessGroupPtr group_;
  SequenceParallel sequence_;
  dist::ProcessGroupPtr context_;  // context parallelism (the full layer's spread_sequence); null: none
  parallel::context::ContextAttention context_attention_ = parallel::context::ContextAttention::Ring;
};

}  // namespace tessera::parallel::tensor
