#include "tessera/parallel/tensor/parallel_attention.h"

namespace tessera::parallel::tensor {

ParallelCausalSelfAttention::ParallelCausalSelfAttention(const nn::CausalSelfAttention& full,
                                                         dist::ProcessGroupPtr group, SequenceParallel sequence)
    : embed_dim(full.embed_dim), num_heads(full.num_heads), group_(group), sequence_(sequence) {
  TESSERA_CHECK(group != nullptr, "[ParallelCausalSelfAttention] needs a tensor-parallel process group, got null");
  const int world = group->size();
  TESSERA_CHECK(num_heads % world == 0, "[ParallelCausalSelfAttention] ", num_heads, " heads do not split evenly over "
                "a tensor-parallel group of ", world, " ranks; choose a tensor-parallel size that divides the heads");
  local_heads = num_heads / world;
  // Context parallelism of the whole layer carries over: this rank's heads attend across its group.
  context_ = full.context_group();
  context_attention_ = full.context_attention();
  TESSERA_CHECK(!context_ || context_attention_ != parallel::context::ContextAttention::Ulysses ||
                    local_heads % context_->size() == 0,
                "[ParallelCausalSelfAttention] Ulysses: this rank's ", local_heads, " heads do not divide over the ",
                context_->size(), " ranks of the context group; use ring attention, or a parallel.tp that leaves a "
                "multiple of parallel.cp heads per rank");
  qkv = register_module("qkv", std::make_shared<ColumnParallelLinear>(*full.qkv, group, ColumnParallelOptions{false, 3, sequence}));
  proj = register_module("proj", std::make_shared<RowParallelLinear>(*full.proj, group, RowParallelOptions{true, sequence}));
  drop = register_module("drop", std::make_shared<nn::Dropout>(full.drop->p));
}

Tensor ParallelCausalSelfAttention::forward(const Tensor& x) {
  TESSERA_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == embed_dim, "[ParallelCausalSelfAttention] expected "
                "(B, T, ", embed_dim, "), got ", x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  // qkv: (B, T, 3·local), this rank's heads of the whole sequence (also under sequence parallelism),
  // or of this rank's part of it under context parallelism, whose attention then spans the group.
  Tensor y = proj->forward(nn::causal_attention(qkv->forward(x), local_heads, context_, context_attention_));
  return dropout_of(*drop, y, sequence_, group_);
}

}  // namespace tessera::parallel::tensor
