#include "tessera/train/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <limits>
#include <optional>
#include <thread>

#include "tessera/autograd/autocast.h"
#include "tessera/core/cpu_allocator.h"
#include "tessera/data/sampler.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/piece_reader.h"
#include "tessera/observe/tensorboard.h"
#include "tessera/observe/trace.h"
#include "tessera/ops/ops.h"
#include "tessera/train/device_choice.h"
#include "tessera/train/lr_scaling.h"
#include "tessera/train/model_registry.h"
#include "tessera/util/clock.h"
#include "tessera/util/debug_wedge.h"
#include "tessera/dist/flight_recorder.h"
#include "tessera/io/atomic_file.h"
#include "tessera/util/thread_pool.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/util/settings.h"
#include "tessera/util/task_progress.h"
#include "tessera/io/checkpoint_keys.h"

namespace tessera::train {

namespace fs = std::filesystem;
namespace checkpoint_keys = io::checkpoint_keys;

std::atomic<bool> Trainer::stop_requested_{false};

void Trainer::request_stop() { stop_requested_ = true; }

namespace {

// Ranks run as threads in tests share the default generator: seeding and building the model, and
// restoring the generator on resume, are critical sections, so every rank draws the same initial
// parameters and no two set it at once.
std::mutex generator_mutex;

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
  build({group_, nullptr, std::nullopt, 0});
}

Trainer::Trainer(TrainConfig config, dist::ProcessGroupPtr group, Datasets preloaded)
    : config_(std::move(config)), group_(std::move(group)), preloaded_(std::move(preloaded)) {
  StrategyEnvironment env{group_, nullptr, std::nullopt, 0};
  env.live_rebuild = true;  // as the members rebuild theirs: the values come from a member's state
  build(env);
}

Trainer::Trainer(TrainConfig config, parallel::ps::ClientOptions ps, int num_workers) : config_(std::move(config)) {
  build({nullptr, nullptr, std::move(ps), num_workers});
}

Trainer::~Trainer() {
  // Only while the budget is still this run's: a later trainer's (or the caller's) stays.
  if (budget_before_ && cpu_allocator::memory_budget() == static_cast<size_t>(config_.train.memory_budget_mb) << 20)
    cpu_allocator::set_memory_budget(*budget_before_);
}

void Trainer::build(StrategyEnvironment env) {
  validate(config_);
  // Before the datasets, so that they count against it too.
  if (config_.train.memory_budget_mb > 0) {
    budget_before_ = cpu_allocator::memory_budget();
    cpu_allocator::set_memory_budget(static_cast<size_t>(config_.train.memory_budget_mb) << 20);
  }
  try {
    assemble(std::move(env));
  } catch (...) {  // the destructor will not run: give the budget back here
    if (budget_before_) cpu_allocator::set_memory_budget(*budget_before_);
    throw;
  }
}

void Trainer::assemble(StrategyEnvironment env) {
  Datasets sets = preloaded_ ? std::move(*preloaded_) : load_datasets(config_);
  preloaded_.reset();
  train_set_ = sets.train, eval_set_ = sets.eval, vocab_ = sets.vocabulary;
  env.train_set = train_set_;
  strategy_ = make_strategy(config_, std::move(env));
  const ModelEntry& model_kind = model_entry(config_.model.name);
  if (model_kind.objective) {  // e.g. MIL-NCE's loss, its negatives from the replicas' whole batch
    TESSERA_CHECK(strategy_->supports_objectives(), "[train] the ", strategy_->name(),
                  " strategy cannot train model.name = '", config_.model.name, "'");
    strategy_->set_objective(model_kind.objective(config_));
  }
  // A table read where it lies: each replica takes its own byte range (before anything reads it).
  if (train_set_->reads_one_share()) train_set_->select_share(strategy_->data_share().index, strategy_->data_share().count);
  if (eval_set_->reads_one_share()) {
    eval_set_->select_share(strategy_->eval_share().index, strategy_->eval_share().count);
    TESSERA_CHECK(strategy_->max_over_job(eval_set_->size()) > 0, "[train] the test table ", config_.data.test_path,
                  " holds no rows");
  }
  if (config_.train.threads > 0) set_num_threads(static_cast<int>(config_.train.threads));
  build_data();
  std::shared_ptr<nn::Module> model;
  {
    std::lock_guard lock(generator_mutex);
    manual_seed(config_.train.seed);  // the model's initialisation and dropout draw from here
    model = build_model(config_, vocab_ ? vocab_->size() : 0);
  }
  device_ = device_for_this_process(config_.train.device);
  if (!device_.is_cpu()) {
    // One process, or DDP replicas whose buckets are reduced in host memory by the CPU backends
    // (parallel/ddp: each gradient copied out, each average copied back); the other strategies wait
    // for communicators that take device memory (NCCL, CUDA IPC: issue 48).
    TESSERA_CHECK(strategy_->name() == "local" || strategy_->name() == "ddp", "[train] train.device = '",
                  config_.train.device, "' trains in one process or with DDP so far; this job runs the ",
                  strategy_->name(), " strategy (train it on the CPU, or use distributed.strategy = \"ddp\")");
    model->to(device_);  // built on the host from the seed, so every device starts from the same values
  }
  set_allow_tf32(config_.train.allow_tf32);
  std::vector<Tensor> params = strategy_->prepare(model);
  if (strategy_->keeps_whole_model()) model_ = model;
  // The linear (or square-root) scaling rule: the global batch grows with the replicas, so may the lr.
  const double lr = scaled_lr(config_.optimizer.lr, config_.optimizer.scale_lr, strategy_->data_share().count);
  optimizer_ = strategy_->own_optimizer(params, lr);
  if (!optimizer_) optimizer_ = build_optimizer(config_.optimizer, lr, params);
  // The schedule spans the configured epochs; max_steps only stops the run early (as an interruption
  // would), so a run stopped by it and resumed follows the same curve as one never stopped.
  schedule_ = build_schedule(config_.schedule, *optimizer_, config_.train.epochs * loader_->batches_per_epoch());
  if (config_.train.checkpoint_async) saver_ = std::make_unique<BackgroundSaver>();
  if (precision_dtype(config_) == DType::Float16) {
    optim::GradScalerOptions scaling;
    scaling.init_scale = config_.train.loss_scale_init;
    scaling.growth_interval = config_.train.loss_scale_growth_interval;
    scaler_ = std::make_unique<optim::GradScaler>(scaling);
  }
}

void Trainer::build_data() {
  check_elastic_world_sizes();
  data::DataLoaderOptions opts;
  opts.batch_size = per_replica_batch_size();
  opts.drop_last = true;  // equal batches keep the step count and the schedule simple
  opts.prefetch = static_cast<int>(config_.data.prefetch);
  opts.debug_wedge_at_batch = debug_wedge_point("loader");
  // With one replica this is the RandomSampler order (sampler.h), so single-process runs are unchanged.
  const DataShare share = strategy_->data_share();
  std::shared_ptr<data::Sampler> sampler;
  if (train_set_->reads_one_share()) {
    // This replica's own rows; the shares differ by a few rows, so each is padded to the largest.
    const int64_t largest = strategy_->max_over_job(train_set_->size());
    TESSERA_CHECK(largest > 0, "[train] the training table ", config_.data.path, " holds no rows");
    // Every rank refuses together (one refusing alone would leave the others in a collective).
    TESSERA_CHECK(!strategy_->any_rank(train_set_->size() == 0), "[train] a replica's byte range of ",
                  config_.data.path, " holds no rows (rank ", rank(), "'s has ", train_set_->size(),
                  "): give the job fewer replicas or the table more rows");
    sampler = std::make_shared<data::PaddedRandomSampler>(
        train_set_->size(), largest, config_.train.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(share.index + 1)));
  } else {
    sampler = std::make_shared<data::DistributedSampler>(train_set_->size(), share.index, share.count, true,
                                                         config_.train.seed, true);
  }
  loader_ = std::make_unique<data::DataLoader>(train_set_, sampler, opts);
  TESSERA_CHECK(loader_->batches_per_epoch() > 0, "[train] the training set has ", train_set_->size(),
                " samples, fewer than one global batch of ", global_batch_size());
}

