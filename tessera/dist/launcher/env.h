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
//                      cores / LOCAL_WORLD_SIZE (at least 1), so N workers do not oversubscribe;
//                      OMP_NUM_THREADS gets the same value unless the launcher's environment sets it
//                      (supervisor.cpp)
//   TESSERA_PROGRESS_FILE where a trainer records its steps for the launcher's wedge watch
//   TESSERA_LAUNCHER_PID (progress_file.h); workers only, and only while the watch is on
//
// The names follow torchrun's (plus NODE_RANK), so scripts written for it read the same values.
//
// A parameter-server job (`tessera run --servers S --workers W`) starts S servers and W workers per
// node. Its workers get everything above (WORLD_SIZE counts workers only: nnodes * W) plus
//
//   TESSERA_ROLE        worker
//   TESSERA_NUM_SERVERS servers in the job, nnodes * S
//
// and its servers get
//
//   TESSERA_ROLE        server
//   TESSERA_SERVER_RANK NODE_RANK * S + the server's index on this node, in [0, TESSERA_NUM_SERVERS)
//   TESSERA_NUM_SERVERS servers in the job, nnodes * S
//   TESSERA_NUM_WORKERS workers in the job, nnodes * W
//   NODE_RANK, MASTER_ADDR, MASTER_PORT, TESSERA_JOB_TOKEN as above
//   TESSERA_NUM_THREADS as above, but the default is cores / (S + W) (at least 1)
//
// but no RANK, WORLD_SIZE, LOCAL_RANK or LOCAL_WORLD_SIZE, not even inherited from the launcher's
// own environment: code that asks "am I a rank of a job?" (dist::launched_as_job) must not take a
// server for a worker. Outside a parameter-server job no process gets TESSERA_ROLE or the other
// TESSERA_*SERVER*/TESSERA_NUM_WORKERS variables, and the launcher drops inherited ones, so a job
// started from inside another job's process does not read the outer job's role.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::dist::launcher {

// An elastic job (`tessera run --nnodes MIN:MAX`, elastic/elastic_agent.h) gives its workers, on top
// of the contract above,
//
//   TESSERA_ELASTIC_GENERATION  the membership generation (0, 1, ...): workers of a later generation
//                               resume from the checkpoint; rank 0 reports its steps (below)
//   TESSERA_RESTART_COUNT       restarts of the job so far
//   TESSERA_HEARTBEAT_MS        the process group publishes heartbeats this often (dist/heartbeat.h)
//
// and rank 0 writes, to the worker store (MASTER_ADDR:MASTER_PORT, no prefix), the keys below that
// the agent of node 0 reads to report recoveries.
//   TESSERA_ELASTIC_MAX_WORLD   the largest world size the job may reach (max nodes × workers per
//                               node); after failures it may run at any size from 1 up to it, so the
//                               trainer refuses at launch a global batch one of them does not divide
//
// A worker that exits with kConfigErrorExitStatus failed on its configuration or input (a
// ValueError): a restart would fail the same way, so the agent stops the job at once instead.
inline constexpr int kConfigErrorExitStatus = 3;
// A worker of a live job (dist/live_membership.h) that exits with kLiveStateLostExitStatus found
// part of the training state lost with its peers (dist::LiveStateLost): its launcher fails the job
// instead of going on without it, and an elastic agent restarts it from its last checkpoint.
inline constexpr int kLiveStateLostExitStatus = 76;
inline constexpr const char* kElasticMaxWorldVariable = "TESSERA_ELASTIC_MAX_WORLD";
inline constexpr const char* kElasticGenerationVariable = "TESSERA_ELASTIC_GENERATION";
inline constexpr const char* kRestartCountVariable = "TESSERA_RESTART_COUNT";
inline constexpr const char* kHeartbeatMsVariable = "TESSERA_HEARTBEAT_MS";
// "1" for a process the launcher starts in a lost worker's slot of a live job: it asks to join the
// running job (dist/live_membership.h) instead of meeting the launch's ranks.
inline constexpr const char* kLiveJoinerVariable = "TESSERA_LIVE_JOINER";
inline constexpr const char* kElasticResumedKey = "elastic/resumed";  // the step the generation started at
inline constexpr const char* kElasticStepKey = "elastic/step";        // the last step it completed
// The generation whose survivors saved the step this generation resumed from ("-1": a scheduled
// checkpoint, or a fresh start): a survivors' save of the generation just ended loses no step that
// any surviving replica completed, even when that generation's node 0 (and its count) is gone.
inline constexpr const char* kElasticResumedFromKey = "elastic/resumed_from_survivors_of";

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
// Parts of the contract read on their own, where a process only asks whether it is a launched
// worker or where the master is (the rest may legitimately be absent there):
bool has_worker_rank();                              // RANK and WORLD_SIZE are set
bool has_rank();                                     // RANK is set (a worker of tessera run, not a server)
std::optional<std::string> master_addr_from_environment();  // MASTER_ADDR, when set and not empty
std::optional<int> master_port_from_environment();          // MASTER_PORT; ValueError when not a port
// This process's rank among the job's processes on its machine, from whichever launcher started it:
// LOCAL_RANK (tessera run, torchrun), SLURM_LOCALID (srun), OMPI_COMM_WORLD_LOCAL_RANK (Open MPI's
// mpirun) or MPI_LOCALRANKID (MPICH's); none of them set: nothing. ValueError when one is not a
// non-negative integer.
std::optional<int> local_rank_from_environment();
// The number of workers on this node from the same launchers' variables (LOCAL_WORLD_SIZE, Slurm's
// SLURM_NTASKS_PER_NODE, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS); nullopt where
// none is set. ValueError for one that is not a positive integer.
std::optional<int> local_world_size_from_environment();

// A parameter server's contract, as the launcher sets it.
struct ServerEnv {
  int server_rank = 0;
  int num_servers = 1;
  int num_workers = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string job_token;
  int num_threads = 0;  // 0: TESSERA_NUM_THREADS is not set

  bool operator==(const ServerEnv&) const = default;
};

std::map<std::string, std::string> to_variables(const ServerEnv& env);
// A parameter-server job's worker: to_variables(env) plus TESSERA_ROLE=worker and TESSERA_NUM_SERVERS.
std::map<std::string, std::string> to_ps_worker_variables(const WorkerEnv& env, int num_servers);

// True for every variable either contract sets; the launcher replaces or drops inherited ones.
bool is_contract_variable(std::string_view name);

// Which side of a parameter-server job this process is on.
struct PsRoleEnv {
  enum class Role { kNone, kServer, kWorker } role = Role::kNone;
  int server_rank = -1;  // a server's TESSERA_SERVER_RANK; -1 for a worker
  int num_servers = 0;
  int num_workers = 0;   // a server's TESSERA_NUM_WORKERS; a worker's WORLD_SIZE

  bool operator==(const PsRoleEnv&) const = default;
};

// kNone (everything else zero) when TESSERA_ROLE is not set: not a parameter-server job. Otherwise
// ValueError naming the variable that is missing or malformed: TESSERA_ROLE other than server or
// worker, TESSERA_SERVER_RANK >= TESSERA_NUM_SERVERS, a count below 1, ...
PsRoleEnv ps_role_from_variables(const std::map<std::string, std::string>& variables);
PsRoleEnv ps_role_from_environment();

}  // namespace tessera::dist::launcher
