#include "tessera/train/ps_strategy.h"

#include <filesystem>

#include "tessera/parallel/ps/remote_optimizer.h"

namespace tessera::train {

PsStrategy::PsStrategy(parallel::ps::ClientOptions options, int num_workers)
    : options_(std::move(options)), num_workers_(num_workers) {
  TESSERA_CHECK(num_workers >= 1 && options_.rank >= 0 && options_.rank < num_workers, "[train] worker ",
                options_.rank, " of ", num_workers);
}

std::string PsStrategy::shard_dir(const RunOutput& run) {
  TESSERA_CHECK(!run.run_id.empty(), "[train] the parameter servers' checkpoints need the run's id");
  return (std::filesystem::path(run.dir) / "ps-shards" / run.run_id).string();
}

std::vector<Tensor> PsStrategy::prepare(std::shared_ptr<nn::Module> model) {
  worker_ = std::make_unique<parallel::ps::PsWorker>(model, options_);
  return LocalStrategy::prepare(std::move(model));
}

std::unique_ptr<optim::Optimizer> PsStrategy::own_optimizer(std::vector<Tensor>& params, double lr) {
  TESSERA_ASSERT(worker_, "PsStrategy::own_optimizer before prepare");
  return std::make_unique<parallel::ps::RemoteOptimizer>(params, lr, *worker_);
}

void PsStrategy::on_fit_start(int64_t step, bool resumed, const RunOutput& run) {
  if (started_) return;
  // Worker 0 initialises the servers, or has them load the resumed step's shards.
  worker_->start(step, resumed ? shard_dir(run) : "");
  started_ = true;
}

std::optional<EvalContribution> PsStrategy::evaluate_batch(const data::Batch& batch) {
  if (rank() != 0) return std::nullopt;
  return LocalStrategy::evaluate_batch(batch);
}

void PsStrategy::before_evaluation() {
  if (started_) worker_->refresh();  // asynchronous modes: evaluate the newest values
}

void PsStrategy::before_checkpoint(const RunOutput& run, int64_t step) {
  // The servers' shards first: the worker's checkpoint, written last, is what makes step N resumable.
  worker_->save(shard_dir(run), step);
}

nn::StateDict PsStrategy::model_state() {
  // Sparse tables live on the servers only: pull them in for a complete model file.
  if (started_ && rank() == 0) worker_->pull_sparse_tables();
  return LocalStrategy::model_state();
}

void PsStrategy::add_step_metrics(nlohmann::json& record) const {
  const auto& c = worker_->counters();
  record["ps_bytes_total"] = c.total_bytes();
  record["ps_wait_s_total"] = c.wait_seconds;
}

}  // namespace tessera::train
