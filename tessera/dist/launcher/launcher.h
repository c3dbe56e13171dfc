// `tessera run`: starts the workers of one node of a job with the env contract (env.h), hosts the
// rendezvous store on node 0 (rendezvous.h), prefixes their output with "[rank R] ", forwards
// SIGINT/SIGTERM to them, and when one fails stops the others and says which rank failed and how.
// It watches the workers' training steps and reports a wedged job (no step for 3x the median, every
// worker's stacks and flight records; wedge_watch.h); SIGUSR2 asks it for that report at any time.
//
// Policy, as torchrun's: a job succeeds only if every worker exits 0. The first worker to exit
// non-zero or by a signal fails the job: the others get SIGTERM, and SIGKILL after the grace period.
// A SIGINT or SIGTERM to the launcher is forwarded to every worker (their process groups), which
// then have the grace period to finish (e.g. write a checkpoint) before SIGKILL. Nothing waits
// without a bound: the launcher sleeps only in poll(), woken by output, by SIGCHLD or by a deadline.
//
// A parameter-server job (servers_per_node > 0, `--servers S --workers W`) starts S servers and W
// workers per node (env.h lists what each gets); servers' lines are prefixed "[server I] ". Its
// policy differs only in what a failing worker does:
//  - a server that exits non-zero or by a signal fails the job as a failing worker does above
//    ("server I (pid P) exited with status 5; stopped the other 3 processes");
//  - a worker that does so does not stop the job: asynchronous training goes on with fewer workers.
//    (So does a lost worker of a live job: LaunchOptions::live_replacements below.)
//    The launcher writes one line to stderr_fd ("tessera run: worker rank 1 (pid P) exited with
//    status 3; a parameter-server job goes on without it"), records the rank in failed_workers and
//    keeps supervising the rest. The servers decide whether they can go on; a synchronous server
//    that cannot fails, and so fails the job.
// The job ends when every process has exited. Its exit code: the failed server's (status or
// 128 + signal) if a server stopped it; else 0 if at least one worker exited 0; else the first
// failed worker's. --timeout and forwarded signals behave as above, for servers and workers alike.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "tessera/dist/launcher/env.h"

namespace tessera::dist::launcher {

struct LaunchOptions {
  int nproc_per_node = 1;             // workers on this node (--nproc-per-node, or --workers)
  int servers_per_node = 0;           // parameter servers on this node (--servers); 0: not a PS job
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                // 0: node 0 picks a free port; required on the other nodes
  std::vector<std::string> command;   // PROGRAM ARGS...; PROGRAM without a '/' is searched in PATH
  std::string job_token;              // empty: $TESSERA_JOB_TOKEN, else random (single node only)
  int threads_per_worker = 0;         // per process; 0: $TESSERA_NUM_THREADS, else
                                      // max(1, cores / (servers_per_node + nproc_per_node))
  std::chrono::milliseconds timeout{0};          // for the whole job; 0: none
  std::chrono::milliseconds grace_period{5000};  // between SIGTERM (or a forwarded signal) and SIGKILL
  bool host_store = true;             // node 0 hosts the rendezvous store
  // The elastic agent's hook (tessera/elastic): called at least every watch_interval while the
  // workers run; when it returns true the launcher stops them as on a failure (SIGTERM, SIGKILL
  // after the grace period) and the result says `interrupted`. Null: never.
  std::function<bool()> watch;
  std::chrono::milliseconds watch_interval{100};
  std::function<void(int rank, pid_t pid)> on_spawn;  // told each worker's pid as it starts
  // Told at once when a worker's failure stops the job ("rank 2 (pid 7) was killed by signal 9
  // (SIGKILL)"), before the others have been stopped.
  std::function<void(int rank, int wait_status, const std::string& what)> on_failure;
  // Watch the workers' progress and report a wedged job with every worker's stacks and flight
  // records (wedge_watch.h; TESSERA_WEDGE_FACTOR=0 turns it off too).
  bool watch_wedges = true;
  // Live membership (dist/live_membership.h). A worker whose progress record (progress_file.h) says
  // its job runs live does not fail the job when it is lost: its peers go on without it, and while
  // replacements last the launcher starts a process in its slot (TESSERA_LIVE_JOINER=1, the same
  // contract otherwise) that joins the running job. The lost rank is in failed_workers; the job's
  // exit code is 0 when a worker finished. on_live_loss is told of each loss.
  int live_replacements = 0;
  std::function<void(int rank, int wait_status, const std::string& what, pid_t replacement)> on_live_loss;
  int stdout_fd = 1;                  // where the workers' prefixed stdout goes
  int stderr_fd = 2;                  // ... and their stderr, and the launcher's notices during the job
};

// How one process of the job ended.
struct WorkerOutcome {
  int rank = 0;          // global rank; a server's TESSERA_SERVER_RANK
  pid_t pid = -1;
  int wait_status = 0;   // as from waitpid
  bool sigkilled = false;  // the launcher had to SIGKILL it after the grace period
  bool server = false;     // a parameter server (then it is in LaunchResult::servers)
};

struct LaunchResult {
  // 0 when every worker exited 0. Otherwise, like a shell: the failed worker's exit status, or
  // 128 + its signal; 124 for --timeout; 128 + the signal the launcher received and forwarded.
  // A parameter-server job: see the policy above.
  int exit_code = 0;
  // Empty on success; else one line naming what went wrong, e.g. "rank 2 (pid 1234) exited with
  // status 3; stopped the other 3 workers".
  std::string message;
  // The process whose failure stopped the job, if any: a worker's rank, or a server's server rank
  // (then failed_server says so).
  int failed_rank = -1;
  int failed_server = -1;           // the server whose failure stopped the job, if any
  std::vector<int> failed_workers;  // PS job: ranks of the workers that failed without stopping it
  bool timed_out = false;
  bool interrupted = false;   // LaunchOptions::watch asked to stop the workers
  int received_signal = 0;    // SIGINT or SIGTERM the launcher received and forwarded, if any
  std::vector<WorkerOutcome> workers;  // by local rank
  std::vector<WorkerOutcome> servers;  // PS job: by index on this node; empty otherwise
};

// Runs the job's workers on this node to completion. Throws ValueError for bad options or a
// PROGRAM that cannot be executed (before any worker runs, or after stopping those started).
// Installs SIGINT/SIGTERM/SIGCHLD handlers while it runs, so one launch() at a time per process.
LaunchResult launch(const LaunchOptions& options);

// The env contract of each local worker for options whose master_port, job_token and
// threads_per_worker are already resolved (launch() does that first).
std::vector<WorkerEnv> worker_envs(const LaunchOptions& resolved);

// The cores this process may run on (its affinity mask: taskset, a cpuset, a Slurm binding), which
// the launchers divide among a node's workers.
int usable_cores();
// The same for each local server (none unless servers_per_node > 0).
std::vector<ServerEnv> server_envs(const LaunchOptions& resolved);

}  // namespace tessera::dist::launcher
