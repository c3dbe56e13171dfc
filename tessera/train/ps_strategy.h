// PsStrategy: one worker of a parameter-server job (parallel/ps). It reads its share of every
// global batch, computes gradients on its copy of the model, and the optimizer step pushes them and
// pulls the next values: the servers run the optimizer, the worker's schedule sets the lr each push
// carries (its optimizer is a RemoteOptimizer, whose step is the push and pull). Worker 0 initialises
// the servers (or has them restore a checkpoint's shards, or a checkpoint of another layout's whole
// state), evaluates for the job, and has the servers write their shards before it writes a
// checkpoint, which then also holds their optimizer state as one process's.
#pragma once
#include "tessera/parallel/ps/worker.h"
#include "tessera/train/local_strategy.h"

namespace tessera::train {

class PsStrategy : public LocalStrategy {
 public:
  bool supports_objectives() const override { return false; }  // no group of replicas to draw negatives from
  PsStrategy(parallel::ps::ClientOptions options, int num_workers);
  std::string name() const override { return "ps"; }
  int rank() const override { return options_.rank; }
  int world_size() const override { return num_workers_; }
  DataShare data_share() const override { return {rank(), world_size()}; }
  // Worker 0 evaluates all of it (the workers hold no replica to shard over); the others none.
  DataShare eval_share() const override { return {0, 1}; }
  bool takes_part_in_evaluation() const override { return rank() == 0; }

  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  // Its step pushes the gradients at the schedule's lr and pulls the next values (remote_optimizer.h).
  std::unique_ptr<optim::Optimizer> own_optimizer(std::vector<Tensor>& params, double lr) override;
  int64_t max_over_job(int64_t value) override { return value; }  // workers stop on their own
  std::optional<EvalContribution> evaluate_batch(const data::Batch& batch) override;
  void before_evaluation() override;
  nn::StateDict model_state() override;
  // The servers' optimizer state of the step they last saved, as one process's optimizer holds it
  // (parallel/ps/whole_state.h), so that the checkpoint resumes at any layout.
  nn::StateDict optimizer_state(const optim::Optimizer& optimizer) override;
  // Kept for the servers: a checkpoint of another layout starts them from its whole state.
  void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) override;
  bool holds_whole_state() const override { return false; }

  void on_fit_start(int64_t step, bool resumed, const RunOutput& run) override;
  void on_fit_end() override { worker_->finish(); }
  void before_checkpoint(const RunOutput& run, int64_t step) override;
  void add_step_metrics(nlohmann::json& record) const override;

  const parallel::ps::PsWorker& worker() const { return *worker_; }

 private:
  // <output_dir>/ps-shards/<run id>: the servers' files of this run only (server_checkpoint.h).
  static std::string shard_dir(const RunOutput& run);

  parallel::ps::ClientOptions options_;
  int num_workers_;
  std::unique_ptr<parallel::ps::PsWorker> worker_;
  bool started_ = false;
  std::string saved_dir_;     // where and which step the servers last saved (before_checkpoint)
  int64_t saved_step_ = -1;
  nn::StateDict resumed_optimizer_;  // a resumed checkpoint's whole optimizer state
};

}  // namespace tessera::train