nn::Module& Trainer::model() {
  TESSERA_CHECK(model_, "[train] the ", strategy_->name(),
                " strategy keeps only this rank's part of the model; use full_state_dict()");
  return *model_;
}

int64_t Trainer::global_batch_size() const {
  return config_.train.global_batch_size > 0 ? config_.train.global_batch_size
                                             : config_.train.batch_size * strategy_->data_share().count;
}

int64_t Trainer::per_replica_batch_size() const {
  const int64_t global = global_batch_size(), replicas = strategy_->data_share().count;
  // Uneven shares would need a weighted gradient average (DDP averages the ranks' means equally), so
  // a global batch the replicas do not divide is refused rather than silently changed.
  TESSERA_CHECK(global % replicas == 0, "[train] train.global_batch_size ", global,
                " is not divisible by the world size ", replicas,
                "; choose a global batch every world size the job may run at divides (e.g. 12 or 24 for 1 to 4 "
                "workers)");
  return global / replicas;
}

void Trainer::check_elastic_world_sizes() const {
  // An elastic job may go on at any world size up to its largest after failures: refuse now, before
  // step 1, a global batch that one of them would not divide, rather than fail in a later generation.
  const int64_t largest = env_int(dist::launcher::kElasticMaxWorldVariable, 0);
  if (largest <= 0 || config_.train.global_batch_size <= 0) return;
  const int64_t global = config_.train.global_batch_size;
  std::vector<int64_t> bad;
  for (int64_t w = 1; w <= largest; ++w)
    if (global % w != 0) bad.push_back(w);
  if (bad.empty()) return;
  int64_t fits = 1;  // the least common multiple of 1..largest: a global batch every size divides
  for (int64_t w = 2; w <= largest && fits <= 1000000; ++w) fits = fits / std::gcd(fits, w) * w;
  std::string sizes;
  for (size_t i = 0; i < bad.size() && i < 8; ++i) sizes += (i ? ", " : "") + std::to_string(bad[i]);
  if (bad.size() > 8) sizes += ", ...";
  throw ValueError("[train] train.global_batch_size " + std::to_string(global) + " is not divisible by world size(s) " +
                   sizes + ", which this elastic job (up to " + std::to_string(largest) +
                   " workers) may run at after failures; " +
                   (fits <= 1000000 ? "use a multiple of " + std::to_string(fits) + ", or " : std::string()) +
                   "leave train.global_batch_size unset (each worker keeps train.batch_size)");
}

