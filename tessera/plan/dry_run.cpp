#include "tessera/plan/dry_run.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "tessera/core/cpu_allocator.h"
#include "tessera/core/error.h"
#include "tessera/dist/process_group.h"
#include "tessera/dist/store/hash_store.h"
#include "tessera/train/trainer.h"
#include "tessera/util/clock.h"
#include "tessera/util/thread_pool.h"

namespace tessera::plan {

namespace {

namespace fs = std::filesystem;
using tessera::detail::concat;

// A directory for the dry run's own files (metrics, run id), removed however the run ends.
struct ScratchDirectory {
  fs::path path;
  ScratchDirectory() {
    std::string pattern = (fs::temp_directory_path() / "tessera-plan-XXXXXX").string();
    TESSERA_CHECK(::mkdtemp(pattern.data()) != nullptr, "[plan] could not make a temporary directory under ",
                  fs::temp_directory_path().string());
    path = pattern;
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// The config a dry rank trains with: the user's, writing nowhere that matters and saving nothing.
train::TrainConfig dry_config(train::TrainConfig config, const PlanOptions& options, const fs::path& scratch) {
  config.train.output_dir = scratch.string();
  config.train.overwrite = true;
  config.train.checkpoint_async = false;
  config.observability.trace = false;
  config.observability.tensorboard.clear();
  // HSDP's shards are a host's ranks: the hosts of the plan, where the config leaves it to the launcher.
  if (config.distributed.strategy == "hsdp" && config.distributed.hsdp_shard_size == 0)
    config.distributed.hsdp_shard_size = options.world / options.hosts;
  return config;
}

// The bytes of the storages of `tensors` not counted yet (resident ones only: ZeRO-3 releases its
// gathered parameters' storage between uses).
int64_t new_storage_bytes(const std::vector<Tensor>& tensors, std::set<const void*>& counted) {
  int64_t bytes = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.impl()->storage) continue;
    const Storage& s = *t.impl()->storage;
    if (s.data() == nullptr || !counted.insert(s.data()).second) continue;
    bytes += static_cast<int64_t>(s.nbytes());
  }
  return bytes;
}

std::vector<Tensor> gradients_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined()) grads.push_back(p.grad());
  return grads;
}

// What the trainer's rank holds between steps, by category; `resident`: the allocator's live bytes then.
MemoryPlan held_memory(train::Trainer& trainer, const dist::DryLog& log, int64_t resident) {
  std::vector<Tensor> params = trainer.optimizer().params();
  if (trainer.strategy().keeps_whole_model())
    for (const Tensor& p : trainer.model().parameters()) params.push_back(p);
  std::vector<Tensor> state;
  for (const auto& [name, t] : trainer.optimizer().state_dict()) state.push_back(t);
  MemoryPlan m;
  std::set<const void*> counted;
  m.parameters = new_storage_bytes(params, counted);
  m.gradients = new_storage_bytes(gradients_of(params), counted);
  m.optimizer_state = new_storage_bytes(state, counted);
  // Gradients that live in shared memory are not in the allocator's figures (resident, peak).
  int64_t outside_allocator = 0;
  for (const dist::DryLog::SymmetricBuffer& b : log.symmetric()) {
    if (b.shared) outside_allocator += static_cast<int64_t>(b.bytes);
    if (counted.insert(b.data).second) m.communication_buffers += static_cast<int64_t>(b.bytes);
  }
  const int64_t held = m.parameters + m.gradients + m.optimizer_state + m.communication_buffers - outside_allocator;
  m.other = std::max<int64_t>(0, resident - held);
  return m;
}

// Marks each flight entry with the phase it was queued in: phase k began at starts[k] (Unix us).
void mark_phases(std::vector<nlohmann::json>& records, const std::vector<int64_t>& starts,
                 const std::vector<std::string>& names) {
  for (auto& record : records)
    for (auto& entry : record["entries"]) {
      const int64_t queued = entry.value("queued_us", int64_t{0});
      size_t k = 0;
      while (k + 1 < starts.size() && queued >= starts[k + 1]) ++k;
      entry["phase"] = names[k];
    }
}

}  // namespace

std::vector<std::string> phase_names(const PlanOptions& options) {
  std::vector<std::string> names{"setup"};
  for (int s = 1; s <= options.steps; ++s) names.push_back(concat("step ", s));
  return names;
}

namespace {

// Puts the process's thread count back as it was: every dry rank's Trainer sets it (train.threads),
// and a plan must leave the caller's (a Python session, the next layout of a search) as it found it.
struct ThreadCountKept {
  int before = num_threads();
  ~ThreadCountKept() { set_num_threads(before); }
};

void check_options(const train::TrainConfig& config, const PlanOptions& options) {
  TESSERA_CHECK(config.distributed.strategy != "ps", "[plan] parameter-server jobs are not planned yet: their "
                "workers and servers are separate programs; plan the same model under ddp for its worker side");
  TESSERA_CHECK(options.world >= 1 && options.hosts >= 1 && options.world % options.hosts == 0, "[plan] --world ",
                options.world, " ranks cannot be spread evenly over --hosts ", options.hosts);
  TESSERA_CHECK(options.steps >= 1, "[plan] at least one step, got ", options.steps);
}

dist::ProcessGroupPtr dry_group(int rank, const PlanOptions& options, std::shared_ptr<dist::DryLog> log,
                                std::shared_ptr<dist::DryMailbox> mailbox, bool wait_for_messages) {
  dist::ProcessGroupOptions group_options;
  group_options.timeout = std::chrono::milliseconds(300000);
  group_options.collective_check = false;  // no peers to compare with; the plan compares the ranks itself
  group_options.flight_entries = 1 << 20;  // the whole run: the plan is read from it
  group_options.dump_flight_records = false;  // never over a real run's records in TESSERA_FLIGHT_DIR
  return std::make_shared<dist::ProcessGroup>(
      dist::make_dry_communicator(rank, options.world, std::move(log), std::move(mailbox), wait_for_messages,
                                  options.hosts > 1 ? options.world / options.hosts : 0),
      std::make_shared<dist::HashStore>(group_options.timeout), group_options);
}

// What fit does before its first step, and after each step's update (the stop flag's all-reduce),
// so that both dry runs issue a real job's collectives.
void start_as_fit_does(train::Trainer& trainer) {
  trainer.claim_run();
  trainer.strategy().set_training(true);
}
void step_as_fit_does(train::Trainer& trainer, const data::Batch& batch) {
  trainer.train_step(batch);
  trainer.agree_on_stopping();
}

data::Batch next_batch(train::Trainer& trainer, const PlanOptions& options) {
  std::optional<data::Batch> batch = trainer.next_batch();
  TESSERA_CHECK(batch.has_value(), "[plan] the training set has fewer than ", options.steps, " batches per epoch");
  return *batch;
}

}  // namespace

