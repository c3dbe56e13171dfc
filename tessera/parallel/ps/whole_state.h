// A parameter-server job's state as one process holds it, and back, so that a PS checkpoint resumes
// at any layout and any checkpoint resumes a PS job. The servers keep the optimizer state of their
// rows (server_checkpoint.h); one process's optimizer keeps "step", "lr" and "<index>.<buffer>" over
// whole parameters. Both directions go through the files one server would have written: a job of
// any number of servers restores from those, and those are what the files of any number of servers
// restore into.
#pragma once
#include <string>
#include <vector>

#include "tessera/nn/module.h"
#include "tessera/parallel/ps/shard_plan.h"

namespace tessera::parallel::ps {

// The optimizer state the servers saved at `step` under `dir` (any number of servers), as one
// process's optimizer over the whole model holds it; `shapes` are the parameters' shapes, in the
// specs' order. A sparse table's state is its rows' (updated lazily on the servers), and its own
// count of Adam steps gives way to the job's. IoError naming the file for a missing or foreign step.
nn::StateDict read_servers_optimizer_state(const std::string& dir, int64_t step, const std::vector<ParamSpec>& specs,
                                           const std::vector<Shape>& shapes);

// Writes `values` (the whole parameters, in the specs' order) and `optimizer` (one process's state)
// as server 0 of one would have saved step `step` under `dir`, for the servers to restore.
void write_servers_state(const std::string& dir, int64_t step, const std::vector<ParamSpec>& specs,
                         const std::vector<Tensor>& values, const nn::StateDict& optimizer);

}  // namespace tessera::parallel::ps
