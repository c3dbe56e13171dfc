#include "tessera/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <csignal>
#include <fcntl.h>
#include <unistd.h>
#include <cstdlib>
#include <thread>

#include "tessera/data/bag_of_words.h"
#include "tessera/data/dataset.h"
#include "tessera/data/sampler.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/checkpoint.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/models.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/lamb.h"
#include "tessera/optim/lars.h"
#include "tessera/optim/sgd.h"
#include "tessera/parallel/sync_batch_norm.h"
#include "tessera/train/builders.h"
#include "tessera/train/lr_scaling.h"
#include "tessera/util/thread_pool.h"

namespace tessera::train {

namespace fs = std::filesystem;

std::atomic<bool> Trainer::stop_requested_{false};

void Trainer::request_stop() { stop_requested_ = true; }

namespace {

std::string metadata_value(const io::Metadata& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  if (it == m.end()) throw IoError("[checkpoint] " + file + " lacks metadata '" + key + "'; was it written by tessera train?");
  return it->second;
}

int64_t metadata_int(const io::Metadata& m, const std::string& key, const std::string& file) {
  std::string v = metadata_value(m, key, file);
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    throw IoError("[checkpoint] " + file + ": metadata '" + key + "' is not an integer: '" + v + "'");
  }
}

}  // namespace

Trainer::Trainer(TrainConfig config, dist::ProcessGroupPtr group)
    : config_(std::move(config)), group_(std::move(group)) {
  if (group_) rank_ = group_->rank(), world_size_ = group_->size();
  build();
}

Trainer::Trainer(TrainConfig config, parallel::ps::ClientOptions ps, int num_workers)
    : config_(std::move(config)), ps_options_(std::move(ps)) {
  TESSERA_CHECK(num_workers >= 1 && ps_options_->rank >= 0 && ps_options_->rank < num_workers, "[train] worker ",
                ps_options_->rank, " of ", num_workers);
  rank_ = ps_options_->rank;
  world_size_ = num_workers;
  build();
}

void Trainer::build() {
  validate(config_);
  if (config_.train.threads > 0) set_num_threads(static_cast<int>(config_.train.threads));
  build_data();
  manual_seed(config_.train.seed);  // the model's initialisation and dropout draw from here
  model_ = build_model(config_, vocab_ ? vocab_->size() : 0);
  if (world_size() > 1 && config_.distributed.sync_batchnorm && !ps_options_) model_ = parallel::convert_sync_batchnorm(model_, group_);
  if (ps_options_) {
    ps_ = std::make_unique<parallel::ps::PsWorker>(model_, *ps_options_);
  } else if (world_size() > 1) {  // checks every rank built the same model, then broadcasts rank 0's values
    parallel::ddp::DdpOptions ddp;
    ddp.bucket_cap_bytes = static_cast<size_t>(config_.distributed.bucket_cap_mb * (1 << 20));
    ddp.comm_hook = config_.distributed.comm_hook;
    ddp.comm_hook_options.powersgd_rank = static_cast<int>(config_.distributed.powersgd_rank);
    ddp.comm_hook_options.powersgd_start_iter = config_.distributed.powersgd_start_iter;
    ddp.comm_hook_options.topk_ratio = config_.distributed.topk_ratio;
    ddp.find_unused_parameters = config_.distributed.find_unused_parameters;
    ddp_ = std::make_unique<parallel::ddp::DistributedDataParallel>(model_, group_, ddp);
  }
  // The linear (or square-root) scaling rule: the global batch grows with the ranks, so may the lr.
  const double lr = scaled_lr(config_.optimizer.lr, config_.optimizer.scale_lr, world_size());
  optimizer_ = build_optimizer(config_.optimizer, lr, model_->parameters());
  // The schedule spans the configured epochs; max_steps only stops the run early (as an interruption
  // would), so a run stopped by it and resumed follows the same curve as one never stopped.
  schedule_ = build_schedule(config_.schedule, *optimizer_, config_.train.epochs * loader_->batches_per_epoch());
}

Trainer::~Trainer() = default;

