// A parameter server's checkpoint: one file per server and step,
// <dir>/server-<rank>/step-<N>.safetensors, holding its pieces' values ("piece.<plan index>") and its
// optimizer's state ("optimizer.dense.<slot>.<buffer>", "optimizer.sparse.<slot>.<buffer>", and the
// scalars), with the job's number of servers and the model's signature in the metadata.
// A job of another number of servers restores from them too: each server reads every file and
// copies, row by row, what its own pieces hold (values and optimizer state alike; the optimizers
// are elementwise, so training continues exactly).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/ps/shard_plan.h"

namespace tessera::parallel::ps {

std::string server_checkpoint_path(const std::string& dir, int server_rank, int64_t step);

// One piece a server holds, as its checkpoint sees it. `values` shares the server's storage:
// restoring writes into it.
struct HeldShard {
  int piece = 0;      // index into plan.pieces()
  Tensor values;      // dense: 1-D; sparse: (rows, row_size)
  bool sparse = false;
  size_t slot = 0;    // index among the server's dense or among its sparse pieces
};

// "name:rows x row_size[s];..." of every parameter: two jobs train the same model iff equal.
std::string plan_signature(const ShardPlan& plan);

struct ShardCheckpoint {
  int server_rank = 0, num_servers = 1;
  int64_t step = 0, version = 0;
  int keep = 1;  // the newest `keep` steps of this server stay, older ones are removed
};

// Writes the file atomically, then prunes this server's older steps. IoError on failure.
std::string save_server_shard(const std::string& dir, const ShardCheckpoint& at, const ShardPlan& plan,
                              const std::vector<HeldShard>& held, const nn::StateDict& optimizer_state);

struct RestoredShard {
  nn::StateDict optimizer_state;  // for this server's ShardOptimizer
  int64_t version = 0;
  std::string from;               // what was read, for the log
};

// Fills `held`'s values from step `step` under `dir`, saved by a job of any number of servers.
// Errors name the file and what is wrong with it.
RestoredShard restore_server_shard(const std::string& dir, int64_t step, int server_rank, int num_servers,
                                   const ShardPlan& plan, std::vector<HeldShard>& held);

}  // namespace tessera::parallel::ps
