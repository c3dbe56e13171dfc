#include "tessera/nn/transformer.h"

#include "tessera/nn/checkpoint.h"
#include "tessera/parallel/context/ring_attention.h"
#include "tessera/parallel/context/ulysses.h"

namespace tessera::nn {

CausalSelfAttention::CausalSelfAttention(int64_t c, int64_t h, float p) : embed_dim(c), num_heads(h) {
  TESSERA_CHECK(h > 0 && c % h == 0, "[CausalSelfAttention] embed_dim ", c, " must be divisible by num_heads ", h);
  qkv = register_module("qkv", std::make_shared<Linear>(c, 3 * c));
  proj = register_module("proj", std::make_shared<Linear>(c, c));
  drop = register_module("drop", std::make_shared<Dropout>(p));
}

Tensor causal_attention(const Tensor& fused_qkv, int64_t heads, const dist::ProcessGroupPtr& context,
                        parallel::context::ContextAttention attention) {
  using parallel::context::ContextAttention;
  if (context && attention == ContextAttention::Ulysses) {  // q, k, v: the whole sequence, this rank's heads
    auto [q, k, v] = parallel::context::sequence_to_heads(fused_qkv, heads, *context);
    return parallel::context::heads_to_sequence(scaled_dot_product_attention(q, k, v, true), *context);
  }
  const int64_t B = fused_qkv.shape()[0], T = fused_qkv.shape()[1], width = fused_qkv.shape()[2] / 3;
  const int64_t hd = width / heads;
  auto parts = split(fused_qkv, width, 2);  // 3 x (B, T, heads·hd)
  auto split_heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, heads, hd}), 1, 2); };  // (B, H, T, hd)
  Tensor y;
  if (context) {  // ring: this rank's queries against every rank's keys, passed around the group
    std::vector<std::vector<parallel::context::TokenRun>> runs;
    for (int r = 0; r < context->size(); ++r) runs.push_back(parallel::context::context_runs(r, context->size(), T, attention));
    y = parallel::context::ring_attention(split_heads(parts[0]), split_heads(parts[1]), split_heads(parts[2]), runs,
                                          *context);
  } else {
    y = scaled_dot_product_attention(split_heads(parts[0]), split_heads(parts[1]), split_heads(parts[2]), true);
  }
  return reshape(transpose(y, 1, 2), {B, T, width});
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  TESSERA_CHECK(x.dim() == 3 && x.shape()[2] == embed_dim, "[CausalSelfAttention] expected (B, T, ", embed_dim,
                "), got ", shape_str(x.shape()));
  return drop->forward(proj->forward(causal_attention(qkv->forward(x), num_heads, context_, attention_)));
}

void CausalSelfAttention::spread_sequence(dist::ProcessGroupPtr group, parallel::context::ContextAttention attention) {
  TESSERA_CHECK(group != nullptr, "[context parallel] spread_sequence needs a process group");
  TESSERA_CHECK(attention != parallel::context::ContextAttention::Ulysses || num_heads % group->size() == 0,
                "[context parallel] Ulysses: ", num_heads, " heads do not divide over ", group->size(),
                " ranks (each rank attends with whole heads); ring attention takes any number");
  context_ = std::move(group);
  attention_ = attention;
}

TransformerBlock::TransformerBlock(int64_t c, int64_t h, float p, const MoeConfig& experts) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(Shape{c}));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c, h, p));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(Shape{c}));
  if (experts.experts > 0) {
    moe = register_module("moe", std::make_shared<MixtureOfExperts>(c, 4 * c, experts, p));
    return;
  }
  mlp = register_module("mlp", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                                   std::make_shared<Linear>(c, 4 * c), std::make_shared<GELU>(),
                                   std::make_shared<Linear>(4 * c, c), std::make_shared<Dropout>(p)}));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  if (checkpoint_activations && is_training())
    return checkpoint([this](const Tensor& input) { return forward_block(input); }, x, parameters());
  return forward_block(x);
}

Tensor TransformerBlock::forward_block(const Tensor& x) {
  Tensor h = add(x, attn->forward(ln_1->forward(x)));
  Tensor normed = ln_2->forward(h);
  return add(h, moe ? moe->forward(normed) : mlp->forward(normed));
}

}  // namespace tessera::nn