data::Batch Trainer::on_device(const data::Batch& batch) const {
  if (device_.is_cpu()) return batch;
  return data::Batch{batch.inputs.defined() ? batch.inputs.to(device_) : Tensor(),
                     batch.targets.defined() ? batch.targets.to(device_) : Tensor()};
}

RunOutput Trainer::run_output() const { return RunOutput{config_.train.output_dir, run_id_}; }

std::string Trainer::checkpoints_dir() const { return (fs::path(config_.train.output_dir) / "checkpoints").string(); }

double Trainer::train_step(const data::Batch& batch) {
  if (saver_) saver_->check();  // a background save that failed stops the job here, naming its files
  // (The name is built only when tracing: this runs every step.)
  observe::TraceSpan step_span(observe::tracing_enabled() ? "step " + std::to_string(step_ + 1) : std::string(), "train");
  schedule_->set_position(step_);
  optimizer_->zero_grad();
  double loss = 0;
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  strategy_->set_loss_scale(loss_scale);
  {
    Autocast mixed(precision_dtype(config_));
    loss = strategy_->forward_backward(on_device(batch));
  }
  // fp16: gradients that overflowed skip the step on every rank (the step still counts: its batch
  // was read, and the schedule moves on, as with PyTorch's GradScaler).
  const bool overflow = scaler_ && strategy_->unscale_gradients(1.0 / loss_scale);
  if (!overflow && config_.optimizer.clip_grad_norm > 0) strategy_->clip_gradients(config_.optimizer.clip_grad_norm);
  std::lock_guard lock(state_mu_);  // a survivor's save sees this step whole or not at all
  if (!overflow) {
    observe::TraceSpan span("optimizer", "train");
    strategy_->optimizer_step(*optimizer_);
  }
  // ZeRO under live membership: this step's pieces go to the neighbour before anything counts the
  // step, so a rank that fails here is still at the step before (trainer_live.cpp).
  if (live_) {
    const auto& d = config_.distributed;
    if (rank() == d.debug_kill_rank && step_ + 1 == d.debug_kill_step && d.debug_kill_point == "commit" && faults_armed())
      kill_this_worker(", after its update, before its pieces went to its neighbour");
    strategy_->commit_step(*optimizer_, step_ + 1);
  }
  if (scaler_) scaler_->update(overflow);
  ++step_;
  if (survivor_ || live_) rng_at_step_ = default_generator();  // a copy of the engine, not its text
  return loss;
}

void Trainer::claim_run() {
  if (run_id_.empty()) resumed_ ? agree_on_run_id() : claim_output_dir();
}

bool Trainer::agree_on_stopping() {
  return strategy_->any_rank(stop_requested_) || (config_.train.max_steps > 0 && step_ >= config_.train.max_steps);
}

std::optional<data::Batch> Trainer::next_batch() {
  if (!reading_batches_) {
    loader_->start_epoch(epoch_, batch_in_epoch_);
    reading_batches_ = true;
  }
  std::optional<data::Batch> batch = loader_->next();
  if (batch) ++batch_in_epoch_;
  return batch;
}

FitResult Trainer::fit() {
  // The timeline ([observability] trace): this rank's spans, written however fit ends.
  struct TraceWriter {
    const Trainer& t;
    bool on;
    ~TraceWriter() {
      if (!on) return;
      observe::enable_tracing(false);
      try {
        const auto dir = std::filesystem::path(t.config_.train.output_dir) / "trace";
        std::filesystem::create_directories(dir);
        observe::write_chrome_trace((dir / ("rank-" + std::to_string(t.rank()) + ".json")).string(), observe::take_trace(),
                                    t.rank());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[train] rank %d: could not write its trace: %s\n", t.rank(), e.what());
      }
    }
  } trace_writer{*this, config_.observability.trace};
  if (config_.observability.trace) {
    observe::enable_tracing(true);
    observe::name_trace_thread("train");
  }
  try {
    FitResult result = fit_epochs();
    if (saver_) saver_->wait();  // a job that ends waits for its last save (and fails if it failed)
    return result;
  } catch (const dist::JobEnded& e) {
    // A live member left out of a round (late) waited to rejoin, and the job ended without it.
    std::fprintf(stderr, "[live] %s\n", e.what());
    FitResult ended;
    ended.steps = step_;
    ended.stopped_early = true;
    return ended;
  } catch (const PeerFailureError&) {
    save_after_losing_a_peer();
    throw;
  } catch (const TimeoutError&) {
    save_after_losing_a_peer();
    throw;
  }
}

void Trainer::save_after_losing_a_peer() {
  // Under the elastic agent, a collective that failed on a dead or silent peer may be seen here
  // before the agent's SIGUSR1 arrives (a machine lost resets its connections at once). The state is
  // whole (a step's update is applied under state_mu_, after its collectives), so this replica saves
  // it as the survivors' save would; a save of the same step by another survivor is left as it is.
  if (survivor_) survivor_->save_now();
}

