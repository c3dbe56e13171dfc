// Causal multi-head self-attention and the pre-norm Transformer block (GPT-2 layout):
//   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x)),  mlp = Linear(C, 4C) - GELU - Linear(4C, C),
// or, with moe.experts > 0, a mixture of such MLPs in its place (nn/mixture_of_experts.h, "moe").
#pragma once
#include "tessera/nn/layers.h"
#include "tessera/nn/mixture_of_experts.h"
#include "tessera/parallel/context/layout.h"

namespace tessera::nn {

// Causal attention of `heads` heads whose q, k and v come packed as (B, T, 3·heads·head_dim): over
// these T tokens alone, or, with a `context` group (context parallelism), over the whole sequence the
// group holds in parts, by ring attention or Ulysses' head exchange. -> (B, T, heads·head_dim).
// Shared by the whole attention and its tensor-parallel shard (which holds some of the heads).
Tensor causal_attention(const Tensor& fused_qkv, int64_t heads, const dist::ProcessGroupPtr& context,
                        parallel::context::ContextAttention attention);

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t embed_dim, int64_t num_heads, float dropout = 0.0f);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override { return "CausalSelfAttention"; }
  // Context parallelism: x then holds this rank's part of the sequence (parallel/context/layout.h),
  // and attention runs over the whole of it with `group`: by ring attention (ring_attention.h) or
  // by Ulysses' head exchange (ulysses.h).
  void spread_sequence(dist::ProcessGroupPtr group, parallel::context::ContextAttention attention);
  const dist::ProcessGroupPtr& context_group() const { return context_; }  // null: not spread
  parallel::context::ContextAttention context_attention() const { return attention_; }
  int64_t embed_dim, num_heads;
  std::shared_ptr<Linear> qkv;   // C -> 3C
  std::shared_ptr<Linear> proj;  // C -> C
  std::shared_ptr<Dropout> drop;

 private:
  dist::ProcessGroupPtr context_;
  parallel::context::ContextAttention attention_ = parallel::context::ContextAttention::Ring;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t embed_dim, int64_t num_heads, float dropout = 0.0f, const MoeConfig& moe = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "TransformerBlock"; }
  // Activation checkpointing (nn/checkpoint.h): keep only the block's input in training, recompute
  // the rest in backward.
  bool checkpoint_activations = false;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<Sequential> mlp;            // null where the block has experts
  std::shared_ptr<MixtureOfExperts> moe;     // null where it has one MLP

 private:
  Tensor forward_block(const Tensor& x);
};

}  // namespace tessera::nn
