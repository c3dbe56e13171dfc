#include "tessera/parallel/tensor/row_parallel_linear.h"

#include "tessera/parallel/tensor/mappings.h"

namespace tessera::parallel::tensor {

RowParallelLinear::RowParallelLinear(const nn::Linear& full, dist::ProcessGroupPtr group, RowParallelOptions opts)
    : in_features(full.weight.shape()[1]), out_features(full.weight.shape()[0]), options(opts),
      group_(std::move(group)) {
  TESSERA_CHECK(group_ != nullptr, "[RowParallelLinear] needs a tensor-parallel process group, got null");
  TESSERA_CHECK(!options.sequence.enabled || options.input_is_parallel, "[RowParallelLinear] sequence parallelism "
                "takes the input already split over the features (input_is_parallel)");
  weight = register_parameter("weight", take_shard(full.weight.detach(), shard_specs()[0].second, group_->rank(),
                                                   group_->size()));
  if (full.bias.defined()) {
    NoGradGuard no_grad;
    bias = register_parameter("bias", clone(full.bias));
  }
}

std::vector<std::pair<std::string, ShardSpec>> RowParallelLinear::shard_specs() const {
  return {{"weight", {1, in_features, 1}}};
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  auto [begin, end] = shard_range(in_features, group_->rank(), group_->size());
  const int64_t expected = options.input_is_parallel ? end - begin : in_features;
  TESSERA_CHECK(x.defined() && x.dim() >= 1 && x.shape().back() == expected, "[RowParallelLinear] expected input (..., ",
                expected, ")", options.input_is_parallel ? " (this rank's slice of the input features)" : "",
                ", got ", x.defined() ? shape_str(x.shape()) : "an undefined tensor", " on rank ", group_->rank(),
                " of ", group_->size());
  Tensor local = options.input_is_parallel ? x : scatter_to_tensor_parallel_region(x, group_);
  Tensor y = options.sequence.enabled ? linear_reduce_scatter(local, weight, group_, options.sequence.chunks)
                                      : reduce_from_tensor_parallel_region(linear(local, weight), group_);
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace tessera::parallel::tensor