FitResult Trainer::fit_epochs() {
  const auto& run = config_.train;
  // A joiner of a live job first takes a member's state (its run id among it), as the members
  // send it at the end of their membership change (trainer_live.cpp). It starts nothing anew.
  const bool joined_live = take_live_state_;
  if (take_live_state_) {
    take_live_state_ = false;
    // A member lost meanwhile (or ZeRO's members meeting again): the joiner is a member now, and
    // regroups with the others.
    try {
      const int source = live_state_is_sharded() ? gather_sharded_state(live_->current(), *group_) : live_->current().source;
      share_live_state(source, std::string());
    } catch (const PeerFailureError& e) {
      regroup_after_failure(e.what());
    } catch (const TimeoutError& e) {
      regroup_after_failure(e.what());
    }
  }
  claim_run();
  std::optional<MetricsLog> metrics;
  std::optional<observe::TensorBoardWriter> tensorboard;
  std::optional<Progress> progress;
  // Rank 0 reports and writes. A live job's rank 0 may change with its members: the new one opens
  // the metrics log (which appends) and the progress display when it takes over.
  auto lead = [&] { return rank() == 0; };
  auto take_the_lead = [&] {
    progress.emplace(lead() && Progress::stderr_is_terminal(), lead() ? run.log_every : INT64_MAX);
    if (!lead() || metrics) return;
    fs::create_directories(run.output_dir);
    metrics.emplace((fs::path(run.output_dir) / "metrics.jsonl").string());
    if (!config_.observability.tensorboard.empty()) tensorboard.emplace(config_.observability.tensorboard);
  };
  // Every metrics.jsonl record also goes to TensorBoard when asked ([observability] tensorboard).
  auto record_metrics = [&](const nlohmann::json& record) {
    metrics->write(record);
    if (tensorboard)
      tensorboard->write_scalars(record.value("step", int64_t{0}), observe::scalars_of_record(record),
                                 record.value("unix_time", unix_seconds()));
  };
  take_the_lead();
  if (lead() && !strategy_->describe().empty()) std::fprintf(stderr, "%s\n", strategy_->describe().c_str());
  // Where the run (re)started, for tessera report's list of starts and resumptions.
  if (lead() && !joined_live)
    record_metrics({{"type", "start"}, {"step", step_}, {"epoch", epoch_}, {"resumed", resumed_},
                    {"world_size", world_size()}, {"unix_time", unix_seconds()}});
  FitResult result;
  stop_requested_ = false;
  strategy_->on_fit_start(step_, resumed_, run_output());
  strategy_->set_training(true);
  elastic_ = ElasticReport::from_environment(rank());
  if (elastic_) elastic_->started(step_, resumed_survivors_of_);
  using Phase = dist::launcher::ProgressRecord::Phase;
  progress_ = dist::launcher::ProgressWriter::from_environment();
  if (progress_) {
    progress_->set_flight_dir(dist::flight_recorder_dir());
    // `tessera trace stacks <output_dir>` asks this launcher (the parent) for the job's stacks.
    if (lead() && progress_->launcher_pid() > 0)
      io::write_file_atomic((fs::path(run.output_dir) / "launcher.pid").string(),
                            std::to_string(progress_->launcher_pid()) + "\n");
  }
  const std::optional<int64_t> wedge_before_step = debug_wedge_point("step");
  start_live_membership();
  // The launcher keeps a live job's survivors running when one of its workers is lost (progress_file.h).
  if (progress_ && live_) progress_->set_live(true);
  if ((live_ || (strategy_->holds_whole_state() && world_size() > 1)) && !survivor_) {
    std::lock_guard lock(state_mu_);
    rng_at_step_ = default_generator();
  }
  if (strategy_->holds_whole_state() && world_size() > 1 && !survivor_)
    survivor_ = SurvivorSave::from_environment(rank(), [this] { return save_survivor_checkpoint(); });
  // A live job's membership changes (trainer_live.cpp): the lead records them, then the epoch goes
  // on from the position the members took.
  std::optional<nlohmann::json> unwritten_step;  // the lead's record of the step in its boundary collective
  auto after_membership_change = [&] {
    // Still the lead, and its step stands (ZeRO's members may have gone back to the step before).
    if (unwritten_step && lead() && unwritten_step->value("step", int64_t{0}) <= step_) record_metrics(*unwritten_step);
    unwritten_step.reset();
    take_the_lead();
    if (lead())
      for (nlohmann::json& record : membership_changes_) {
        record["unix_time"] = unix_seconds();
        record_metrics(record);
      }
    membership_changes_.clear();
  };
  // After a failed collective of a live job, or joiners admitted: the members regroup, the lead
  // records it, and the epoch goes on where the members' state is.
  auto go_on_as_the_new_members = [&](const std::string& cause, bool after_a_failure) {
    after_a_failure ? regroup_after_failure(cause) : change_membership(cause);
    after_membership_change();
  };
  // An epoch's figures, kept over a live membership change in its middle.
  auto epoch_start = std::chrono::steady_clock::now();
  double loss_sum = 0.0, rate = 0.0;
  int64_t loss_count = 0;
  // The last step in the sums: a live ZeRO job may go back to the step before it (trainer_live.cpp),
  // which then takes it out, to be counted once when redone.
  int64_t summed_step = -1;
  double summed_loss = 0.0;
  auto go_on_after_a_failure = [&](const std::string& cause) {
    go_on_as_the_new_members(cause, true);
    if (summed_step > step_) {
      loss_sum -= summed_loss;
      --loss_count;
      summed_step = step_;
    }
  };
  bool epoch_goes_on = false;  // the loop comes round again after a membership change
  while (epoch_ < run.epochs) {
    try {
      const int64_t batches = loader_->batches_per_epoch();
      loader_->start_epoch(epoch_, batch_in_epoch_);
      if (lead()) progress->start_epoch(epoch_, run.epochs, batches, batch_in_epoch_);
      record_progress(Phase::Step);  // from here the silence until the next step is a step's
      if (!epoch_goes_on) {
        epoch_start = std::chrono::steady_clock::now();
        loss_sum = rate = 0.0;
        loss_count = 0;
      }
      epoch_goes_on = false;
      bool regroup = false;  // rank 0 admitted joiners: the members meet after this step
      while (true) {
        std::optional<data::Batch> batch;
        {
          observe::TraceSpan span("data", "train");
          batch = loader_->next();
        }
        if (!batch) break;
        if (wedge_before_step == step_ + 1) block_as_a_wedged_rank();
        auto t0 = std::chrono::steady_clock::now();
        const double loss = train_step(*batch);
        ++batch_in_epoch_;
        apply_fault_injection();
        TESSERA_CHECK(std::isfinite(loss), "[train] the loss became ", loss, " at step ", step_,
                      "; lower optimizer.lr or set optimizer.clip_grad_norm");
        loss_sum += loss;
        ++loss_count;
        summed_step = step_, summed_loss = loss;
        // Samples/s of the whole job (every replica runs the same step in lockstep), smoothed.
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double now_rate = static_cast<double>(global_batch_size()) / std::max(seconds, 1e-9);
        rate = rate == 0.0 ? now_rate : 0.9 * rate + 0.1 * now_rate;
        // The stop flag's all-reduce comes first: once it completes, every rank has finished this
        // step's optimizer update, so a step in the metrics or in the elastic agent's count is one every
        // surviving replica holds (a survivors' save keeps it; none is lost or done twice).
        // A live job's lead keeps this step's record over a failure in that collective: DDP's step
        // is never rolled back (the furthest member's state wins; trainer_live.cpp), ZeRO's may be
        // (the lowest member's state wins: the record goes, and the redone step writes its own).
        if (lead()) {
          nlohmann::json record{{"type", "step"}, {"step", step_}, {"epoch", epoch_}, {"loss", loss},
                                {"lr", optimizer_->lr()}, {"samples_per_s", rate}, {"unix_time", unix_seconds()}};
          if (batch->targets.dim() == 2)  // tokens
            record["tokens_per_s"] = rate * static_cast<double>(batch->targets.shape()[1]);
          strategy_->add_step_metrics(record);
          if (scaler_) {
            record["loss_scale"] = scaler_->scale();
            record["skipped_steps_total"] = scaler_->skipped_steps();
          }
          unwritten_step = std::move(record);
        }
        bool stop = false;
        if (live_)
          std::tie(stop, regroup) = live_step_boundary();
        else
          stop = agree_on_stopping();
        if (elastic_) elastic_->stepped(step_);
        if (lead()) {
          progress->step(batch_in_epoch_ - 1, step_, loss, optimizer_->lr(), rate);
          record_metrics(*unwritten_step);
          unwritten_step.reset();
        }
        record_progress(Phase::Step);
        if (stop || (run.checkpoint_every > 0 && step_ % run.checkpoint_every == 0)) {
          record_progress(Phase::Other);  // a save takes as long as it takes: not a wedge
          result.last_checkpoint = save_checkpoint();
          record_progress(Phase::Step);
        }
        if (stop) {
          record_progress(Phase::Done);
          result.stopped_early = true;
          result.steps = step_;
          if (lead()) progress->end_epoch("stopped at step " + std::to_string(step_) + "; checkpoint " + result.last_checkpoint);
          end_live_membership();
          strategy_->on_fit_end();
          return result;
        }
        if (regroup) break;
      }
      if (regroup) {
        go_on_as_the_new_members("joiners admitted", false);
        epoch_goes_on = true;
        continue;
      }
      const double epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      EvalResult eval;
      record_progress(Phase::Other);  // evaluation and the epoch's save, until the next epoch's steps
      {
        observe::TraceSpan span("evaluate", "train");
        eval = evaluate();
      }
      result.last_eval = eval;
      ++epoch_;
      batch_in_epoch_ = 0;
      const double train_loss = loss_count ? loss_sum / loss_count : std::numeric_limits<double>::quiet_NaN();
      EpochReport report = epoch_report(epoch_, step_, train_loss, eval.loss, eval.accuracy, epoch_seconds, vocab_ != nullptr);
      result.last_checkpoint = save_checkpoint();
      if (lead()) {
        record_metrics(report.record);
        progress->end_epoch(report.summary);
      }
    } catch (const PeerFailureError& e) {
      if (!live_) throw;
      go_on_after_a_failure(e.what());
      epoch_goes_on = true;
    } catch (const TimeoutError& e) {
      if (!live_) throw;
      go_on_after_a_failure(e.what());
      epoch_goes_on = true;
    }
  }
  result.steps = step_;
  record_progress(Phase::Done);
  end_live_membership();
  strategy_->on_fit_end();
  return result;
}

