// One training run, readable top to bottom: build the data, the model, the optimizer and the
// schedule from a TrainConfig; then per step: batch -> forward -> loss -> backward -> (clip) -> step
// -> schedule; evaluate each epoch; checkpoint on schedule, at each epoch's end and when stopped.
// Everything a resumed run needs is in the checkpoint, so interrupted-and-resumed training ends with
// parameters bitwise equal to an uninterrupted run.
//
// Given a process group of several ranks the run is data parallel (DDP): each rank reads its
// DistributedSampler share (train.batch_size per rank; together the ranks' step s covers the
// single-process batch s of size world·batch_size), gradients are averaged in backward, evaluation
// is sharded and summed, every rank agrees each step on whether to stop (so a forwarded Ctrl-C stops
// them all after the same step), and rank 0 alone writes metrics, progress and checkpoints. With
// train.global_batch_size = G each of W ranks reads G / W a step instead, and checkpoints record the
// position in samples of the epoch's global order, so a run saved with N ranks resumes with M
// (the elastic agent's restarts; docs/distributed.md "Elastic training").
//
// Given parameter-server client options instead (distributed.strategy = "ps"), this process is one
// worker of a parameter-server job (tessera/parallel/ps): it reads its DistributedSampler share,
// pushes gradients and pulls values each step, and the servers run the optimizer. Worker 0 alone
// evaluates, writes metrics and checkpoints, and has the servers checkpoint their shards first.
#pragma once
#include <atomic>
#include <mutex>
#include <memory>
#include <optional>

#include "tessera/core/rng.h"
#include "tessera/data/char_dataset.h"
#include "tessera/data/data_loader.h"
#include "tessera/dist/process_group.h"
#include "tessera/io/safetensors.h"
#include "tessera/nn/module.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/parallel/ps/worker.h"
#include "tessera/train/builders.h"
#include "tessera/train/config.h"
#include "tessera/train/elastic_report.h"
#include "tessera/train/survivor_save.h"
#include "tessera/train/progress.h"

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


class Trainer {
 public:
  // `group`: the job's ranks (null or a group of one: single-process training).
  explicit Trainer(TrainConfig config, dist::ProcessGroupPtr group = nullptr);
  // One worker of a parameter-server job: `ps.rank` of `num_workers`, served by `ps.servers`.
  Trainer(TrainConfig config, parallel::ps::ClientOptions ps, int num_workers);
  ~Trainer();
  // Loads model, optimizer, schedule, data position and RNG state. `path` as io::load_checkpoint
  // takes it; "" means the latest checkpoint of this run's output_dir (an IoError if there is none).
  void resume(const std::string& path = "");
  FitResult fit();
  EvalResult evaluate();
  // Saves a checkpoint of the current state now; returns its directory.
  std::string save_checkpoint();
  // Set from a signal handler: the run stops after the current step, with a checkpoint.
  static void request_stop();
  static bool stop_requested() { return stop_requested_; }

  nn::Module& model() { return *model_; }
  const TrainConfig& config() const { return config_; }
  int64_t global_step() const { return step_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // Samples per step over all ranks (train.global_batch_size, else batch_size × world size), and this
  // rank's share of them.
  int64_t global_batch_size() const;
  int64_t per_rank_batch_size() const;
  // The DDP wrapper when world_size() > 1, else null.
  const parallel::ddp::DistributedDataParallel* ddp() const { return ddp_.get(); }
  const data::Vocabulary* vocabulary() const { return vocab_.get(); }
  // The parameter-server worker when the job is one, else null.
  const parallel::ps::PsWorker* ps_worker() const { return ps_.get(); }

 private:
  void build();  // what both constructors do once rank and world size are known
  void build_data();
  void apply_fault_injection();
  std::string ps_shard_dir() const;
  // The two files of a checkpoint at step_, with `rng` as the generator state.
  std::pair<io::SafetensorsFile, io::SafetensorsFile> checkpoint_files(const std::string& rng);
  // Under the elastic agent, after a peer died: this replica's state at its last whole step, unless
  // another survivor already saves that step (returns "").
  std::string save_survivor_checkpoint();
  Tensor loss_of(const data::Batch& batch, Tensor* logits_out, bool training);
  // True on every rank if it is true on any (one tiny all-reduce; no communication alone).
  bool any_rank(bool flag);

  TrainConfig config_;
  dist::ProcessGroupPtr group_;
  int rank_ = 0, world_size_ = 1;
  std::unique_ptr<parallel::ddp::DistributedDataParallel> ddp_;
  std::optional<parallel::ps::ClientOptions> ps_options_;
  std::unique_ptr<parallel::ps::PsWorker> ps_;
  bool ps_started_ = false, resumed_ = false;
  std::shared_ptr<data::Dataset> train_set_, eval_set_;
  std::shared_ptr<data::Vocabulary> vocab_;
  std::unique_ptr<data::DataLoader> loader_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<optim::LRScheduler> schedule_;
  int64_t step_ = 0, epoch_ = 0, batch_in_epoch_ = 0;
  std::unique_ptr<ElasticReport> elastic_;  // rank 0 under the elastic agent, else null
  // Held while the optimizer step and the position counters change, so a survivor's save
  // (survivor_save.h) sees whole steps only; rng_at_step_ is the generator's state at step_.
  std::mutex state_mu_;
  Generator rng_at_step_;
  // Last, so destroyed first: its thread may read every member above.
  std::unique_ptr<SurvivorSave> survivor_;
  static std::atomic<bool> stop_requested_;
};

}  // namespace tessera::train
