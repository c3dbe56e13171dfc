// The pre-norm Transformer block with attention and MLP split over the tensor-parallel group and
// the LayerNorms replicated (each rank holds a copy; their gradients come out the same on every rank
// because the parallel layers' copy_to mapping sums the input gradient). Two all-reduces forward and
// two backward per block, as Megatron-LM. With sequence parallelism the block takes and gives this
// rank's tokens (B, T/world, C), and the gradients of the LayerNorms and of the row-parallel biases
// are partial sums (sequence_parallel.h).
#pragma once
#include "tessera/nn/transformer.h"
#include "tessera/parallel/tensor/parallel_attention.h"
#include "tessera/parallel/tensor/parallel_mlp.h"

namespace tessera::parallel::tensor {

class ParallelTransformerBlock : public nn::Module {
 public:
  ParallelTransformerBlock(const nn::TransformerBlock& full, dist::ProcessGroupPtr group, SequenceParallel sequence = {});
  // Under sequence parallelism, the parameters used on this rank's tokens only (the LayerNorms, the
  // row-parallel biases), whose gradients are partial sums over the group; empty without it.
  std::vector<Tensor> token_parameters() const;
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override { return "ParallelTransformerBlock"; }
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<ParallelCausalSelfAttention> attn;
  std::shared_ptr<ParallelMLP> mlp;

 private:
  bool sequence_parallel_ = false;
};

}  // namespace tessera::parallel::tensor