void Trainer::build_data() {
  const auto& d = config_.data;
  Datasets sets = load_datasets(config_);
  train_set_ = sets.train;
  eval_set_ = sets.eval;
  vocab_ = sets.vocabulary;
  data::DataLoaderOptions opts;
  opts.batch_size = per_rank_batch_size();
  opts.drop_last = true;  // equal batches keep the step count and the schedule simple
  opts.prefetch = static_cast<int>(d.prefetch);
  // With one rank this is the RandomSampler order (sampler.h), so single-process runs are unchanged.
  loader_ = std::make_unique<data::DataLoader>(
      train_set_,
      std::make_shared<data::DistributedSampler>(train_set_->size(), rank(), world_size(), true, config_.train.seed, true),
      opts);
  TESSERA_CHECK(loader_->batches_per_epoch() > 0, "[train] the training set has ", train_set_->size(),
                " samples, fewer than one global batch of ", global_batch_size());
}

int64_t Trainer::global_batch_size() const {
  return config_.train.global_batch_size > 0 ? config_.train.global_batch_size
                                             : config_.train.batch_size * world_size();
}

int64_t Trainer::per_rank_batch_size() const {
  const int64_t global = global_batch_size();
  // Uneven shares would need a weighted gradient average (DDP averages the ranks' means equally), so
  // a global batch the world does not divide is refused rather than silently changed.
  TESSERA_CHECK(global % world_size() == 0, "[train] train.global_batch_size ", global,
                " is not divisible by the world size ", world_size(),
                "; choose a global batch every world size the job may run at divides (e.g. 12 or 24 for 1 to 4 "
                "workers)");
  return global / world_size();
}

Tensor Trainer::loss_of(const data::Batch& batch, Tensor* logits_out, bool training) {
  Tensor logits = training && ddp_ ? ddp_->forward(batch.inputs) : (*model_)(batch.inputs);
  if (logits_out) *logits_out = logits;
  if (logits.dim() == 3) {  // language model: (B, T, V) against (B, T)
    int64_t v = logits.shape()[2];
    return cross_entropy(reshape(logits, {-1, v}), reshape(batch.targets, {-1}));
  }
  return cross_entropy(logits, batch.targets);
}

