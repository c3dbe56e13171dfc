// One rank of `tessera plan`'s dry run: the job's real strategy, built by the real Trainer from the
// user's config at the target world size, runs its setup and a few training steps on the dry
// backend (dist/backends/dry: no peers, no wire), so that what this rank would hold and send in the
// real job is measured, not modelled:
//   - memory by category, from the tensors the rank holds after its steps and the allocator's peak
//     during them (the figure a real run records as peak_allocated_bytes);
//   - every collective, from its process groups' flight records (op, dtype, elements, call site; the
//     same records a real run writes), each marked with the phase it was issued in;
//   - every call the backend saw, point-to-point included, for the bytes per link (link_bytes.h);
//   - each step's time on this machine (the compute: the dry backend's calls cost nothing).
// The ranks run one after another in this process, so each rank's peak is its own. A model-parallel
// job's ranks need each other's messages and small facts (a pipeline's headers, the vocabulary
// shards' sizes): its ranks first run all at once, as threads, to collect them (exchange_messages).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/dist/backends/dry/dry_communicator.h"
#include "tessera/train/config.h"

namespace tessera::plan {

struct PlanOptions {
  int world = 1;  // ranks
  int hosts = 1;  // the ranks are spread over them in blocks of world / hosts (as the launcher numbers them)
  // Training steps after the setup; the last is the one reported per step. 3, since the first two
  // are not yet steady: DDP rebuilds its buckets after the first, and frees the old ones in the second.
  int steps = 3;
};

// Bytes this rank holds, by what they are for. parameters, gradients and optimizer_state are the
// tensors' storages (each counted once); communication_buffers the symmetric buffers strategies ask
// the backend for (DDP's buckets) that hold no gradients; other what else stays between steps (the
// data sets, caches); activations what the last step added at its peak (ZeRO-3's gathered units
// among them). A group inside one host keeps its symmetric buffers in shared memory, which the
// tensor allocator, and so peak (a real run's peak_allocated_bytes), does not count.
struct MemoryPlan {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, communication_buffers = 0, other = 0, activations = 0;
  int64_t peak = 0;  // the most live tensor bytes from the start of setup to the end of the last step
};

struct RankPlan {
  int rank = 0;
  std::string strategy;  // the strategy's description, as the trainer prints it
  MemoryPlan memory;
  // Each process group's flight record; every entry carries its "phase" ("setup", "step 1", ...).
  std::vector<nlohmann::json> flight_records;
  std::vector<dist::DryCall> calls;
  std::vector<double> step_seconds;  // each step's wall time here
};

// Rank `rank` of options.world; `config` as the user wrote it (its output directory is not touched:
// the dry run writes under a temporary directory it removes). Its receives take what `mailbox` holds.
RankPlan dry_run_rank(const train::TrainConfig& config, const PlanOptions& options, int rank,
                      std::shared_ptr<dist::DryMailbox> mailbox);

// Whether the ranks' runs need each other's messages and small collectives (a pipeline's stage
// headers, the vocabulary shards' sizes): every model-parallel layout (mesh, PP, TP, CP, EP), so
// that exchange_messages must run first.
bool needs_message_exchange(const train::TrainConfig& config);
// Every rank at once, one thread each, on the dry backend with messages delivered through `mailbox`
// (the same setup and steps as dry_run_rank, nothing measured), so that the one-at-a-time runs find
// every message they receive there. Rethrows the first rank's failure.
void exchange_messages(const train::TrainConfig& config, const PlanOptions& options,
                       std::shared_ptr<dist::DryMailbox> mailbox);

// The phase names, in order: "setup", "step 1", ..., "step <steps>".
std::vector<std::string> phase_names(const PlanOptions& options);

}  // namespace tessera::plan
