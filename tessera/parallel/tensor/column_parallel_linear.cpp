#include "tessera/parallel/tensor/column_parallel_linear.h"

#include "tessera/parallel/tensor/mappings.h"

namespace tessera::parallel::tensor {

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& full, dist::ProcessGroupPtr group,
                                           ColumnParallelOptions opts)
    : in_features(full.weight.shape()[1]), out_features(full.weight.shape()[0]), options(opts),
      group_(std::move(group)), has_bias_(full.bias.defined()) {
  TESSERA_CHECK(group_ != nullptr, "[ColumnParallelLinear] needs a tensor-parallel process group, got null");
  TESSERA_CHECK(options.blocks >= 1 && out_features % options.blocks == 0, "[ColumnParallelLinear] ", out_features,
                " output features do not split into ", options.blocks, " equal blocks");
  TESSERA_CHECK(!options.gather_output || options.blocks == 1, "[ColumnParallelLinear] gather_output needs blocks "
                "== 1, got ", options.blocks, " (the gathered features would be out of order)");
  TESSERA_CHECK(!options.sequence.enabled || !options.gather_output, "[ColumnParallelLinear] sequence parallelism "
                "leaves the output features split (gather_output false)");
  const auto specs = shard_specs();
  const int rank = group_->rank(), world = group_->size();
  weight = register_parameter("weight", take_shard(full.weight.detach(), specs[0].second, rank, world));
  if (has_bias_) bias = register_parameter("bias", take_shard(full.bias.detach(), specs[1].second, rank, world));
}

std::vector<std::pair<std::string, ShardSpec>> ColumnParallelLinear::shard_specs() const {
  std::vector<std::pair<std::string, ShardSpec>> specs{{"weight", {0, out_features, options.blocks}}};
  if (has_bias_) specs.push_back({"bias", {0, out_features, options.blocks}});
  return specs;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  TESSERA_CHECK(x.defined() && x.dim() >= 1 && x.shape().back() == in_features, "[ColumnParallelLinear] expected "
                "input (..., ", in_features, "), got ", x.defined() ? shape_str(x.shape()) : "an undefined tensor",
                " on rank ", group_->rank());
  if (options.sequence.enabled) return all_gather_linear(x, weight, bias, group_, options.sequence.chunks);
  Tensor y = linear(copy_to_tensor_parallel_region(x, group_), weight, bias);  // (..., out_local)
  if (!options.gather_output) return y;
  return gather_from_tensor_parallel_region(y, group_, shard_sizes(out_features, group_->size()));
}

}  // namespace tessera::parallel::tensor
