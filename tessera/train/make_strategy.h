// Choosing the strategy, once, from the config and the job's environment (strategy.h lists them).
// Apart from the interface, so that strategy.h does not include what only the choice needs (the
// parameter-server client's options).
#pragma once
#include <memory>
#include <optional>

#include "tessera/parallel/ps/client.h"
#include "tessera/train/strategy.h"

namespace tessera::train {

// Everything a strategy may need to be built: the job's process group (null for one process) or,
// for a parameter-server worker, its client options and the number of workers.
struct StrategyEnvironment {
  dist::ProcessGroupPtr group;
  std::shared_ptr<data::Dataset> train_set;  // the mesh measures its layers' time on a batch of it
  std::optional<parallel::ps::ClientOptions> ps;
  int ps_workers = 0;
  // A live job's membership change (train/trainer_live.cpp): the trainer gives the replicas their
  // values itself, so DDP does not broadcast rank 0's.
  bool live_rebuild = false;
};

// The strategy the config and environment ask for: ps when there are client options; mesh when
// distributed.strategy = "mesh" or parallel.pp · parallel.tp > 1; zero or ddp (as the config says)
// with a group of several ranks; local otherwise.
std::unique_ptr<Strategy> make_strategy(const TrainConfig& config, StrategyEnvironment env);

}  // namespace tessera::train
