#include "tessera/dist/slurm_job.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/launcher.h"
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
  try {
    return Milliseconds(env_int("TESSERA_SLURM_EXIT_WAIT_S", 30) * 1000);
  } catch (const ValueError& e) {
    // Read at exit, where an error would only hide the job's own outcome: said, then the default.
    std::fprintf(stderr, "[slurm] %s; waiting the default 30 s\n", e.what());
    return Milliseconds(30000);
  }
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

// Intra-op threads of a task: SLURM_CPUS_PER_TASK when the job asked for it; else the task's CPU
// binding when Slurm gave it one narrower than the machine (the mask is the task's own); else, as
// `tessera run` divides them, the machine's cores over the node's tasks.
int threads_for_task(const launcher::SlurmStep& step, const std::map<std::string, std::string>& variables) {
  if (auto it = variables.find("SLURM_CPUS_PER_TASK"); it != variables.end()) {
    const int n = std::atoi(it->second.c_str());
    if (n >= 1) return std::min(n, 1024);
  }
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int mask = launcher::usable_cores();
  if (mask < machine) return std::clamp(mask, 1, 1024);
  return std::clamp(machine / step.local_tasks, 1, 1024);
}

void set_variable(const std::string& name, const std::string& value) { ::setenv(name.c_str(), value.c_str(), 1); }

void join(const launcher::SlurmStep& step, Milliseconds timeout) {
  const auto variables = launcher::slurm_environment();
  launcher::WorkerEnv env = launcher::worker_env_from_slurm(step, variables);
  const bool master_given = variables.count("MASTER_ADDR") > 0;
  TESSERA_CHECK(master_given || env.rank != 0 || step.node_id == 0, "[slurm] rank 0 of Slurm job ", step.job_id,
                " runs on node ", step.node_id, ", not on the first node of the list (", step.nodes.front(),
                ") where the others look for its store: use srun's default block distribution (--distribution=block)");
  // Every task on the first node reaches the store where it listens, whatever that node's name
  // resolves to there (each computes the same address); the other nodes use the name.
  if (!master_given && step.node_id == 0) env.master_addr = slurm_store_host(step, env.master_addr);
  if (env.num_threads == 0) env.num_threads = threads_for_task(step, variables);
  // The environment changes before the store's server starts its thread (setenv beside a thread's
  // getenv is undefined behaviour); init_process_group is called before the trainer's threads.
  for (const auto& [name, value] : launcher::to_variables(env)) set_variable(name, value);
  set_num_threads(env.num_threads);
  auto store = std::make_unique<JobStore>();
  store->ntasks = step.ntasks;
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
  TcpStoreOptions client;
  client.host = env.master_addr, client.port = static_cast<uint16_t>(env.master_port);
  client.token = env.job_token, client.rank = env.rank;
  client.timeout = client.connect_timeout = timeout;  // retries until rank 0 listens
  store->client = std::make_unique<TcpStore>(client);
  job_store = store.release();
  std::atexit(env.rank == 0 ? wait_for_the_others_then_stop : say_this_task_left);
}

}  // namespace

std::string slurm_store_host(const launcher::SlurmStep& step, const std::string& master_addr) {
  const std::string what = concat("MASTER_ADDR '", master_addr, "' (the first node of Slurm job ", step.job_id, ")");
  std::string host = detail::listen_address(master_addr, what);
  if (host == "127.0.0.1" && step.nnodes > 1) {
    // Towards a node other than this one: the route to this node's own address leaves over loopback.
    const char* iface = env_setting("TESSERA_SOCKET_IFNAME");
    const std::string& other = step.nodes[step.node_id == 0 ? 1 : 0];
    host = iface != nullptr ? detail::address_of_interface(iface) : detail::address_towards(other);
  }
  return host;
}

std::optional<launcher::SlurmStep> slurm_step_to_join() {
  // Started by `tessera run` (a worker, or a parameter server, which has no RANK) or by mpirun (whose
  // processes may inherit the Slurm variables of the step that started its daemons): not a task here.
  if (launcher::has_rank() || env_setting("TESSERA_ROLE") != nullptr) return std::nullopt;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) return std::nullopt;
  return launcher::slurm_step_from_environment();
}

bool join_slurm_step(Milliseconds timeout) {
  static std::mutex mu;
  static bool joined = false;
  std::lock_guard lock(mu);
  if (joined) return true;
  std::optional<launcher::SlurmStep> step = slurm_step_to_join();
  if (!step) return false;
  join(*step, timeout);
  joined = true;
  return true;
}

}  // namespace tessera::dist
