#include "tessera/dist/init.h"

#include "tessera/dist/heartbeat.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/backends/mpi/mpi_job.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/slurm_job.h"
#include "tessera/dist/store/hash_store.h"
#include "tessera/dist/store/prefix_store.h"
#include "tessera/dist/store/store_from_env.h"
#include "tessera/util/settings.h"

namespace tessera::dist {

namespace {

bool debug_from_environment() { return env_flag("TESSERA_DIST_DEBUG", false); }

// Every rank calls init_process_group the same number of times, so the n-th call of each meets
// the others' n-th under the same store prefix.
std::atomic<int> groups_initialised{0};

}  // namespace

bool launched_as_job() {
  return launcher::has_worker_rank() || launched_by_mpi() ||
         slurm_step_to_join().has_value();
}

ProcessGroupPtr init_process_group(const InitOptions& options) {
  TESSERA_CHECK(options.timeout > Milliseconds(0), "[init_process_group] timeout must be positive");
  std::string prefix = group_store_prefix(groups_initialised++);
  BackendContext context;
  context.timeout = options.timeout;
  std::shared_ptr<Store> root;
  // A task of `srun -n N`: the Slurm variables become the env contract below (unless the job asks
  // for the mpi backend, which joins through srun's MPI plugin instead).
  if (options.backend != "mpi") join_slurm_step(options.timeout);
  if (launcher::has_worker_rank()) {
    launcher::WorkerEnv env = launcher::worker_env_from_environment();
    root = store_from_env(options.timeout);
    context.rank = env.rank;
    context.size = env.world_size;
    context.local_size = env.local_world_size;
  } else if (launched_by_mpi()) {
    MpiJob job = join_mpi_job(options.timeout);
    root = job.store;
    context.rank = job.rank;
    context.size = job.size;
    context.local_size = job.local_size;
  } else {
    root = std::make_shared<HashStore>();
    context.local_size = 1;
  }
  root->set_timeout(options.timeout);
  context.store = std::make_shared<PrefixStore>(prefix, root);
  std::unique_ptr<Communicator> communicator = make_communicator(options.backend, context);
  ProcessGroupOptions group_options;
  group_options.timeout = options.timeout;
  group_options.debug = options.debug.value_or(debug_from_environment());
  group_options.collective_check = env_flag("TESSERA_COLLECTIVE_CHECK", group_options.collective_check);
  group_options.exit_when_stuck_after_mismatch = true;
  group_options.wait_for_failure_reports = options.wait_for_failure_reports;
  if (const int64_t beat = env_int(launcher::kHeartbeatMsVariable, 0); beat > 0) group_options.heartbeat = Milliseconds(beat);
  return std::make_shared<ProcessGroup>(std::move(communicator), context.store, group_options);
}

}  // namespace tessera::dist
