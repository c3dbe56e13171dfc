// A Linear whose input features are split over the tensor-parallel group (Megatron-LM's
// RowParallelLinear): rank r holds columns shard_range(in, r, world) of the weight (out, in), so it
// computes a partial sum of the output from its slice of the input; the partial sums are all-reduced
// (reduce_from_tensor_parallel_region) and the full bias is added once, after the reduction.
#pragma once
#include "tessera/dist/process_group.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/tensor/sequence_parallel.h"
#include "tessera/parallel/tensor/sharding.h"

namespace tessera::parallel::tensor {

struct RowParallelOptions {
  // true: the input is already this rank's slice (..., in_local), as a ColumnParallelLinear without
  // gather_output leaves it; false: the full input (..., in) is given and scattered here.
  bool input_is_parallel = true;
  // Enabled: the partial sums are reduce-scattered over the tokens, the output this rank's tokens
  // (B, T/world, out) (sequence_parallel.h); needs input_is_parallel.
  SequenceParallel sequence;
};

class RowParallelLinear : public nn::Module, public ShardedLayer {
 public:
  // This rank's columns of `full` (copied); the bias is replicated.
  RowParallelLinear(const nn::Linear& full, dist::ProcessGroupPtr group, RowParallelOptions options = {});
  Tensor forward(const Tensor& x) override;  // (..., in_local) or (..., in) -> (..., out)
  std::string name() const override { return "RowParallelLinear"; }
  std::vector<std::pair<std::string, ShardSpec>> shard_specs() const override;
  const dist::ProcessGroupPtr& group() const { return group_; }

  int64_t in_features, out_features;
  RowParallelOptions options;
  Tensor weight;  // (out, in_local)
  Tensor bias;    // (out), the same on every rank, or undefined

 private:
  dist::ProcessGroupPtr group_;
};

}  // namespace tessera::parallel::tensor
