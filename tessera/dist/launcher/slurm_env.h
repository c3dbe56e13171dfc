// The Slurm contract: how a process that `srun` started finds its place in the job, read from the
// variables srun sets in every task, so that `srun -N 2 -n 4 tessera train ...` trains as one job of
// four, as `tessera run` would have started it:
//
//   SLURM_PROCID                 RANK          global rank of the task
//   SLURM_NTASKS                 WORLD_SIZE    tasks in the step
//   SLURM_LOCALID                LOCAL_RANK    rank among the step's tasks on this node
//   SLURM_STEP_TASKS_PER_NODE    LOCAL_WORLD_SIZE  (entry SLURM_NODEID of "2(x3),1"; else
//     (or SLURM_TASKS_PER_NODE)                   SLURM_TASKS_PER_NODE, the job's, in a batch script)
//   SLURM_NODEID                 NODE_RANK     this node's index among the step's nodes
//   SLURM_NNODES                 (checked)     nodes in the step; must equal the node list's length
//   SLURM_STEP_NODELIST          MASTER_ADDR   the first node of the list (compressed: node[01-04,07]);
//     (or SLURM_JOB_NODELIST)                 MASTER_ADDR in the environment wins
//   SLURM_JOB_ID, SLURM_STEP_ID  MASTER_PORT   slurm_port(job, step) unless MASTER_PORT is set
//   TESSERA_JOB_TOKEN            (required)    the store's secret, exported before srun (srun passes
//                                              the environment on); nothing can derive a secret that
//                                              every node shares but nobody else knows
//
// A process outside a Slurm step, or a step of one task, is not a Slurm job here (a world of one is
// then the truth). A step of several tasks that lacks one of the variables, or whose variables
// disagree (SLURM_PROCID >= SLURM_NTASKS, a node list of another length than SLURM_NNODES, ...), is
// a ValueError naming the variable: never a silent world of one on every node.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/dist/launcher/env.h"

namespace tessera::dist::launcher {

// Slurm's compressed host list ("node[01-04,07],gpu[1-2]-a,login"): every host name in order, with
// zero padding kept (the width of each range's first bound), several bracket groups in one name
// expanded as a product. ValueError naming `variable` and the text for a malformed list (unbalanced
// brackets, an empty name or range, a range that runs backwards, more than 65536 hosts).
std::vector<std::string> expand_host_list(std::string_view list, std::string_view variable = "SLURM_JOB_NODELIST");

// Slurm's tasks-per-node list ("2(x3),1": 2, 2, 2, 1); ValueError naming `variable` when malformed.
std::vector<int> expand_tasks_per_node(std::string_view list, std::string_view variable = "SLURM_TASKS_PER_NODE");

// The port of a Slurm step's store when MASTER_PORT is not given: the same on every node of the
// step, different for the job's other steps and for the jobs that follow it, in [20000, 30000).
int slurm_port(long long job_id, long long step_id);

struct SlurmStep {
  int rank = 0;
  int ntasks = 1;
  int local_rank = 0;
  int local_tasks = 1;  // tasks of the step on this node
  int node_id = 0;
  int nnodes = 1;
  std::vector<std::string> nodes;  // the step's nodes, in order
  long long job_id = 0;
  long long step_id = 0;  // 0 in a batch script (no SLURM_STEP_ID)

  bool operator==(const SlurmStep&) const = default;
};

// The step this process is a task of, or nullopt when it is none (SLURM_JOB_ID or SLURM_NTASKS
// unset; the batch script or salloc's shell, which run in no step or in one of Slurm's own) or a
// step of one task. ValueError as above.
std::optional<SlurmStep> slurm_step_from_variables(const std::map<std::string, std::string>& variables);
std::optional<SlurmStep> slurm_step_from_environment();

// SLURM_NTASKS when this process runs in a job's batch script (or salloc's shell) rather than in a
// step of its tasks, else 0: a program started there without srun is one process, not the job's
// tasks, which the trainer says when the job asked for more.
int slurm_batch_script_tasks(const std::map<std::string, std::string>& variables);

// A task's WorkerEnv: the mapping above; MASTER_ADDR, MASTER_PORT and TESSERA_JOB_TOKEN from
// `variables` when set there. ValueError when TESSERA_JOB_TOKEN is missing.
WorkerEnv worker_env_from_slurm(const SlurmStep& step, const std::map<std::string, std::string>& variables);

// Where `tessera run` started by srun with one task per node (`srun --ntasks-per-node=1 tessera run
// --nproc-per-node N -- ...` in an allocation) finds its node: node `node_id` of `nnodes`, node 0
// (the first of the list) hosting the store at MASTER_ADDR (or that node) and MASTER_PORT (or
// slurm_port). ValueError when the step has more than one task on a node.
struct SlurmLauncherPlace {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
};
SlurmLauncherPlace launcher_place_from_slurm(const SlurmStep& step, const std::map<std::string, std::string>& variables);

// The variables either function above reads, from this process's environment.
std::map<std::string, std::string> slurm_environment();

}  // namespace tessera::dist::launcher
