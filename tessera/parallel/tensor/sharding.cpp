#include "tessera/parallel/tensor/sharding.h"

#include <map>

#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/mappings.h"

namespace tessera::parallel::tensor {
namespace {

void check_spec(const Shape& shape, const ShardSpec& spec, const char* op) {
  TESSERA_CHECK(spec.dim >= 0 && spec.dim < static_cast<int64_t>(shape.size()), "[", op, "] shard dim ", spec.dim,
                " is out of range for shape ", shape_str(shape));
  TESSERA_CHECK(spec.blocks >= 1 && spec.full_size >= 0 && spec.full_size % spec.blocks == 0, "[", op,
                "] full size ", spec.full_size, " does not split into ", spec.blocks, " equal blocks");
}

void collect(const nn::Module& module, const std::string& prefix,
             std::vector<std::pair<std::string, ShardSpec>>& out) {
  if (const auto* layer = dynamic_cast<const ShardedLayer*>(&module)) {
    for (const auto& [name, spec] : layer->shard_specs()) out.emplace_back(prefix + name, spec);
  }
  for (const auto& [name, child] : module.children()) collect(*child, prefix + name + ".", out);
}

}  // namespace

Tensor take_shard(const Tensor& full, const ShardSpec& spec, int rank, int world) {
  check_spec(full.shape(), spec, "take_shard");
  TESSERA_CHECK(full.shape()[spec.dim] == spec.full_size, "[take_shard] expected size ", spec.full_size, " in dim ",
                spec.dim, ", got shape ", shape_str(full.shape()));
  NoGradGuard no_grad;
  const int64_t block = spec.full_size / spec.blocks;
  auto [begin, end] = shard_range(block, rank, world);
  std::vector<Tensor> pieces;
  for (int64_t k = 0; k < spec.blocks; ++k) pieces.push_back(full.slice(spec.dim, k * block + begin, k * block + end));
  return pieces.size() == 1 ? clone(pieces[0]) : cat(pieces, spec.dim);
}

Shape full_shape(const Tensor& local, const ShardSpec& spec) {
  check_spec(local.shape(), spec, "full_shape");
  Shape shape = local.shape();
  shape[spec.dim] = spec.full_size;
  return shape;
}

Tensor gather_shard(const Tensor& local, const ShardSpec& spec, dist::ProcessGroup& group) {
  check_spec(local.shape(), spec, "gather_shard");
  NoGradGuard no_grad;
  const int world = group.size();
  const int64_t block = spec.full_size / spec.blocks;
  std::vector<int64_t> lengths = shard_sizes(block, world);
  TESSERA_CHECK(local.shape()[spec.dim] == spec.blocks * lengths[group.rank()], "[gather_shard] rank ", group.rank(),
                " holds ", local.shape()[spec.dim], " of dim ", spec.dim, " but its shard of ", spec.full_size, " is ",
                spec.blocks * lengths[group.rank()]);
  // The split dim first, so that every piece is a run of whole rows.
  Tensor front = contiguous(transpose(local, 0, spec.dim));
  Shape front_shape = front.shape();
  front_shape[0] = spec.full_size;
  const int64_t inner = spec.full_size == 0 ? 0 : shape_numel(front_shape) / spec.full_size;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int64_t n : lengths) {
    counts.push_back(spec.blocks * n * inner);
    total += counts.back();
  }
  Tensor flat = Tensor::empty({total});
  group.allgather(front, flat, counts)->wait();
  Tensor full = Tensor::empty(front_shape);
  Tensor rows = full.view({spec.full_size, inner});
  int64_t offset = 0, begin = 0;
  for (int64_t n : lengths) {
    for (int64_t k = 0; k < spec.blocks; ++k) {
      Tensor dst = rows.slice(0, k * block + begin, k * block + begin + n);
      copy_(dst, flat.slice(0, offset, offset + n * inner).view({n, inner}));
      offset += n * inner;
    }
    begin += n;
  }
  return contiguous(transpose(full, 0, spec.dim));
}

std::vector<std::pair<std::string, ShardSpec>> collect_shard_specs(const nn::Module& module) {
  std::vector<std::pair<std::string, ShardSpec>> out;
  collect(module, "", out);
  return out;
}

nn::StateDict full_state_dict(const nn::Module& module, dist::ProcessGroup& group) {
  auto list = collect_shard_specs(module);
  std::map<std::string, ShardSpec> specs(list.begin(), list.end());
  nn::StateDict out;
  for (const auto& [name, value] : module.state_dict()) {
    auto it = specs.find(name);
    if (it == specs.end()) {
      NoGradGuard no_grad;
      out.emplace_back(name, clone(value));
    } else {
      out.emplace_back(name, gather_shard(value.detach(), it->second, group));
    }
  }
  return out;
}

void load_full_state_dict(nn::Module& module, const nn::StateDict& state, int rank, int world) {
  auto list = collect_shard_specs(module);
  std::map<std::string, ShardSpec> specs(list.begin(), list.end());
  std::map<std::string, Tensor> given(state.begin(), state.end());
  NoGradGuard no_grad;
  nn::StateDict mine = module.state_dict();
  for (auto& [name, value] : mine) {
    auto it = given.find(name);
    TESSERA_CHECK(it != given.end(), "[load_full_state_dict] missing key '", name, "' on rank ", rank);
    auto spec = specs.find(name);
    const Shape expected = spec == specs.end() ? value.shape() : full_shape(value, spec->second);
    TESSERA_CHECK(it->second.shape() == expected && it->second.dtype() == value.dtype(), "[load_full_state_dict] '",
                  name, "' is ", dtype_name(it->second.dtype()), " ", shape_str(it->second.shape()), ", expected ",
                  dtype_name(value.dtype()), " ", shape_str(expected));
    Tensor dst = value;
    copy_(dst, spec == specs.end() ? it->second : take_shard(it->second, spec->second, rank, world));
    given.erase(it);
  }
  TESSERA_CHECK(given.empty(), "[load_full_state_dict] unexpected key '", given.empty() ? "" : given.begin()->first,
                "' (", given.size(), " unknown keys)");
}

}  // namespace tessera::parallel::tensor
