// One training run, readable top to bottom, whatever the strategy (train/strategy.h): build the
// data, the model, the optimizer and the schedule from a TrainConfig; then per step
//
//   batch -> strategy.forward_backward -> (fp16: unscale, skip on overflow) -> (clip)
//         -> strategy.optimizer_step -> schedule -> metrics -> (checkpoint)
//
// evaluate each epoch; checkpoint on schedule, at each epoch's end and when stopped. Everything a
// resumed run needs is in the checkpoint, so interrupted-and-resumed training ends with parameters
// bitwise equal to an uninterrupted run, with every strategy (the mesh writes its sharded optimizer
// state in one process's layout: mesh_strategy.h).
//
// The data: each replica (a DDP rank, a parameter-server worker, a mesh's data-parallel replica)
// reads its DistributedSampler share of every global batch. The global batch is
// train.global_batch_size, else train.batch_size × replicas; with global_batch_size set,
// checkpoints record the position in samples of the epoch's global order, so a run saved with N
// replicas resumes with M (the elastic agent's restarts; docs/distributed.md "Elastic training").
// Rank 0 alone writes metrics, progress and checkpoints; every rank agrees each step on whether to
// stop, so a forwarded Ctrl-C stops them all after the same step.
//
// Checkpoints belong to a run: a run keeps one id from its fresh start through every resume, and
// retention deletes only its own (io/checkpoint.h). A fresh run in a directory that holds another
// run's checkpoints is refused unless train.overwrite moves them aside.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "tessera/core/rng.h"
#include "tessera/data/char_dataset.h"
#include "tessera/data/data_loader.h"
#include "tessera/dist/live_membership.h"
#include "tessera/dist/process_group.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/safetensors.h"
#include "tessera/nn/module.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"
#include "tessera/train/builders.h"
#include "tessera/train/background_save.h"
#include "tessera/train/config.h"
#include "tessera/dist/launcher/progress_file.h"
#include "tessera/train/elastic_report.h"
#include "tessera/train/progress.h"
#include "tessera/train/make_strategy.h"
#include "tessera/train/strategy.h"
#include "tessera/train/survivor_save.h"

namespace tessera {
class TaskProgress;
}

namespace tessera::train {

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // classification only (NaN for the language model)
  int64_t samples = 0;
};

struct FitResult {
  int64_t steps = 0;
  bool stopped_early = false;  // max_steps reached or a stop was requested
  std::optional<EvalResult> last_eval;
  std::string last_checkpoint;
};

// The refusal of a fresh run into `output_dir` whose checkpoints (`latest`) another run wrote, with
// what to do instead. The CLI raises it before starting workers; each Trainer would raise it too.
ValueError another_runs_checkpoints(const std::string& output_dir, const std::string& latest);

class Trainer {
 public:
  // `group`: the job's ranks (null or a group of one: single-process training). The strategy is
  // chosen from the config (make_strategy.h): local, ddp, zero, or mesh for pipeline / tensor
  // parallelism.
  explicit Trainer(TrainConfig config, dist::ProcessGroupPtr group = nullptr);
  // One worker of a parameter-server job: `ps.rank` of `num_workers`, served by `ps.servers`.
  Trainer(TrainConfig config, parallel::ps::ClientOptions ps, int num_workers);
  // A process that joins a running live job (the launcher starts it in a lost worker's slot, with
  // TESSERA_LIVE_JOINER=1): waits until a member admits it, builds as the members do, and fit()
  // first takes the training state from a member (trainer_live.cpp). Null when the job ended before
  // it was admitted.
  static std::unique_ptr<Trainer> join_live_job(TrainConfig config);
  ~Trainer();
  // Loads model, optimizer, schedule, data position and RNG state. `path` as io::load_checkpoint
  // takes it; "" means the latest checkpoint of this run's output_dir (an IoError if there is none).
  void resume(const std::string& path = "");
  // Trains to the configured end (or max_steps, or a stop request). Under the elastic agent, a
  // collective that fails on a lost peer first saves this replica's last whole step (as the
  // survivors' save does), then rethrows.
  FitResult fit();
  // One optimizer step on one batch (this replica's share): forward, backward, clipping, optimizer,
  // schedule. Returns the loss the strategy reports. What fit runs each step; benchmarks call it.
  double train_step(const data::Batch& batch);
  // What fit does first: agree on the run's id, and on a fresh run claim output_dir (refusing
  // another run's checkpoints). Collective; once per run.
  void claim_run();
  // Whether the job stops after the step just taken (a stop request on any rank, or max_steps):
  // one tiny all-reduce that every rank makes after every step of fit. Collective.
  bool agree_on_stopping();
  // The next batch of this replica's share, as fit reads them from the run's position (nullopt at
  // the epoch's end). For callers that step without fit: tessera plan's dry run.
  std::optional<data::Batch> next_batch();
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  // `progress`, when given, counts this rank's batches (tessera eval's bar).
  EvalResult evaluate(TaskProgress* progress = nullptr);  // collective
  // Saves a checkpoint of the current state now; returns its directory (on rank 0; "" elsewhere).
  // Collective. With train.checkpoint_async the directory is complete once the background save is
  // (fit waits for it; so does wait_for_checkpoint).
  std::string save_checkpoint();
  // Waits for a background save in flight (train.checkpoint_async), rethrowing its failure.
  void wait_for_checkpoint() {
    if (saver_) saver_->wait();
  }
  // The whole model's parameters and buffers under their single-process names, on rank 0 (empty
  // elsewhere). Collective.
  nn::StateDict full_state_dict() { return strategy_->model_state(); }
  // Set from a signal handler: the run stops after the current step, with a checkpoint.
  static void request_stop();
  static bool stop_requested() { return stop_requested_; }

