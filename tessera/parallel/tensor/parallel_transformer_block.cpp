#include "tessera/parallel/tensor/parallel_transformer_block.h"

#include "tessera/parallel/tensor/replicated.h"

namespace tessera::parallel::tensor {

ParallelTransformerBlock::ParallelTransformerBlock(const nn::TransformerBlock& full, dist::ProcessGroupPtr group,
                                                   SequenceParallel sequence)
    : sequence_parallel_(sequence.enabled) {
  TESSERA_CHECK(full.mlp != nullptr, "[tensor parallel] a block whose MLP is a mixture of experts cannot be split "
                "by tensor parallelism yet: spread its experts with parallel.ep instead");
  ln_1 = register_module("ln_1", replicate(*full.ln_1));
  attn = register_module("attn", std::make_shared<ParallelCausalSelfAttention>(*full.attn, group, sequence));
  ln_2 = register_module("ln_2", replicate(*full.ln_2));
  mlp = register_module("mlp", std::make_shared<ParallelMLP>(*full.mlp, group, sequence));
}

std::vector<Tensor> ParallelTransformerBlock::token_parameters() const {
  if (!sequence_parallel_) return {};
  std::vector<Tensor> out = ln_1->parameters();
  for (const Tensor& t : ln_2->parameters()) out.push_back(t);
  for (const Tensor& bias : {attn->proj->bias, mlp->proj->bias})
    if (bias.defined()) out.push_back(bias);
  return out;
}

Tensor ParallelTransformerBlock::forward(const Tensor& x) {
  Tensor h = add(x, attn->forward(ln_1->forward(x)));
  return add(h, mlp->forward(ln_2->forward(h)));
}

}  // namespace tessera::parallel::tensor
