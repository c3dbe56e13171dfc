// A Linear whose output features are split over the tensor-parallel group (Megatron-LM's
// ColumnParallelLinear): rank r holds rows shard_range(out, r, world) of the weight (out, in) and of
// the bias, so it computes its slice of the output from the whole input. The input enters through
// copy_to_tensor_parallel_region, whose backward sums the input gradient over the ranks; or, with
// sequence parallelism, through the all-gather of all_gather_linear, whose backward reduce-scatters it.
#pragma once
#include "tessera/dist/process_group.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/tensor/sequence_parallel.h"
#include "tessera/parallel/tensor/sharding.h"

namespace tessera::parallel::tensor {

struct ColumnParallelOptions {
  // true: all-gather the output to (..., out) on every rank; false: leave (..., out_local) for a
  // following RowParallelLinear or a vocab-parallel loss.
  bool gather_output = true;
  // The output features are `blocks` equal blocks each split over the ranks (3 for attention's fused
  // [q; k; v]); gather_output needs blocks == 1.
  int64_t blocks = 1;
  // Enabled: the input is this rank's tokens (B, T/world, in), all-gathered over the tokens on the
  // way in, the output (B, T, out_local) (sequence_parallel.h); needs gather_output false.
  SequenceParallel sequence;
};

class ColumnParallelLinear : public nn::Module, public ShardedLayer {
 public:
  // This rank's shard of `full` (copied), so that ranks built from the same full layer together
  // compute exactly what it computes.
  ColumnParallelLinear(const nn::Linear& full, dist::ProcessGroupPtr group, ColumnParallelOptions options = {});
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out) or (..., out_local)
  std::string name() const override { return "ColumnParallelLinear"; }
  std::vector<std::pair<std::string, ShardSpec>> shard_specs() const override;
  const dist::ProcessGroupPtr& group() const { return group_; }

  int64_t in_features, out_features;
  ColumnParallelOptions options;
  Tensor weight;  // (out_local, in)
  Tensor bias;    // (out_local) or undefined

 private:
  dist::ProcessGroupPtr group_;
  bool has_bias_;
};

}  // namespace tessera::parallel::tensor