FitResult Trainer::fit() {
  const auto& run = config_.train;
  const bool lead = rank() == 0;  // the rank that reports and writes
  std::optional<MetricsLog> metrics;
  if (lead) {
    fs::create_directories(run.output_dir);
    metrics.emplace((fs::path(run.output_dir) / "metrics.jsonl").string());
  }
  Progress progress(lead && Progress::stderr_is_terminal(), lead ? run.log_every : INT64_MAX);
  FitResult result;
  stop_requested_ = false;
  if (ps_ && !ps_started_) {  // worker 0 initialises the servers, or has them load the resumed step's shards
    ps_->start(step_, resumed_ ? ps_shard_dir() : "");
    ps_started_ = true;
  }
  model_->train();
  if (!ps_) elastic_ = ElasticReport::from_environment(rank());
  if (elastic_) elastic_->started(step_);
  if (ddp_ && !survivor_) {  // replicas only: a data-parallel worker's memory holds the whole state
    {
      std::lock_guard lock(state_mu_);
      rng_at_step_ = default_generator();
    }
    survivor_ = SurvivorSave::from_environment(rank(), [this] { return save_survivor_checkpoint(); });
  }
  while (epoch_ < run.epochs) {
    const int64_t batches = loader_->batches_per_epoch();
    loader_->start_epoch(epoch_, batch_in_epoch_);
    if (lead) progress.start_epoch(epoch_, run.epochs, batches, batch_in_epoch_);
    auto epoch_start = std::chrono::steady_clock::now();
    double loss_sum = 0.0;
    int64_t loss_count = 0;
    double rate = 0.0;
    while (auto batch = loader_->next()) {
      auto t0 = std::chrono::steady_clock::now();
      schedule_->set_position(step_);
      optimizer_->zero_grad();
      Tensor loss = loss_of(*batch, nullptr, true);
      loss.backward();
      if (config_.optimizer.clip_grad_norm > 0) optim::clip_grad_norm(model_->parameters(), config_.optimizer.clip_grad_norm);
      {
        std::lock_guard lock(state_mu_);  // a survivor's save sees this step whole or not at all
        if (ps_) ps_->step(optimizer_->lr());  // the servers run the optimizer
        else optimizer_->step();
        ++step_;
        ++batch_in_epoch_;
        if (survivor_) rng_at_step_ = default_generator();  // a copy of the engine, not its text
      }
      if (elastic_) elastic_->stepped(step_);
      apply_fault_injection();
      const double loss_value = loss.item<float>();
      TESSERA_CHECK(std::isfinite(loss_value), "[train] the loss became ", loss_value, " at step ", step_,
                    "; lower optimizer.lr or set optimizer.clip_grad_norm");
      loss_sum += loss_value;
      ++loss_count;
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double now_rate = static_cast<double>(batch->inputs.shape()[0]) / std::max(seconds, 1e-9);
      rate = rate == 0.0 ? now_rate : 0.9 * rate + 0.1 * now_rate;
      if (lead) {
        // samples/s of the whole job: every rank runs the same step in lockstep.
        progress.step(batch_in_epoch_ - 1, step_, loss_value, optimizer_->lr(), rate * world_size());
        nlohmann::json record{{"type", "step"}, {"step", step_}, {"epoch", epoch_}, {"loss", loss_value},
                              {"lr", optimizer_->lr()}, {"samples_per_s", rate * world_size()}};
        if (ps_) {
          const auto& c = ps_->counters();
          record["ps_bytes_total"] = c.total_bytes();
          record["ps_wait_s_total"] = c.wait_seconds;
        }
        if (ddp_) {  // the per-step trace of gradient communication (reducer.h)
          const auto& trace = ddp_->reducer().last_iteration();
          record["comm_ms"] = 1e3 * trace.comm_seconds;
          record["exposed_comm_ms"] = 1e3 * trace.exposed_seconds;
          record["comm_bytes_total"] = ddp_->reducer().hook().bytes_communicated();
        }
        metrics->write(record);
      }
      bool stop = any_rank(stop_requested_) || (run.max_steps > 0 && step_ >= run.max_steps);
      if (stop || (run.checkpoint_every > 0 && step_ % run.checkpoint_every == 0)) result.last_checkpoint = save_checkpoint();
      if (stop) {
        result.stopped_early = true;
        result.steps = step_;
        if (lead) progress.end_epoch("stopped at step " + std::to_string(step_) + "; checkpoint " + result.last_checkpoint);
        if (ps_) ps_->finish();
        return result;
      }
    }
    double epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    // A parameter-server job's worker 0 evaluates for all (the workers hold no replica to shard over).
    EvalResult eval = ps_ && rank() != 0 ? EvalResult{std::numeric_limits<double>::quiet_NaN(),
                                                      std::numeric_limits<double>::quiet_NaN(), 0}
                                         : evaluate();
    result.last_eval = eval;
    ++epoch_;
    batch_in_epoch_ = 0;
    double train_loss = loss_count ? loss_sum / loss_count : std::numeric_limits<double>::quiet_NaN();
    EpochReport report = epoch_report(epoch_, step_, train_loss, eval.loss, eval.accuracy, epoch_seconds, vocab_ != nullptr);
    result.last_checkpoint = save_checkpoint();
    if (lead) {
      metrics->write(report.record);
      progress.end_epoch(report.summary);
    }
  }
  result.steps = step_;
  if (ps_) ps_->finish();
  return result;
}

