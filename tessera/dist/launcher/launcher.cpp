#include "tessera/dist/launcher/launcher.h"

#include <algorithm>
#include <cstdlib>
#include <sched.h>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/free_port.h"
#include "tessera/dist/launcher/job_token.h"
#include "tessera/dist/launcher/rendezvous.h"
#include "tessera/dist/launcher/supervisor.h"
#include "tessera/util/settings.h"

namespace tessera::dist::launcher {

namespace {

void validate(const LaunchOptions& o) {
  TESSERA_CHECK(o.nproc_per_node >= 1 && o.nproc_per_node <= 4096, "[run] --nproc-per-node must be in [1, 4096], got ",
                o.nproc_per_node);
  TESSERA_CHECK(o.servers_per_node >= 0 && o.servers_per_node <= 4096,
                "[run] --servers must be in [0, 4096] (0: no parameter servers), got ", o.servers_per_node);
  TESSERA_CHECK(o.nnodes >= 1, "[run] --nnodes must be at least 1, got ", o.nnodes);
  TESSERA_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "[run] --node-rank must be in [0, --nnodes=", o.nnodes,
                "), got ", o.node_rank);
  TESSERA_CHECK(o.master_port >= 0 && o.master_port <= 65535, "[run] --master-port must be in [0, 65535], got ",
                o.master_port);
  TESSERA_CHECK(o.node_rank == 0 || o.master_port != 0, "[run] --node-rank ", o.node_rank,
                " needs --master-port: only node 0 can pick the port, the other nodes must be told it");
  TESSERA_CHECK(!o.master_addr.empty(), "[run] --master-addr is empty");
  TESSERA_CHECK(!o.command.empty(), "[run] no PROGRAM given (usage: tessera run --nproc-per-node N -- PROGRAM ARGS...)");
  TESSERA_CHECK(o.timeout.count() >= 0, "[run] --timeout must not be negative");
  TESSERA_CHECK(o.grace_period.count() >= 0, "[run] --grace-period must not be negative");
}

std::string resolve_token(const LaunchOptions& o) {
  if (!o.job_token.empty()) return o.job_token;
  if (const char* env = env_setting("TESSERA_JOB_TOKEN"); env != nullptr && *env != '\0') return env;
  // Each node drawing its own token would lock the other nodes out of node 0's store.
  TESSERA_CHECK(o.nnodes == 1, "[run] a job with --nnodes ", o.nnodes,
                " needs the same TESSERA_JOB_TOKEN on every node; e.g. run `export TESSERA_JOB_TOKEN=$(od -An -tx1 "
                "-N16 /dev/urandom | tr -d ' \\n')` once and pass it to every node's launcher");
  return random_job_token();
}

int resolve_threads(const LaunchOptions& o) {
  if (o.threads_per_worker > 0) return o.threads_per_worker;
  if (const int64_t n = env_int("TESSERA_NUM_THREADS", 0); n > 0) return static_cast<int>(n);
  return std::max(1, usable_cores() / (o.servers_per_node + o.nproc_per_node));
}

}  // namespace

int usable_cores() {
  // The affinity mask, not the machine: under taskset or a container's cpuset the job gets fewer.
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<WorkerEnv> worker_envs(const LaunchOptions& resolved) {
  std::vector<WorkerEnv> envs;
  for (int local = 0; local < resolved.nproc_per_node; ++local) {
    WorkerEnv env;
    env.rank = resolved.node_rank * resolved.nproc_per_node + local;
    env.world_size = resolved.nnodes * resolved.nproc_per_node;
    env.local_rank = local;
    env.local_world_size = resolved.nproc_per_node;
    env.node_rank = resolved.node_rank;
    env.master_addr = resolved.master_addr;
    env.master_port = resolved.master_port;
    env.job_token = resolved.job_token;
    env.num_threads = resolved.threads_per_worker;
    envs.push_back(std::move(env));
  }
  return envs;
}

std::vector<ServerEnv> server_envs(const LaunchOptions& resolved) {
  std::vector<ServerEnv> envs;
  for (int local = 0; local < resolved.servers_per_node; ++local) {
    ServerEnv env;
    env.server_rank = resolved.node_rank * resolved.servers_per_node + local;
    env.num_servers = resolved.nnodes * resolved.servers_per_node;
    env.num_workers = resolved.nnodes * resolved.nproc_per_node;
    env.node_rank = resolved.node_rank;
    env.master_addr = resolved.master_addr;
    env.master_port = resolved.master_port;
    env.job_token = resolved.job_token;
    env.num_threads = resolved.threads_per_worker;
    envs.push_back(std::move(env));
  }
  return envs;
}

LaunchResult launch(const LaunchOptions& options) {
  validate(options);
  LaunchOptions job = options;
  job.job_token = resolve_token(options);
  job.threads_per_worker = resolve_threads(options);
  // The store listens before any worker starts, so workers find it at once; asked for port 0 it
  // binds a free port itself, which avoids pick_free_port's pick-then-release race.
  std::unique_ptr<RendezvousServer> store;
  if (job.node_rank == 0 && job.host_store)
    store = start_rendezvous_server(job.master_addr, job.master_port, job.job_token);
  if (store) job.master_port = store->port();
  else if (job.master_port == 0) job.master_port = pick_free_port(job.master_addr);
  // Servers first: a worker's first request then finds its server more likely already listening
  // (workers must still retry: starting first is no promise of being ready first).
  std::vector<detail::ProcessSpec> processes;
  for (const ServerEnv& env : server_envs(job)) processes.push_back({true, env.server_rank, to_variables(env)});
  int num_servers = job.nnodes * job.servers_per_node;
  for (const WorkerEnv& env : worker_envs(job))
    processes.push_back(
        {false, env.rank, num_servers > 0 ? to_ps_worker_variables(env, num_servers) : to_variables(env)});
  return detail::supervise(job, processes);
}

}  // namespace tessera::dist::launcher
