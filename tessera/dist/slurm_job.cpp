#include "tessera/dist/slurm_job.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/backends/mpi/mpi_job.h"
#include "tessera/dist/net/interface.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/dist/store/tcp_store_server.h"
#include "tessera/util/settings.h"
#include "tessera/util/thread_pool.h"

namespace tessera::dist {

namespace {

using tessera::detail::concat;

// Every other task adds 1 to kLeftKey as it exits, and the last one sets kAllLeftKey; rank 0 keeps
// the store up until then (or until TESSERA_SLURM_EXIT_WAIT_S).
constexpr const char* kLeftKey = "slurm/tasks_left";
constexpr const char* kAllLeftKey = "slurm/all_left";

// The store rank 0 hosts, or another rank's client of it: kept until exit (never freed, so that
// the exit handlers below can use it whatever order static objects are destroyed in).
struct JobStore {
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only
  std::unique_ptr<TcpStore> client;
  int ntasks = 1;
};
JobStore* job_store = nullptr;

Milliseconds exit_wait() {
  const char* value = env_setting("TESSERA_SLURM_EXIT_WAIT_S");
  const int seconds = value != nullptr && *value != '\0' ? std::atoi(value) : 30;
  return Milliseconds(std::max(0, seconds) * 1000LL);
}

// Rank 0 at exit: the other tasks may still be finishing their last store calls (their groups'
// shutdown); leaving first would turn their clean exit into a failure.
void wait_for_the_others_then_stop() {
  if (job_store->ntasks > 1) {
    try {
      job_store->client->wait({kAllLeftKey}, exit_wait());
    } catch (const std::exception&) {
      // A task that died, or is slow to finish: rank 0 leaves anyway after the bounded wait.
    }
  }
  job_store->server->stop();
}

void say_this_task_left() {
  try {
    if (job_store->client->add(kLeftKey, 1) == job_store->ntasks - 1) job_store->client->set(kAllLeftKey, "1");
  } catch (const std::exception&) {
    // Rank 0 gone already: nothing waits for this count.
  }
}

int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void set_variable(const std::string& name, const std::string& value) { ::setenv(name.c_str(), value.c_str(), 1); }

void join(const launcher::SlurmStep& step) {
  launcher::WorkerEnv env = launcher::worker_env_from_slurm(step, launcher::slurm_environment());
  // Every task on the first node reaches the store where it listens, whatever that node's name
  // resolves to there (each computes the same address); the other nodes use the name.
  if (step.node_id == 0) env.master_addr = slurm_store_host(step, env.master_addr);
  auto store = std::make_unique<JobStore>();
  store->ntasks = step.ntasks;
  TESSERA_CHECK(env.rank != 0 || step.node_id == 0, "[slurm] rank 0 of Slurm job ", step.job_id,
                " runs on node ", step.node_id, ", not on the first node of the list (", step.nodes.front(),
                ") where the others look for its store: use srun's default block distribution, or set MASTER_ADDR");
  if (env.rank == 0) {
    TcpStoreServerOptions options;
    options.host = env.master_addr;
    options.port = static_cast<uint16_t>(env.master_port);
    options.token = env.job_token;
    try {
      store->server = std::make_unique<TcpStoreServer>(options);
    } catch (const Error& e) {
      throw IoError(concat("[slurm] rank 0 of Slurm job ", step.job_id, " step ", step.step_id,
                           ": cannot host the rendezvous store: ", e.what(),
                           " (another job on this node may hold the port: set MASTER_PORT)"));
    }
  }
  for (const auto& [name, value] : launcher::to_variables(env)) set_variable(name, value);
  TcpStoreOptions client;
  client.host = env.master_addr, client.port = static_cast<uint16_t>(env.master_port);
  client.token = env.job_token, client.rank = env.rank;
  store->client = std::make_unique<TcpStore>(client);  // retries until rank 0 listens (60 s)
  job_store = store.release();
  std::atexit(env.rank == 0 ? wait_for_the_others_then_stop : say_this_task_left);
  if (env.num_threads == 0 && step.local_tasks > 1) {
    // As `tessera run` divides the cores among a node's workers; under a Slurm CPU binding the
    // affinity mask is this task's own already.
    const char* per_task = std::getenv("SLURM_CPUS_PER_TASK");
    const int threads = per_task != nullptr && std::atoi(per_task) > 0 ? std::atoi(per_task)
                                                                        : std::max(1, usable_cores() / step.local_tasks);
    set_variable("TESSERA_NUM_THREADS", std::to_string(threads));
    set_num_threads(threads);
  }
}

}  // namespace

std::string slurm_store_host(const launcher::SlurmStep& step, const std::string& master_addr) {
  const std::string what = concat("MASTER_ADDR '", master_addr, "' (the first node of Slurm job ", step.job_id, ")");
  std::string host = detail::listen_address(master_addr, what);
  if (host == "127.0.0.1" && step.nnodes > 1) {
    const char* iface = env_setting("TESSERA_SOCKET_IFNAME");
    host = iface != nullptr ? detail::address_of_interface(iface) : detail::address_towards(step.nodes[1]);
  }
  return host;
}

std::optional<launcher::SlurmStep> slurm_step_to_join() {
  if (std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr) return std::nullopt;
  if (launched_by_mpi()) return std::nullopt;
  return launcher::slurm_step_from_environment();
}

bool join_slurm_step() {
  static std::mutex mu;
  static bool joined = false;
  std::lock_guard lock(mu);
  if (joined) return true;
  std::optional<launcher::SlurmStep> step = slurm_step_to_join();
  if (!step) return false;
  join(*step);
  joined = true;
  return true;
}

}  // namespace tessera::dist
