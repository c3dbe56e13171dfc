#include "tessera/train/make_strategy.h"

#include "tessera/dist/launcher/env.h"
#include "tessera/train/context_parallel_strategy.h"
#include "tessera/train/ddp_strategy.h"
#include "tessera/train/expert_parallel_strategy.h"
#include "tessera/train/local_sgd_strategy.h"
#include "tessera/train/local_strategy.h"
#include "tessera/train/mesh_strategy.h"
#include "tessera/train/ps_strategy.h"
#include "tessera/train/zero_strategy.h"

namespace tessera::train {

namespace {

// distributed.hsdp_shard_size, or the ranks on this host where it is 0.
int hsdp_shard_size(const TrainConfig& config) {
  if (config.distributed.hsdp_shard_size > 0) return static_cast<int>(config.distributed.hsdp_shard_size);
  const std::optional<int> local = dist::launcher::local_world_size_from_environment();
  TESSERA_CHECK(local.has_value(), "[hsdp] distributed.hsdp_shard_size = 0 means the ranks of a host, but no launcher "
                "variable (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE, ...) says how many there are: set it");
  return *local;
}

}  // namespace

std::unique_ptr<Strategy> make_strategy(const TrainConfig& config, StrategyEnvironment env) {
  if (env.ps) return std::make_unique<PsStrategy>(*env.ps, env.ps_workers);
  if (config.distributed.strategy == "mesh" || uses_model_parallelism(config))
    return std::make_unique<MeshStrategy>(config, env.group, env.train_set);
  if (env.group && env.group->size() > 1) {
    if (config.distributed.local_sgd > 0) return std::make_unique<LocalSgdStrategy>(config, env.group);
    if (config.distributed.strategy == "zero")
      return config.parallel.cp > 1 ? std::make_unique<ContextParallel<ZeroStrategy>>(config, env.group)
                                    : std::make_unique<ZeroStrategy>(config, env.group, parallel::zero::HybridGroups{},
                                                                     env.live_rebuild);
    if (config.distributed.strategy == "hsdp") {
      auto hybrid = parallel::zero::make_hybrid_groups(env.group, hsdp_shard_size(config));
      if (config.parallel.cp > 1)
        return std::make_unique<ContextParallel<ZeroStrategy>>(config, env.group, std::move(hybrid));
      return std::make_unique<ZeroStrategy>(config, env.group, std::move(hybrid));
    }
    if (config.parallel.ep > 1) return std::make_unique<ExpertParallelStrategy>(config, env.group);
    if (config.parallel.cp > 1) return std::make_unique<ContextParallel<DdpStrategy>>(config, env.group);
    return std::make_unique<DdpStrategy>(config, env.group, env.live_rebuild);
  }
  TESSERA_CHECK(config.parallel.ep == 1 && config.parallel.cp == 1, "[train] parallel.ep = ", config.parallel.ep,
                " and parallel.cp = ", config.parallel.cp, " spread a model over several processes; this job has one "
                "(run it with --nproc N)");
  return std::make_unique<LocalStrategy>();
}

}  // namespace tessera::train
