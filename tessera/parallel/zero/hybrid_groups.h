// The two groups of hybrid sharding (HSDP) over a job of W ranks cut into replicas of `shard_size`
// consecutive ranks (one host's, as the launcher numbers them): this rank's replica, inside which
// ZeRO shards the state, and the ranks at the same place in every replica, across which the gradient
// pieces are all-reduced. Rank r is in replica r / shard_size at place r % shard_size.
#pragma once
#include "tessera/dist/process_group.h"

namespace tessera::parallel::zero {

struct HybridGroups {
  dist::ProcessGroupPtr shard;     // this replica's ranks
  dist::ProcessGroupPtr replicas;  // this place's rank in every replica
};

// Collective over `world` (every rank creates every subgroup, in the same order). ValueError unless
// shard_size divides the world size.
HybridGroups make_hybrid_groups(const dist::ProcessGroupPtr& world, int shard_size);

}  // namespace tessera::parallel::zero
