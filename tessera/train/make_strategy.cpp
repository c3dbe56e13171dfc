#include "tessera/train/make_strategy.h"

#include "tessera/train/ddp_strategy.h"
#include "tessera/train/local_strategy.h"
#include "tessera/train/mesh_strategy.h"
#include "tessera/train/ps_strategy.h"
#include "tessera/train/zero_strategy.h"

namespace tessera::train {

std::unique_ptr<Strategy> make_strategy(const TrainConfig& config, StrategyEnvironment env) {
  if (env.ps) return std::make_unique<PsStrategy>(*env.ps, env.ps_workers);
  if (config.distributed.strategy == "mesh" || uses_model_parallelism(config))
    return std::make_unique<MeshStrategy>(config, env.group, env.train_set);
  if (env.group && env.group->size() > 1) {
    if (config.distributed.strategy == "zero") return std::make_unique<ZeroStrategy>(config, env.group);
    return std::make_unique<DdpStrategy>(config, env.group);
  }
  return std::make_unique<LocalStrategy>();
}

}  // namespace tessera::train