void Trainer::apply_fault_injection() {
  const auto& d = config_.distributed;
  if (rank() == d.debug_slow_rank && d.debug_slow_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(d.debug_slow_ms));  // the artificial straggler
  const char* generation = std::getenv("TESSERA_ELASTIC_GENERATION");
  if (generation != nullptr && std::string(generation) != "0") return;  // the restarted job runs clean
  if (rank() == d.debug_stop_rank && step_ == d.debug_stop_step) {
    std::fprintf(stderr, "[train] fault injection: worker %d stops itself (SIGSTOP) at step %lld\n", rank(),
                 static_cast<long long>(step_));
    std::fflush(stderr);
    std::raise(SIGSTOP);
  }
  if (rank() == d.debug_kill_rank && step_ == d.debug_kill_step) {
    std::fprintf(stderr, "[train] fault injection: worker %d kills itself (SIGKILL) at step %lld\n", rank(),
                 static_cast<long long>(step_));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

std::string Trainer::ps_shard_dir() const { return (fs::path(config_.train.output_dir) / "ps-shards").string(); }

EvalResult Trainer::evaluate() {
  NoGradGuard no_grad;
  const bool was_training = model_->is_training();
  model_->eval();
  if (ps_ && ps_started_) ps_->refresh();  // asynchronous modes: evaluate the newest values
  // DDP shards the evaluation over the ranks; a parameter-server worker evaluates all of it.
  const int eval_rank = ps_ ? 0 : rank(), eval_world = ps_ ? 1 : world_size();
  data::DataLoaderOptions opts;
  opts.batch_size = config_.train.eval_batch_size;
  opts.prefetch = static_cast<int>(config_.data.prefetch);
  // Rank r evaluates the r-th contiguous shard; the sums are added across ranks below.
  const int64_t n = eval_set_->size();
  auto shard = std::make_shared<data::RangeSampler>(n * eval_rank / eval_world, n * (eval_rank + 1) / eval_world);
  data::DataLoader loader(eval_set_, shard, opts);
  loader.start_epoch(0);
  double loss_sum = 0.0;
  int64_t correct = 0, samples = 0, weight_total = 0;
  while (auto batch = loader.next()) {
    Tensor logits;
    Tensor loss = loss_of(*batch, &logits, false);
    int64_t n = batch->targets.numel();  // tokens for the LM, samples otherwise
    loss_sum += static_cast<double>(loss.item<float>()) * n;
    weight_total += n;
    samples += batch->inputs.shape()[0];
    if (logits.dim() == 2) {
      std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>(), truth = batch->targets.to_vector<int64_t>();
      for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
    }
  }
  model_->train(was_training);
  if (group_ && world_size() > 1) {
    Tensor counts = Tensor::empty({3}, DType::Int64), loss = Tensor::empty({1});
    int64_t* c = counts.data<int64_t>();
    c[0] = correct, c[1] = samples, c[2] = weight_total;
    loss.data<float>()[0] = static_cast<float>(loss_sum);  // float32: 7 digits are plenty for a report
    auto w1 = group_->allreduce(counts, dist::ReduceOp::Sum), w2 = group_->allreduce(loss, dist::ReduceOp::Sum);
    w1->wait();
    w2->wait();
    correct = c[0], samples = c[1], weight_total = c[2];
    loss_sum = loss.data<float>()[0];
  }
  EvalResult r;
  r.samples = samples;
  r.loss = weight_total ? loss_sum / weight_total : std::numeric_limits<double>::quiet_NaN();
  r.accuracy = vocab_ ? std::numeric_limits<double>::quiet_NaN()
                      : (samples ? static_cast<double>(correct) / samples : 0.0);
  return r;
}

bool Trainer::any_rank(bool flag) {
  if (!group_ || world_size() == 1) return flag;  // parameter-server workers stop on their own
  Tensor t = Tensor::empty({1}, DType::Int64);
  t.data<int64_t>()[0] = flag ? 1 : 0;
  group_->allreduce(t, dist::ReduceOp::Max)->wait();
  return t.data<int64_t>()[0] != 0;
}

std::pair<io::SafetensorsFile, io::SafetensorsFile> Trainer::checkpoint_files(const std::string& rng) {
  io::SafetensorsFile model, trainer;
  model.tensors = model_->state_dict();
  model.metadata = {{"format", "pt"}, {"tessera.config", to_toml(config_)}};
  if (vocab_) model.metadata["tessera.vocabulary"] = vocab_->to_string();
  trainer.tensors = optimizer_->state_dict();
  trainer.metadata = {{"tessera.step", std::to_string(step_)},
                      {"tessera.epoch", std::to_string(epoch_)},
                      {"tessera.batch_in_epoch", std::to_string(batch_in_epoch_)},
                      // The world-size-independent position: a job resumed with any number of ranks
                      // continues from sample samples_in_epoch of the epoch's global order.
                      {"tessera.global_batch_size", std::to_string(global_batch_size())},
                      {"tessera.samples_in_epoch", std::to_string(batch_in_epoch_ * global_batch_size())},
                      {"tessera.world_size", std::to_string(world_size())},
                      {"tessera.rng", rng},
                      {"tessera.config", to_toml(config_)}};
  return {std::move(model), std::move(trainer)};
}

std::string Trainer::save_checkpoint() {
  if (rank() != 0) return "";  // the replicas are equal; rank 0 writes for all
  if (ps_) {
    // The servers' shards first: the worker's checkpoint, written last, is what makes step N
    // resumable. Sparse tables live on the servers only, so pull them in for a complete model file.
    ps_->save(ps_shard_dir(), step_);
    ps_->pull_sparse_tables();
  }
  std::lock_guard lock(state_mu_);  // not at the same time as a survivor's save
  auto [model, trainer] = checkpoint_files(default_generator().state());
  return io::save_checkpoint((fs::path(config_.train.output_dir) / "checkpoints").string(), step_, model, trainer,
                             config_.train.keep_checkpoints);
}

std::string Trainer::save_survivor_checkpoint() {
  std::lock_guard lock(state_mu_);
  const fs::path dir = fs::path(config_.train.output_dir) / "checkpoints";
  // Every survivor holds the same replica; the first to claim a step writes it. A claim is a file
  // created exclusively, so two survivors (on one file system) never write one step twice.
  fs::create_directories(dir / ".survivor-claims");
  const std::string claim = (dir / ".survivor-claims" / ("step-" + std::to_string(step_))).string();
  const int fd = ::open(claim.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) return "";
  ::close(fd);
  if (io::latest_checkpoint_step(dir.string()) >= step_)
    return "";  // a scheduled checkpoint of this step (or a later one) is there already
  auto [model, trainer] = checkpoint_files(rng_at_step_.state());
  return io::save_checkpoint(dir.string(), step_, model, trainer, config_.train.keep_checkpoints);
}

void Trainer::resume(const std::string& path_in) {
  std::string path = path_in.empty() ? (fs::path(config_.train.output_dir) / "checkpoints").string() : path_in;
  io::CheckpointFiles files = io::load_checkpoint(path);
  const std::string trainer_file = files.path + "/trainer.safetensors";
  model_->load_state_dict(files.model.tensors, true);
  resumed_ = true;
  optimizer_->load_state_dict(files.trainer.tensors);
  step_ = metadata_int(files.trainer.metadata, "tessera.step", trainer_file);
  epoch_ = metadata_int(files.trainer.metadata, "tessera.epoch", trainer_file);
  batch_in_epoch_ = metadata_int(files.trainer.metadata, "tessera.batch_in_epoch", trainer_file);
  if (files.trainer.metadata.count("tessera.samples_in_epoch")) {
    // Step s of every world size covers positions [s·G, (s+1)·G) of the epoch's global order
    // (DistributedSampler deals position p to rank p mod W), so the position in samples is all a run
    // with another world size needs, provided its global batch G divides it.
    const int64_t samples = metadata_int(files.trainer.metadata, "tessera.samples_in_epoch", trainer_file);
    const int64_t saved_global = metadata_int(files.trainer.metadata, "tessera.global_batch_size", trainer_file);
    TESSERA_CHECK(samples % global_batch_size() == 0, "[resume] ", trainer_file, " stopped after ", samples,
                  " samples of epoch ", epoch_, " with a global batch of ", saved_global,
                  "; this run's global batch of ", global_batch_size(), " (", world_size(),
                  " ranks) does not divide that. Set train.global_batch_size = ", saved_global,
                  " to resume with any world size");
    batch_in_epoch_ = samples / global_batch_size();
  }
  TESSERA_CHECK(step_ >= 0 && epoch_ >= 0 && batch_in_epoch_ >= 0 && batch_in_epoch_ <= loader_->batches_per_epoch(),
                "[resume] ", trainer_file, " holds an impossible position (step ", step_, ", epoch ", epoch_, ", batch ",
                batch_in_epoch_, " of ", loader_->batches_per_epoch(), "); was the batch size or dataset changed?");
  default_generator().set_state(metadata_value(files.trainer.metadata, "tessera.rng", trainer_file));
  if (batch_in_epoch_ == loader_->batches_per_epoch()) {  // saved right at an epoch's end, before evaluation
    ++epoch_;
    batch_in_epoch_ = 0;
  }
}

}  // namespace tessera::train
