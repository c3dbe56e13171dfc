// The env contract: how `tessera run` tells each worker process who it is and where to meet the
// others. The launcher sets these variables in every worker's environment (on top of its own):
//
//   RANK               global rank, NODE_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK, in [0, WORLD_SIZE)
//   WORLD_SIZE         number of workers in the job, nnodes * nproc_per_node
//   LOCAL_RANK         rank among the workers of this node, in [0, LOCAL_WORLD_SIZE)
//   LOCAL_WORLD_SIZE   workers on this node (--nproc-per-node)
//   NODE_RANK          this node's index, in [0, nnodes)
//   MASTER_ADDR        host of the rendezvous store (node 0); default 127.0.0.1
//   MASTER_PORT        its TCP port; node 0 picks a free one unless --master-port is given
//   TESSERA_JOB_TOKEN  secret every store client presents: 128 random bits as 32 hex digits, or the
//                      launcher's own TESSERA_JOB_TOKEN when set (every node of a multi-node job
//                      must share one, so there it has to be set)
//   TESSERA_NUM_THREADS intra-op threads per worker: the launcher's own value when set, else
//                      cores / LOCAL_WORLD_SIZE (at least 1), so N workers do not oversubscribe
//
// The names follow torchrun's (plus NODE_RANK), so scripts written for it read the same values.
#pragma once
#include <map>
#include <string>

namespace tessera::dist::launcher {

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string job_token;
  int num_threads = 0;  // 0: TESSERA_NUM_THREADS was not set (the thread pool keeps its default)

  bool operator==(const WorkerEnv&) const = default;
};

// The variables above, as the launcher sets them (TESSERA_NUM_THREADS only when num_threads > 0).
std::map<std::string, std::string> to_variables(const WorkerEnv& env);

// Reads the contract back; ValueError naming the variable that is missing or malformed (not an
// integer, out of range, RANK >= WORLD_SIZE, ...). TESSERA_NUM_THREADS is optional.
WorkerEnv worker_env_from_variables(const std::map<std::string, std::string>& variables);
// The same, from this process's environment: what a worker calls.
WorkerEnv worker_env_from_environment();

}  // namespace tessera::dist::launcher
