#include "tessera/parallel/zero/hybrid_groups.h"

#include <vector>

#include "tessera/core/error.h"

namespace tessera::parallel::zero {

HybridGroups make_hybrid_groups(const dist::ProcessGroupPtr& world, int shard_size) {
  TESSERA_CHECK(world != nullptr, "[hsdp] needs the job's process group");
  const int size = world->size();
  TESSERA_CHECK(shard_size >= 1 && size % shard_size == 0, "[hsdp] ", size, " ranks cannot be cut into replicas of ",
                shard_size, " (distributed.hsdp_shard_size must divide the world size)");
  HybridGroups groups;
  for (int replica = 0; replica < size / shard_size; ++replica) {
    std::vector<int> ranks;
    for (int place = 0; place < shard_size; ++place) ranks.push_back(replica * shard_size + place);
    if (auto g = world->new_group(ranks)) groups.shard = g;
  }
  for (int place = 0; place < shard_size; ++place) {
    std::vector<int> ranks;
    for (int replica = 0; replica < size / shard_size; ++replica) ranks.push_back(replica * shard_size + place);
    if (auto g = world->new_group(ranks)) groups.replicas = g;
  }
  TESSERA_ASSERT(groups.shard && groups.replicas, "every rank is in one replica and one place");
  return groups;
}

}  // namespace tessera::parallel::zero
