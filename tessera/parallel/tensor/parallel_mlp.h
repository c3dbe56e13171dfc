// The Transformer MLP split over the tensor-parallel group (Megatron-LM §3, Figure 3a): the first
// Linear column-parallel (C -> 4C/world per rank), GELU on the local slice, the second row-parallel
// (4C/world -> C, all-reduced), then dropout. One all-reduce forward and one backward per MLP.
// Children are named "0".."3" as in the full model's Sequential, so parameter names match it.
// With sequence parallelism the input and output are this rank's tokens (B, T/world, C), and the
// all-reduces become an all-gather and a reduce-scatter (sequence_parallel.h).
#pragma once
#include "tessera/nn/layers.h"
#include "tessera/parallel/tensor/column_parallel_linear.h"
#include "tessera/parallel/tensor/row_parallel_linear.h"

namespace tessera::parallel::tensor {

class ParallelMLP : public nn::Module {
 public:
  // `full` is a TransformerBlock's mlp: Sequential{Linear(C, 4C), GELU, Linear(4C, C), Dropout}.
  ParallelMLP(const nn::Sequential& full, dist::ProcessGroupPtr group, SequenceParallel sequence = {});
  Tensor forward(const Tensor& x) override;  // (..., C) -> (..., C), replicated (or this rank's tokens)
  std::string name() const override { return "ParallelMLP"; }
  std::shared_ptr<ColumnParallelLinear> fc;
  std::shared_ptr<nn::GELU> act;
  std::shared_ptr<RowParallelLinear> proj;
  std::shared_ptr<nn::Dropout> drop;

 private:
  dist::ProcessGroupPtr group_;
  SequenceParallel sequence_;
};

}  // namespace tessera::parallel::tensor