  // The whole model (not for the mesh, whose ranks hold their part only: see full_state_dict).
  nn::Module& model();
  Strategy& strategy() { return *strategy_; }
  const TrainConfig& config() const { return config_; }
  int64_t global_step() const { return step_; }
  int rank() const { return strategy_->rank(); }
  int world_size() const { return strategy_->world_size(); }
  // Samples per step over all replicas, and one replica's share of them.
  int64_t global_batch_size() const;
  int64_t per_replica_batch_size() const;
  const data::Vocabulary* vocabulary() const { return vocab_.get(); }
  const std::string& run_id() const { return run_id_; }

 private:
  // A live job's joiner: its data loaded before it asked to join (join_live_job), so the members
  // never wait for that.
  Trainer(TrainConfig config, dist::ProcessGroupPtr group, Datasets preloaded);
  void build(StrategyEnvironment env);  // what the constructors do
  void assemble(StrategyEnvironment env);  // build()'s datasets, strategy, model and optimizer
  void build_data();
  // Under the elastic agent: refuses a global batch that a world size the job may reach cannot divide.
  void check_elastic_world_sizes() const;
  void apply_fault_injection();
  // The injected faults fire in the first generation of an elastic job, and before a live job's
  // first membership change, only: the job they disturbed then runs clean.
  bool faults_armed() const;
  void kill_this_worker(const char* where);
  // A fresh run: agrees on a run id and refuses (or with train.overwrite, moves aside) another
  // run's checkpoints in output_dir.
  void claim_output_dir();
  FitResult fit_epochs();  // fit's loop; fit adds the save after a peer's loss
  void save_after_losing_a_peer();
  // Live membership (trainer_live.cpp, dist/live_membership.h). Whether this job runs with it (the
  // config's distributed.live_membership, the launcher and what the strategy can carry); ValueError
  // where "on" asks for what cannot be.
  bool wants_live_membership() const;
  void start_live_membership();  // fit's start, on each rank of the launch
  // At a step boundary: whether the job stops, and whether the members meet for a new epoch (rank 0
  // admitted joiners). Replaces agree_on_stopping's collective: still one tiny all-reduce.
  std::pair<bool, bool> live_step_boundary();
  // The members meet for the next epoch (after a failed collective `cause`, or to admit joiners),
  // rebuild the group, the strategy and the data share, and take the state of the member that got
  // furthest. No process restarts.
  // `since`: where the change began, when it is a further try (the first try's epoch, its world
  // size and its start, which the log line and the record report).
  struct ChangeStart {
    std::chrono::steady_clock::time_point at;
    int world = 0;
    int64_t epoch = 0;
  };
  void change_membership(const std::string& cause, std::optional<ChangeStart> since = std::nullopt);
  // change_membership after a failed collective, again while the new group fails too (another
  // peer lost meanwhile), a bounded number of times.
  void regroup_after_failure(const std::string& cause);
  // ZeRO-1/2 (Strategy::shards_live_state): over the new group, the members agree on the step
  // whose state they can rebuild (the lowest among them) and the member that rebuilds it (the
  // source), and send it the pieces they and their neighbours' buddies hold; the source encodes the
  // whole state into pending_state_. A joiner takes part holding nothing. Returns the source (the
  // round's own source where the old layout held the whole state: a world of one). Collective.
  int gather_sharded_state(const dist::LiveEpoch& e, dist::ProcessGroup& group);
  // A live job whose state is cut over its ranks (wants_live_membership lets zero in at stages 1
  // and 2 only): its members and joiners rebuild the state through gather_sharded_state.
  bool live_state_is_sharded() const { return config_.distributed.strategy == "zero"; }
  // The layouts this process keeps committed pieces in (ZeRO's buddies), newest first, with the live
  // epoch each was built in: the strategy's, and those being replaced while a change has not
  // completed. Empty for a joiner, DDP and a world of one.
  std::vector<std::pair<int64_t, const parallel::zero::ShardBuddies*>> held_layouts() const;
  // Collective over the new group: `source`'s state (encoded by it before prepare) to every member;
  // `params`, where not empty, are what the optimizer updates from now on (ZeRO's new pieces); then
  // a sharding strategy's first commit in the new layout.
  void share_live_state(int source, const std::string& mine, std::vector<Tensor> params = {});
  void end_live_membership();  // rank 0 when fit ends: a joiner still waiting stops
  std::string encode_live_state();
  // Training position and the rest of a checkpoint's trainer metadata (resume, and a live state).
  // `past_an_epochs_end`: a position at the end of an epoch moves to the next one's start (a resume;
  // a live member's state, whose epoch still needs its evaluation, stays).
  void restore_position(const io::Metadata& metadata, const std::string& trainer_file, bool past_an_epochs_end = true);
  void agree_on_run_id();  // collective
  // train.checkpoint_verify: how far a save is read back before it counts.
  io::Verify checkpoint_verification() const { return io::parse_verify(config_.train.checkpoint_verify); }
  std::string checkpoints_dir() const;
  RunOutput run_output() const;  // where the strategy keeps its own files of this run
  // The two files of a checkpoint at step_, with `rng` as the generator state.
  std::pair<io::SafetensorsFile, io::SafetensorsFile> checkpoint_files(nn::StateDict model_state,
                                                                     nn::StateDict optimizer_state,
                                                                     const std::string& rng);
  // Under the elastic agent, after a peer died: this replica's state at its last whole step, unless
  // another survivor already saves that step (returns "").
  std::string save_survivor_checkpoint();

