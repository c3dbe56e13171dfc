// How a tensor-parallel parameter is cut from the full model's, and the way back: a rank's shard is
// its shard_range of one dimension, taken in each of `blocks` equal blocks of that dimension (blocks
// = 3 for the fused [q; k; v] rows of attention, where each rank keeps its heads' rows of all three).
// Layers that hold shards say so through ShardedLayer; full_state_dict and load_full_state_dict walk
// a module tree and gather or slice those parameters, leaving the others (replicated) as they are.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"

namespace tessera::parallel::tensor {

struct ShardSpec {
  int64_t dim = 0;        // the dimension that is split
  int64_t full_size = 0;  // its size in the full tensor
  int64_t blocks = 1;     // full_size is `blocks` equal blocks, each split over the ranks
};

// A layer whose own parameters (by their local names, "weight") include shards.
class ShardedLayer {
 public:
  virtual ~ShardedLayer() = default;
  virtual std::vector<std::pair<std::string, ShardSpec>> shard_specs() const = 0;
};

// This rank's shard of `full`, a new contiguous tensor with no history.
Tensor take_shard(const Tensor& full, const ShardSpec& spec, int rank, int world);
// The full tensor from every rank's shard: a collective (all-gather) over `group`.
Tensor gather_shard(const Tensor& local, const ShardSpec& spec, dist::ProcessGroup& group);
// The shape of the full tensor of which `local` is rank `rank`'s shard.
Shape full_shape(const Tensor& local, const ShardSpec& spec);

// Every sharded parameter of `module` (found through ShardedLayer, at any depth) by its state_dict name.
std::vector<std::pair<std::string, ShardSpec>> collect_shard_specs(const nn::Module& module);
// module.state_dict() with every shard gathered into its full tensor: a collective, every rank of
// `group` calls it; the same on each rank. Replicated entries are copies of this rank's values.
nn::StateDict full_state_dict(const nn::Module& module, dist::ProcessGroup& group);
// Copies the full tensors of `state` (keys and shapes as full_state_dict's) into `module`, slicing
// the shards for `rank` of `world`. Strict: every key must be present and known.
void load_full_state_dict(nn::Module& module, const nn::StateDict& state, int rank, int world);

}  // namespace tessera::parallel::tensor
