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
  qkv = register_module("qkv", std::make_shared<ColumnParallelLinear>(*full.qkv, group, ColumnParallelOptions{false, 3, sequence}));
  proj = register_module("proj", std::make_shared<RowParallelLinear>(*full.proj, group, RowParallelOptions{true, sequence}));
  drop = register_module("drop", std::make_shared<nn::Dropout>(full.drop->p));
}

Tensor ParallelCausalSelfAttention::forward(const Tensor& x) {
  TESSERA_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == embed_dim, "[ParallelCausalSelfAttention] expected "
                "(B, T, ", embed_dim, "), got ", x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  Tensor fused = qkv->forward(x);  // (B, T, 3·local): the whole sequence, also under sequence parallelism
  const int64_t B = x.shape()[0], T = fused.shape()[1], hd = embed_dim / num_heads, local = local_heads * hd;
  auto parts = split(fused, local, 2);  // 3 x (B, T, local)
  auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, local_heads, hd}), 1, 2); };  // (B, h, T, hd)
  Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true);
  y = reshape(transpose(y, 1, 2), {B, T, local});
  y = proj->forward(y);
  return sequence_.enabled ? sequence_parallel_dropout(y, drop->p, drop->is_training(), group_) : drop->forward(y);
}

}  // namespace tessera::parallel::tensor