  // The batch on the training device (train.device): the loader's batch itself on the CPU.
  data::Batch on_device(const data::Batch& batch) const;

  TrainConfig config_;
  Device device_;  // train.device
  // Held for the run's whole life even when the strategy needs no collectives (a world of one):
  // its watchdog publishes the heartbeats an elastic agent watches.
  dist::ProcessGroupPtr group_;
  std::unique_ptr<Strategy> strategy_;
  bool resumed_ = false;
  std::string run_id_;
  std::optional<Datasets> preloaded_;  // consumed by assemble
  std::shared_ptr<data::Dataset> train_set_, eval_set_;
  std::shared_ptr<data::Vocabulary> vocab_;
  std::unique_ptr<data::DataLoader> loader_;
  std::shared_ptr<nn::Module> model_;  // null for the mesh (its ranks keep their part only)
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<optim::LRScheduler> schedule_;
  std::unique_ptr<optim::GradScaler> scaler_;  // train.precision = "fp16" only
  std::unique_ptr<BackgroundSaver> saver_;      // train.checkpoint_async only
  int64_t step_ = 0, epoch_ = 0, batch_in_epoch_ = 0;
  bool reading_batches_ = false;  // next_batch has started the loader's epoch
  // The process's memory budget before train.memory_budget_mb set this run's; restored by the
  // destructor, so that one run's budget never binds the next work of the process (tune, Python).
  std::optional<size_t> budget_before_;
  std::unique_ptr<ElasticReport> elastic_;  // rank 0 under the elastic agent, else null
  // Under a launcher: where this rank records its steps for the wedge watch (progress_file.h).
  std::unique_ptr<dist::launcher::ProgressWriter> progress_;
  void block_as_a_wedged_rank();  // TESSERA_DEBUG_WEDGE=step:R:S (util/debug_wedge.h)
  void record_progress(dist::launcher::ProgressRecord::Phase phase) {
    if (progress_) progress_->write(step_, phase);
  }
  // Held while the optimizer step and the position counters change, so a survivor's save
  // (survivor_save.h) sees whole steps only; rng_at_step_ is the generator's state at step_.
  std::mutex state_mu_;
  Generator rng_at_step_;
  // Last, so destroyed first: its thread may read every member above.
  std::unique_ptr<SurvivorSave> survivor_;
  int64_t resumed_survivors_of_ = -1;  // the generation whose survivors saved the resumed checkpoint
  std::unique_ptr<dist::LiveMembership> live_;  // null unless the job runs with live membership
  bool take_live_state_ = false;  // a joiner: fit starts by taking a member's state
  int launch_rank_ = -1;          // RANK as the launcher gave it: the heartbeats' name
  std::chrono::steady_clock::time_point last_joiner_check_{};  // rank 0's last look for joiners
  std::vector<nlohmann::json> membership_changes_;  // for the lead's metrics.jsonl
  std::string pending_state_;  // the source's encoded state, until a membership change completes
  // ZeRO under live membership: the strategies being replaced (their buddies hold the pieces) until
  // a membership change completes, and the steps the change took the members back (at most one).
  struct RetiredLayout {
    int64_t epoch = 0;  // the live epoch it was built in
    std::unique_ptr<Strategy> strategy;
  };
  std::vector<RetiredLayout> retired_;
  int64_t layout_epoch_ = 0;  // the live epoch strategy_ was built in
  int64_t live_steps_redone_ = 0;
  int64_t live_furthest_step_ = -1;  // the furthest member's step since a change's first try
  static std::atomic<bool> stop_requested_;
};

}  // namespace tessera::train