void Trainer::block_as_a_wedged_rank() {
  // TESSERA_DEBUG_WEDGE (tests): this rank stops here, before its step's collectives, until a stop
  // request (SIGTERM) or SIGKILL; a signal between the check and pause() leaves it to SIGKILL.
  std::fprintf(stderr, "[debug] rank %d blocks before step %lld (TESSERA_DEBUG_WEDGE)\n", rank(),
               static_cast<long long>(step_ + 1));
  while (!stop_requested_) ::pause();
  throw Error("[debug] the wedged rank was asked to stop");
}

void Trainer::apply_fault_injection() {
  const auto& d = config_.distributed;
  if (rank() == d.debug_slow_rank && d.debug_slow_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(d.debug_slow_ms));  // the artificial straggler
  if (!faults_armed()) return;
  if (rank() == d.debug_stop_rank && step_ == d.debug_stop_step) {
    std::fprintf(stderr, "[train] fault injection: worker %d stops itself (SIGSTOP) at step %lld\n", rank(),
                 static_cast<long long>(step_));
    std::fflush(stderr);
    std::raise(SIGSTOP);
  }
  if (rank() == d.debug_kill_rank && step_ == d.debug_kill_step && d.debug_kill_point == "step") kill_this_worker("");
}

bool Trainer::faults_armed() const {
  const char* generation = env_setting(dist::launcher::kElasticGenerationVariable);
  if (generation != nullptr && std::string(generation) != "0") return false;  // the restarted job runs clean
  return !live_ || live_->current().number == 0;  // so does a live job after its first change
}