bool needs_message_exchange(const train::TrainConfig& config) {
  return train::uses_model_parallelism(config) || config.distributed.strategy == "mesh" || config.parallel.cp > 1 ||
         config.parallel.ep > 1;
}

void exchange_messages(const train::TrainConfig& config, const PlanOptions& options, std::shared_ptr<dist::DryMailbox> mailbox) {
  check_options(config, options);
  const ThreadCountKept threads_kept;  // each rank's Trainer sets the process's thread count
  train::TrainConfig one_thread = config;
  one_thread.train.threads = 1;              // every rank at once on this machine's cores
  one_thread.train.memory_budget_mb = 0;     // a process-wide budget, meant for one rank, not all of them
  std::vector<std::exception_ptr> failures(static_cast<size_t>(options.world));
  std::atomic<int> first_failed{-1};  // the rank that failed first; the others' failures follow from it
  std::vector<std::thread> ranks;
  auto join_all = [&] {
    for (auto& t : ranks)
      if (t.joinable()) t.join();
  };
  try {
    for (int r = 0; r < options.world; ++r)
      ranks.emplace_back([&, r] {
        try {
          ScratchDirectory scratch;
          auto group = dry_group(r, options, std::make_shared<dist::DryLog>(), mailbox, true);
          train::Trainer trainer(dry_config(one_thread, options, scratch.path), group);
          start_as_fit_does(trainer);
          for (int s = 1; s <= options.steps; ++s) step_as_fit_does(trainer, next_batch(trainer, options));
          mailbox->finished(r);
        } catch (const std::exception& e) {
          failures[static_cast<size_t>(r)] = std::current_exception();
          int none = -1;
          first_failed.compare_exchange_strong(none, r);
          mailbox->abort(concat("rank ", r, "'s dry run failed: ", e.what()));
        }
      });
  } catch (...) {  // a thread that could not start: the started ones end at the abort
    mailbox->abort("the ranks' threads could not all start");
    join_all();
    throw;
  }
  join_all();
  if (const int r = first_failed.load(); r >= 0) std::rethrow_exception(failures[static_cast<size_t>(r)]);
}

RankPlan dry_run_rank(const train::TrainConfig& config, const PlanOptions& options, int rank,
                      std::shared_ptr<dist::DryMailbox> mailbox) {
  check_options(config, options);
  const ThreadCountKept threads_kept;
  ScratchDirectory scratch;
  const std::vector<std::string> names = phase_names(options);
  std::vector<int64_t> starts;
  auto log = std::make_shared<dist::DryLog>();
  auto group = dry_group(rank, options, log, std::move(mailbox), false);
  RankPlan plan;
  plan.rank = rank;
  const int64_t base = static_cast<int64_t>(cpu_allocator::allocated_bytes());
  cpu_allocator::reset_peak_allocated_bytes();
  starts.push_back(unix_micros());
  log->set_phase(names[0]);
  train::Trainer trainer(dry_config(config, options, scratch.path), group);
  plan.strategy = trainer.strategy().describe();
  if (plan.strategy.empty()) plan.strategy = trainer.strategy().name();
  start_as_fit_does(trainer);
  int64_t peak = static_cast<int64_t>(cpu_allocator::peak_allocated_bytes()) - base;
  int64_t resident = 0, step_peak = 0;
  for (int s = 1; s <= options.steps; ++s) {
    const data::Batch batch = next_batch(trainer, options);
    resident = static_cast<int64_t>(cpu_allocator::allocated_bytes()) - base;
    cpu_allocator::reset_peak_allocated_bytes();
    starts.push_back(unix_micros());
    log->set_phase(names[static_cast<size_t>(s)]);
    const auto t0 = std::chrono::steady_clock::now();
    step_as_fit_does(trainer, batch);
    plan.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    step_peak = static_cast<int64_t>(cpu_allocator::peak_allocated_bytes()) - base;
    peak = std::max(peak, step_peak);
  }
  const int64_t after = static_cast<int64_t>(cpu_allocator::allocated_bytes()) - base;
  plan.memory = held_memory(trainer, *log, after);
  plan.memory.activations = std::max<int64_t>(0, step_peak - resident);
  plan.memory.peak = peak;
  plan.flight_records = dist::ProcessGroup::all_flight_records("tessera plan");
  mark_phases(plan.flight_records, starts, names);
  plan.calls = log->calls();
  return plan;
}

}  // namespace tessera::plan
