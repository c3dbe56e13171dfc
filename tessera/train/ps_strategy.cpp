#include "tessera/train/ps_strategy.h"

#include <filesystem>

#include "tessera/parallel/ps/remote_optimizer.h"
#include "tessera/parallel/ps/server_checkpoint.h"
#include "tessera/parallel/ps/whole_state.h"

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
  // Worker 0 initialises the servers, or has them load the resumed step's shards; a checkpoint
  // written at another layout has none, and its whole state becomes the one-server files they
  // restore from (at any number of servers).
  const std::string dir = resumed ? shard_dir(run) : "";
  if (resumed && rank() == 0 && !std::filesystem::exists(parallel::ps::server_checkpoint_path(dir, 0, step)))
    parallel::ps::write_servers_state(dir, step, worker_->specs(), worker_->parameters(), resumed_optimizer_);
  worker_->start(step, dir);
  started_ = true;
}

nn::StateDict PsStrategy::optimizer_state(const optim::Optimizer& optimizer) {
  if (rank() != 0 || saved_step_ < 0) return LocalStrategy::optimizer_state(optimizer);
  std::vector<Shape> shapes;
  for (const Tensor& p : worker_->parameters()) shapes.push_back(p.shape());
  return parallel::ps::read_servers_optimizer_state(saved_dir_, saved_step_, worker_->specs(), shapes);
}

void PsStrategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  resumed_optimizer_ = state;
  nn::StateDict scalars;  // what the worker's RemoteOptimizer holds; the buffers live on the servers
  for (const auto& [key, t] : state)
    if (key == "step" || key == "lr") scalars.emplace_back(key, t);
  optimizer.load_state_dict(scalars);
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
  saved_dir_ = shard_dir(run), saved_step_ = step;
}

nn::StateDict PsStrategy::model_state() {
  // Sparse tables live on the servers only: pull them in for a complete model file.
  if (started_ && rank() == 0) worker_->pull_sparse_tables();
  return LocalStrategy::model_state();
}

void PsStrategy::add_step_metrics(nlohmann::json& record) const {
  LocalStrategy::add_step_metrics(record);
  const auto& c = worker_->counters();
  record["ps_bytes_total"] = c.total_bytes();
  record["ps_wait_s_total"] = c.wait_seconds;
}

}  // namespace tessera::train