void Trainer::kill_this_worker(const char* where) {
  std::fprintf(stderr, "[train] fault injection: worker %d kills itself (SIGKILL) at step %lld%s\n", rank(),
               static_cast<long long>(step_), where);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

EvalResult Trainer::evaluate(TaskProgress* progress) {
  EvalResult r;
  if (!strategy_->takes_part_in_evaluation()) {
    r.loss = r.accuracy = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  NoGradGuard no_grad;
  strategy_->before_evaluation();
  strategy_->set_training(false);
  data::DataLoaderOptions opts;
  opts.batch_size = config_.train.eval_batch_size;
  opts.prefetch = static_cast<int>(config_.data.prefetch);
  // Replica r evaluates the r-th contiguous shard; the sums are added over the job below.
  const DataShare share = strategy_->eval_share();
  const int64_t n = eval_set_->size();
  // A table read where it lies holds only this replica's rows already.
  const bool own_rows = eval_set_->reads_one_share();
  const int64_t first = own_rows ? 0 : n * share.index / share.count;
  const int64_t end = own_rows ? n : n * (share.index + 1) / share.count;
  data::DataLoader loader(eval_set_, std::make_shared<data::RangeSampler>(first, end), opts);
  loader.start_epoch(0);
  if (progress != nullptr) progress->set_total((end - first + opts.batch_size - 1) / opts.batch_size);
  EvalSums sums;
  while (auto batch = loader.next()) {
    if (progress != nullptr) progress->advance();
    std::optional<EvalContribution> c;
    {
      Autocast mixed(precision_dtype(config_));
      c = strategy_->evaluate_batch(on_device(*batch));
    }
    if (!c) continue;
    const int64_t weight = batch->targets.numel();  // tokens for the LM, samples otherwise
    sums.loss_sum += static_cast<double>(c->loss.item<float>()) * weight;
    sums.weight += weight;
    sums.samples += batch->inputs.shape()[0];
    if (c->hits >= 0) {
      sums.correct += c->hits;
    } else if (c->output.defined() && batch->targets.dtype() == DType::Int64) {  // classes (not a regression's numbers)
      std::vector<int64_t> pred = argmax(c->output, 1).to_vector<int64_t>(), truth = batch->targets.to_vector<int64_t>();
      for (size_t i = 0; i < pred.size(); ++i) sums.correct += pred[i] == truth[i];
    }
  }
  strategy_->set_training(true);
  strategy_->sum_over_job(sums);
  r.samples = sums.samples;
  r.loss = sums.weight ? sums.loss_sum / sums.weight : std::numeric_limits<double>::quiet_NaN();
  r.accuracy = !model_entry(config_.model.name).reports_accuracy ? std::numeric_limits<double>::quiet_NaN()
                      : (sums.samples ? static_cast<double>(sums.correct) / sums.samples : 0.0);
  return r;
}

void Trainer::agree_on_run_id() {
  // Every rank takes the largest of their random draws: one id for the job without a broadcast.
  const std::string mine = io::new_run_id();
  const int64_t agreed = strategy_->max_over_job(static_cast<int64_t>(std::stoull(mine, nullptr, 16) >> 1));
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(agreed));
  run_id_ = id;
}

ValueError another_runs_checkpoints(const std::string& output_dir, const std::string& latest) {
  return ValueError("[train] " + output_dir + " holds another run's checkpoints" +
                    (latest.empty() ? std::string() : " (latest: " + latest + ")") +
                    ". Continue that run with --resume, train into another directory with --set "
                    "train.output_dir=DIR, or move them aside with --overwrite");
}

void Trainer::claim_output_dir() {
  agree_on_run_id();
  const std::string latest = rank() == 0 ? io::latest_checkpoint(checkpoints_dir()) : "";
  if (!strategy_->any_rank(!latest.empty())) return;  // every rank refuses, or none
  if (!config_.train.overwrite) throw another_runs_checkpoints(config_.train.output_dir, latest);
  if (rank() != 0) return;
  const std::string other = io::checkpoint_run_id(latest);
  // Moved, never deleted: the other run's checkpoints and metrics go to previous-<its id>/.
  const fs::path out(config_.train.output_dir);
  const fs::path aside = out / ("previous-" + (other.empty() ? io::new_run_id() : other));
  fs::create_directories(aside);
  fs::rename(out / "checkpoints", aside / "checkpoints");
  if (fs::exists(out / "metrics.jsonl")) fs::rename(out / "metrics.jsonl", aside / "metrics.jsonl");
  std::fprintf(stderr, "[train] --overwrite: moved the previous run's checkpoints and metrics to %s\n",
               aside.string().c_str());
}

std::pair<io::SafetensorsFile, io::SafetensorsFile> Trainer::checkpoint_files(nn::StateDict model_state,
                                                                              nn::StateDict optimizer_state,
                                                                              const std::string& rng) {
  io::SafetensorsFile model, trainer;
  model.tensors = std::move(model_state);
  model.metadata = {{"format", "pt"}, {checkpoint_keys::kConfig, to_toml(config_)}};
  if (vocab_) model.metadata[checkpoint_keys::kVocabulary] = vocab_->to_string();
  // In one process's layout whatever the strategy: a checkpoint resumes at any layout.
  trainer.tensors = std::move(optimizer_state);
  trainer.metadata = {{checkpoint_keys::kStep, std::to_string(step_)},
                      {checkpoint_keys::kEpoch, std::to_string(epoch_)},
                      {checkpoint_keys::kBatchInEpoch, std::to_string(batch_in_epoch_)},
                      // The world-size-independent position: a job resumed with any number of ranks
                      // continues from sample samples_in_epoch of the epoch's global order.
                      {checkpoint_keys::kGlobalBatchSize, std::to_string(global_batch_size())},
                      {checkpoint_keys::kSamplesInEpoch, std::to_string(batch_in_epoch_ * global_batch_size())},
                      {checkpoint_keys::kWorldSize, std::to_string(world_size())},
                      {checkpoint_keys::kStrategy, strategy_->name()},
                      {checkpoint_keys::kRunId, run_id_},
                      {checkpoint_keys::kRng, rng},
                      {checkpoint_keys::kConfig, to_toml(config_)}};
  if (scaler_) {  // fp16: the loss scale goes on where it was
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.17g", scaler_->scale());
    trainer.metadata[checkpoint_keys::kLossScale] = scale;
    trainer.metadata[checkpoint_keys::kLossScaleGrowthTracker] = std::to_string(scaler_->growth_tracker());
    trainer.metadata[checkpoint_keys::kSkippedSteps] = std::to_string(scaler_->skipped_steps());
  }
  return {std::move(model), std::move(trainer)};
}

std::string Trainer::save_checkpoint() {
  observe::TraceSpan span("checkpoint", "train");
  if (run_id_.empty()) run_id_ = io::new_run_id();  // saved before fit: rank 0 alone writes
  if (config_.train.checkpoint_format == "sharded") {
    // Every rank writes its own pieces beside the step directories; once all have, rank 0 writes the
    // manifest and the step's position and moves the pieces in as pieces/ before the step is renamed
    // into place, so the step appears whole or not at all and no rank ever holds the whole state.
    const std::string pieces =
        (fs::path(checkpoints_dir()) / (".step-" + std::to_string(step_) + ".pieces." + run_id_)).string();
    if (rank() == 0) strategy_->before_checkpoint(run_output(), step_);  // the servers' shards first
    const std::vector<io::SavePiece> mine = strategy_->checkpoint_pieces(*optimizer_);  // collective
    const bool every_rank = strategy_->every_rank_writes_pieces();
    const int writers = every_rank ? world_size() : 1;
    if (every_rank || rank() == 0) io::write_rank_pieces(pieces, every_rank ? rank() : 0, writers, mine);
    if (every_rank) strategy_->max_over_job(0);  // every rank's pieces in place before the manifest
    if (rank() != 0) return "";
    io::write_manifest(pieces, writers, strategy_->checkpoint_order());
    std::lock_guard lock(state_mu_);
    if (saver_) saver_->wait();  // the background saves stay in order
    auto [model, trainer] = checkpoint_files({}, {}, default_generator().state());
    return io::save_checkpoint(checkpoints_dir(), step_, model, trainer, config_.train.keep_checkpoints, run_id_,
                               pieces, checkpoint_verification());
  }
  // The servers' shards first (a parameter-server job): the optimizer state below is read from them.
  if (rank() == 0) strategy_->before_checkpoint(run_output(), step_);
  nn::StateDict state = strategy_->model_state();                        // collective for the mesh
  nn::StateDict optimizer_state = strategy_->optimizer_state(*optimizer_);  // likewise
  if (rank() != 0) return "";  // rank 0 writes for all
  std::lock_guard lock(state_mu_);  // not at the same time as a survivor's save
  const io::Verify verify = checkpoint_verification();
  if (saver_) {
    // In the background: the last save finished first (so one copy at most), this step's state
    // copied to host memory, and the training loop goes on while the saver writes it.
    saver_->wait();
    auto [model, trainer] = checkpoint_files(nn::host_copy(state), nn::host_copy(optimizer_state), default_generator().state());
    saver_->submit([dir = checkpoints_dir(), step = step_, keep = config_.train.keep_checkpoints, run = run_id_, verify,
                    model = std::move(model), trainer = std::move(trainer)] {
      return io::save_checkpoint(dir, step, model, trainer, keep, run, "", verify);
    });
    return io::step_directory(checkpoints_dir(), step_);  // whole once the saver is done (fit waits)
  }
  auto [model, trainer] = checkpoint_files(std::move(state), std::move(optimizer_state), default_generator().state());
  return io::save_checkpoint(checkpoints_dir(), step_, model, trainer, config_.train.keep_checkpoints, run_id_, "",
                             verify);
}

std::string Trainer::save_survivor_checkpoint() {
  std::lock_guard lock(state_mu_);
  const fs::path dir = checkpoints_dir();
  // Every survivor holds the same replica; the first to claim a step writes it. A claim is a file
  // created exclusively, so two survivors (on one file system) never write one step twice.
  fs::create_directories(dir / ".survivor-claims");
  const std::string claim = (dir / ".survivor-claims" / ("step-" + std::to_string(step_))).string();
  const int fd = ::open(claim.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) return "";
  ::close(fd);
  if (io::latest_checkpoint_step(dir.string()) >= step_)
    return "";  // a scheduled checkpoint of this step (or a later one) is there already
  auto [model, trainer] = checkpoint_files(model_->state_dict(), optimizer_->state_dict(), rng_at_step_.state());
  // Which generation's survivors wrote it: the next generation's recovery report can then say that
  // no step a surviving replica completed was lost, even when the count of rank 0 is gone with it.
  if (const char* generation = env_setting(dist::launcher::kElasticGenerationVariable))
    trainer.metadata[checkpoint_keys::kSurvivorsOfGeneration] = generation;
  return io::save_checkpoint(dir.string(), step_, model, trainer, config_.train.keep_checkpoints, run_id_, "",
                             checkpoint_verification());
}

void Trainer::resume(const std::string& path_in) {
  const std::string path = path_in.empty() ? checkpoints_dir() : path_in;
  io::CheckpointFiles files = io::load_checkpoint(path);
  const std::string trainer_file = files.path + "/trainer.safetensors";
  TESSERA_CHECK(!files.trainer.metadata.count(checkpoint_keys::kLegacyModelParallel), "[resume] ", trainer_file,
                " was written by a model-parallel run of an earlier version, without the optimizer's state: it "
                "can be evaluated or fine-tuned from (a fresh run that loads model.safetensors), not resumed");
  if (!files.pieces.empty()) {
    io::PieceReader reader(files.pieces);
    strategy_->load_pieces(reader, *optimizer_);  // this rank's pieces only, at any layout; collective
  } else {
    strategy_->load_model_state(files.model.tensors);
    strategy_->load_optimizer_state(*optimizer_, files.trainer.tensors);
  }
  restore_position(files.trainer.metadata, trainer_file);
}

void Trainer::restore_position(const io::Metadata& metadata, const std::string& trainer_file, bool past_an_epochs_end) {
  // (A checkpoint's trainer metadata, or a live member's state sent in memory: trainer_live.cpp.)
  resumed_ = true;
  step_ = metadata_int(metadata, checkpoint_keys::kStep, trainer_file);
  epoch_ = metadata_int(metadata, checkpoint_keys::kEpoch, trainer_file);
  batch_in_epoch_ = metadata_int(metadata, checkpoint_keys::kBatchInEpoch, trainer_file);
  if (metadata.count(checkpoint_keys::kSamplesInEpoch)) {
    // Step s of every world size covers positions [s·G, (s+1)·G) of the epoch's global order
    // (DistributedSampler deals position p to rank p mod W), so the position in samples is all a run
    // with another world size needs, provided its global batch G divides it.
    const int64_t samples = metadata_int(metadata, checkpoint_keys::kSamplesInEpoch, trainer_file);
    const int64_t saved_global = metadata_int(metadata, checkpoint_keys::kGlobalBatchSize, trainer_file);
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
  {
    std::lock_guard lock(generator_mutex);
    default_generator().set_state(metadata_value(metadata, checkpoint_keys::kRng, trainer_file));
  }
  // The run continues under the id of the run that wrote the checkpoint (one written before runs had
  // ids starts a new one).
  if (scaler_ && metadata.count(checkpoint_keys::kLossScale))  // a checkpoint of an fp32 or bf16 run has none
    scaler_->restore(std::strtod(metadata.at(checkpoint_keys::kLossScale).c_str(), nullptr),
                     metadata_int(metadata, checkpoint_keys::kLossScaleGrowthTracker, trainer_file),
                     metadata_int(metadata, checkpoint_keys::kSkippedSteps, trainer_file));
  auto survivors = metadata.find(checkpoint_keys::kSurvivorsOfGeneration);
  resumed_survivors_of_ = survivors == metadata.end() ? -1 : std::atoll(survivors->second.c_str());
  auto id = metadata.find(checkpoint_keys::kRunId);
  if (id != metadata.end() && !id->second.empty()) run_id_ = id->second;
  if (past_an_epochs_end && batch_in_epoch_ == loader_->batches_per_epoch()) {  // saved right at an epoch's end, before evaluation
    ++epoch_;
    batch_in_epoch_ = 0;
  }
}

}  // namespace tessera::train
