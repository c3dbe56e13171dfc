#include "tessera/train/model_parallel_trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>

#include "tessera/data/sampler.h"
#include "tessera/io/checkpoint.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/pipeline/partition.h"
#include "tessera/parallel/tensor/tensor_parallel_chain.h"
#include "tessera/train/lr_scaling.h"
#include "tessera/train/progress.h"
#include "tessera/util/thread_pool.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

// Ranks run as threads in tests share the default generator: building the model is a critical
// section, so every rank draws the same initial parameters.
std::mutex model_build_mutex;

nn::LayerChain chain_of(nn::Module& model) {
  if (auto* t = dynamic_cast<nn::CharTransformer*>(&model)) return t->layer_chain();
  if (auto* s = dynamic_cast<nn::Sequential*>(&model)) return s->layer_chain();
  throw ValueError("[model parallel] model " + model.name() + " is not a chain of layers; pipeline parallelism "
                   "needs a Sequential or the transformer");
}

}  // namespace

ModelParallelTrainer::ModelParallelTrainer(TrainConfig config, dist::ProcessGroupPtr world)
    : config_(std::move(config)), world_(std::move(world)) {
  validate(config_);
  TESSERA_CHECK(world_, "[model parallel] needs the job's process group");
  if (config_.train.threads > 0) set_num_threads(static_cast<int>(config_.train.threads));
  const auto& p = config_.parallel;
  mesh_ = std::make_unique<parallel::DeviceMesh>(
      world_, parallel::MeshShape{static_cast<int>(p.dp), static_cast<int>(p.pp), static_cast<int>(p.tp)});
  data_ = load_datasets(config_);
  vocab_ = data_.vocabulary;
  data::DataLoaderOptions opts;
  opts.batch_size = config_.train.batch_size;
  opts.drop_last = true;
  opts.prefetch = static_cast<int>(config_.data.prefetch);
  // Replicas split the data as DDP ranks do; the ranks of one replica read the same batches.
  const auto& at = mesh_->coordinates();
  loader_ = std::make_unique<data::DataLoader>(
      data_.train,
      std::make_shared<data::DistributedSampler>(data_.train->size(), at.dp, mesh_->shape().dp, true,
                                                 config_.train.seed, true),
      opts);
  TESSERA_CHECK(loader_->batches_per_epoch() > 0, "[train] the training set has ", data_.train->size(),
                " samples, fewer than one batch of ", config_.train.batch_size);
  build_model_and_stage();
  const double lr = scaled_lr(config_.optimizer.lr, config_.optimizer.scale_lr, mesh_->shape().dp);
  optimizer_ = build_optimizer(config_.optimizer, lr, stage_->parameters());
  schedule_ = build_schedule(config_.schedule, *optimizer_, config_.train.epochs * loader_->batches_per_epoch());
}

ModelParallelTrainer::~ModelParallelTrainer() = default;

void ModelParallelTrainer::build_model_and_stage() {
  const auto& p = config_.parallel;
  std::shared_ptr<nn::Module> full;
  {
    std::lock_guard lock(model_build_mutex);
    manual_seed(config_.train.seed);
    full = build_model(config_, vocab_ ? vocab_->size() : 0);
  }
  nn::LayerChain full_chain = chain_of(*full);
  for (size_t i = 0; i < full_chain.size(); ++i)
    for (auto& [name, t] : full_chain[i].module->state_dict())
      full_layout_.push_back({full_chain[i].prefix + name, t.shape(), t.dtype(), static_cast<int64_t>(i)});
  std::map<std::string, int64_t> full_numel;
  for (const auto& f : full_layout_) full_numel[f.name] = shape_numel(f.shape);

  // Tensor parallelism replaces each layer by its shard; the chain keeps its length and prefixes.
  nn::LayerChain chain = full_chain;
  if (p.tp > 1) {
    auto* transformer = dynamic_cast<nn::CharTransformer*>(full.get());
    TESSERA_CHECK(transformer, "[model parallel] parallel.tp needs the transformer");
    parallel::tensor::TensorParallelChain tp_chain = parallel::tensor::tensor_parallel_chain(*transformer, mesh_->tp_group());
    chain = tp_chain.layers;
    gather_layer_ = tp_chain.gather_layer;
    tp_loss_ = tp_chain.loss;
  }
  TESSERA_ASSERT(chain.size() == full_chain.size(), "the tensor-parallel chain has as many layers as the model");

  // Cut into stages; every rank must agree, so measured costs are averaged over the world.
  std::vector<double> costs = parallel::pipeline::parameter_costs(full_chain);
  if (p.balance == "time" && p.pp > 1) {
    std::optional<data::Batch> sample;
    {
      data::DataLoaderOptions o;
      o.batch_size = config_.train.batch_size / p.microbatches;
      data::DataLoader probe(data_.train, std::make_shared<data::RangeSampler>(0, data_.train->size()), o);
      probe.start_epoch(0);
      sample = probe.next();
    }
    costs = parallel::pipeline::measured_costs(chain, sample->inputs);
    Tensor t = from_vector(std::vector<float>(costs.begin(), costs.end()), {static_cast<int64_t>(costs.size())});
    world_->allreduce(t, dist::ReduceOp::Sum)->wait();
    for (size_t i = 0; i < costs.size(); ++i) costs[i] = t.data<float>()[i] / world_->size();
  }
  bounds_ = parallel::pipeline::balance_stages(costs, static_cast<int>(p.pp));
  const int s = mesh_->coordinates().pp;
  nn::LayerChain mine(chain.begin() + bounds_[s], chain.begin() + bounds_[s + 1]);
  stage_ = std::make_unique<parallel::pipeline::PipelineStage>(
      mine, mesh_->pp_group(),
      parallel::pipeline::PipelineOptions{parallel::pipeline::parse_schedule(p.schedule), p.microbatches},
      [this](const Tensor& out, const Tensor& targets) { return loss_of(out, targets); });
  // A parameter is a shard when it holds fewer elements than the whole tensor of its name.
  for (const auto& [name, t] : stage_->state_dict()) {
    auto it = full_numel.find(name);
    TESSERA_ASSERT(it != full_numel.end(), "stage tensor ", name, " has a name of the whole model");
    if (t.requires_grad()) sharded_.push_back(t.numel() < it->second);
  }
  // The rest of the model (other stages' layers) is dropped with `full` here.
}

Tensor ModelParallelTrainer::loss_of(const Tensor& output, const Tensor& targets) const {
  if (config_.parallel.tp > 1) {  // logits sharded over the vocabulary
    int64_t v = output.shape().back();
    return tp_loss_(reshape(output, {-1, v}), reshape(targets, {-1}));
  }
  if (output.dim() == 3) {  // language model: (B, T, V) against (B, T)
    int64_t v = output.shape()[2];
    return cross_entropy(reshape(output, {-1, v}), reshape(targets, {-1}));
  }
  return cross_entropy(output, targets);
}

double ModelParallelTrainer::average_gradients_and_loss(double loss) {
  const int dp = mesh_->shape().dp;
  if (dp == 1) return loss;
  // One flat buffer, kept across steps: every gradient of this rank, then the replica's loss.
  std::vector<Tensor> params = stage_->parameters();
  int64_t total = 1;
  for (auto& p : params) total += p.numel();
  if (!grad_flat_.defined() || grad_flat_.numel() != total) grad_flat_ = Tensor::empty({total});
  float* f = grad_flat_.data<float>();
  int64_t at = 0;
  for (auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) p.set_grad(g = zeros(p.shape()));  // an unused parameter still takes part
    Tensor c = contiguous(g);
    std::copy_n(c.data<float>(), c.numel(), f + at);
    at += p.numel();
  }
  f[at] = static_cast<float>(loss);
  mesh_->dp_group()->allreduce(grad_flat_, dist::ReduceOp::Sum)->wait();
  const float scale = 1.0f / static_cast<float>(dp);
  at = 0;
  for (auto& p : params) {
    Tensor g = p.grad();
    if (!g.is_contiguous()) p.set_grad(g = contiguous(g));
    float* d = g.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) d[i] = f[at + i] * scale;
    at += p.numel();
  }
  return f[at] * scale;
}

void ModelParallelTrainer::clip_gradients(double max_norm) {
  // The global norm: shards add up over the tensor-parallel ranks; a replicated tensor counts once
  // (on tensor-parallel rank 0); stages add up over the pipeline.
  std::vector<Tensor> params = stage_->parameters();
  double sq = 0.0;
  const bool tp_lead = mesh_->coordinates().tp == 0;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined() || (!sharded_[i] && !tp_lead)) continue;
    Tensor c = contiguous(g);
    const float* d = c.data<float>();
    for (int64_t j = 0; j < c.numel(); ++j) sq += static_cast<double>(d[j]) * d[j];
  }
  Tensor t = from_vector(std::vector<float>{static_cast<float>(sq)}, {1});
  if (mesh_->shape().tp > 1) mesh_->tp_group()->allreduce(t, dist::ReduceOp::Sum)->wait();
  if (mesh_->shape().pp > 1) mesh_->pp_group()->allreduce(t, dist::ReduceOp::Sum)->wait();
  const double norm = std::sqrt(static_cast<double>(t.data<float>()[0]));
  if (norm <= max_norm) return;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));  // torch's clip_grad_norm_ epsilon
  NoGradGuard no_grad;
  for (auto& p : params)
    if (p.grad().defined()) p.set_grad(mul(p.grad(), scale));
}

double ModelParallelTrainer::train_step(const Tensor& inputs, const Tensor& targets) {
  schedule_->set_position(step_);
  optimizer_->zero_grad();
  last_step_ = stage_->train_step(inputs, targets);
  const double loss = average_gradients_and_loss(last_step_.loss);
  if (config_.optimizer.clip_grad_norm > 0) clip_gradients(config_.optimizer.clip_grad_norm);
  optimizer_->step();
  ++step_;
  return loss;
}

FitResult ModelParallelTrainer::fit() {
  const auto& run = config_.train;
  const bool lead = rank() == 0;
  std::optional<MetricsLog> metrics;
  if (lead) {
    fs::create_directories(run.output_dir);
    metrics.emplace((fs::path(run.output_dir) / "metrics.jsonl").string());
    std::fprintf(stderr, "[model parallel] dp %d × pp %d × tp %d, %s schedule, %lld micro-batches; stages: %s\n",
                 mesh_->shape().dp, mesh_->shape().pp, mesh_->shape().tp, config_.parallel.schedule.c_str(),
                 static_cast<long long>(config_.parallel.microbatches),
                 parallel::pipeline::describe_stages(bounds_).c_str());
  }
  Progress progress(lead && Progress::stderr_is_terminal(), lead ? run.log_every : INT64_MAX);
  FitResult result;
  stage_->train(true);
  while (epoch_ < run.epochs) {
    const int64_t batches = loader_->batches_per_epoch();
    loader_->start_epoch(epoch_, batch_in_epoch_);
    if (lead) progress.start_epoch(epoch_, run.epochs, batches, batch_in_epoch_);
    auto epoch_start = std::chrono::steady_clock::now();
    double loss_sum = 0.0;
    int64_t loss_count = 0;
    while (auto batch = loader_->next()) {
      auto t0 = std::chrono::steady_clock::now();
      const double loss = train_step(batch->inputs, batch->targets);
      ++batch_in_epoch_;
      TESSERA_CHECK(std::isfinite(loss), "[train] the loss became ", loss, " at step ", step_,
                    "; lower optimizer.lr or set optimizer.clip_grad_norm");
      loss_sum += loss;
      ++loss_count;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double samples_per_s = static_cast<double>(batch->inputs.shape()[0] * mesh_->shape().dp) / seconds;
      const double tokens = batch->targets.numel() * mesh_->shape().dp;
      if (lead) {
        progress.step(batch_in_epoch_ - 1, step_, loss, optimizer_->lr(), samples_per_s);
        metrics->write({{"type", "step"}, {"step", step_}, {"epoch", epoch_}, {"loss", loss}, {"lr", optimizer_->lr()},
                        {"samples_per_s", samples_per_s}, {"tokens_per_s", tokens / seconds},
                        {"bubble_fraction", last_step_.bubble_fraction()},
                        {"peak_activations", last_step_.peak_activations}});
      }
      // Every rank agrees on a stop (a forwarded Ctrl-C), as the data-parallel trainer does.
      Tensor flag = from_vector(std::vector<float>{Trainer::stop_requested() ? 1.0f : 0.0f}, {1});
      world_->allreduce(flag, dist::ReduceOp::Max)->wait();
      const bool stop = flag.data<float>()[0] > 0 || (run.max_steps > 0 && step_ >= run.max_steps);
      if (stop || (run.checkpoint_every > 0 && step_ % run.checkpoint_every == 0)) result.last_checkpoint = save_checkpoint();
      if (stop) {
        result.stopped_early = true;
        result.steps = step_;
        if (lead) progress.end_epoch("stopped at step " + std::to_string(step_));
        return result;
      }
    }
    const double epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    EvalResult eval = evaluate();
    result.last_eval = eval;
    ++epoch_;
    batch_in_epoch_ = 0;
    const double train_loss = loss_count ? loss_sum / loss_count : std::numeric_limits<double>::quiet_NaN();
    result.last_checkpoint = save_checkpoint();
    if (lead) {
      EpochReport report = epoch_report(epoch_, step_, train_loss, eval.loss, eval.accuracy, epoch_seconds, vocab_ != nullptr);
      metrics->write(report.record);
      progress.end_epoch(report.summary);
    }
  }
  result.steps = step_;
  return result;
}

EvalResult ModelParallelTrainer::evaluate() {
  NoGradGuard no_grad;
  stage_->train(false);
  const auto& at = mesh_->coordinates();
  const int replicas = mesh_->shape().dp;
  data::DataLoaderOptions opts;
  opts.batch_size = config_.train.eval_batch_size;
  opts.prefetch = static_cast<int>(config_.data.prefetch);
  const int64_t n = data_.eval->size();
  data::DataLoader loader(data_.eval, std::make_shared<data::RangeSampler>(n * at.dp / replicas, n * (at.dp + 1) / replicas),
                          opts);
  loader.start_epoch(0);
  // Only the last stage sees outputs, and its tensor-parallel ranks all compute the same loss: the
  // one at tp 0 reports; the sums are then added over the world.
  const bool reports = stage_->is_last() && at.tp == 0;
  double loss_sum = 0.0, correct = 0.0, weight = 0.0, samples = 0.0;
  while (auto batch = loader.next()) {
    Tensor out = stage_->forward(batch->inputs);
    if (!stage_->is_last()) continue;
    Tensor loss = loss_of(out, batch->targets);
    if (!reports) continue;
    const double count = static_cast<double>(batch->targets.numel());
    loss_sum += static_cast<double>(loss.item<float>()) * count;
    weight += count;
    samples += static_cast<double>(batch->inputs.shape()[0]);
    if (out.dim() == 2) {
      std::vector<int64_t> pred = argmax(out, 1).to_vector<int64_t>(), truth = batch->targets.to_vector<int64_t>();
      for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
    }
  }
  stage_->train(true);
  Tensor sums = from_vector(std::vector<float>{static_cast<float>(loss_sum), static_cast<float>(correct),
                                               static_cast<float>(weight), static_cast<float>(samples)}, {4});
  world_->allreduce(sums, dist::ReduceOp::Sum)->wait();
  const float* s = sums.data<float>();
  EvalResult r;
  r.samples = static_cast<int64_t>(s[3]);
  r.loss = s[2] > 0 ? s[0] / s[2] : std::numeric_limits<double>::quiet_NaN();
  r.accuracy = vocab_ ? std::numeric_limits<double>::quiet_NaN() : (s[3] > 0 ? s[1] / s[3] : 0.0);
  return r;
}

nn::StateDict ModelParallelTrainer::stage_full_state() {
  if (!gather_layer_) return stage_->state_dict();
  nn::StateDict out;
  for (const auto& layer : stage_->layers())
    for (auto& [name, t] : gather_layer_(layer)) out.emplace_back(layer.prefix + name, t);
  return out;
}

nn::StateDict ModelParallelTrainer::full_state_dict() {
  const auto& at = mesh_->coordinates();
  if (at.dp != 0) return {};  // the replicas are equal; replica 0 reports
  nn::StateDict mine = stage_full_state();  // collective over the tensor-parallel group
  if (at.tp != 0) return {};
  // Stage leaders send their tensors, in the whole model's order, to world rank 0.
  parallel::pipeline::StageLink link(world_);
  if (at.pp != 0) {
    int64_t tag = 0;
    for (auto& [name, t] : mine) link.send_tensor(t, 0, tag++);
    link.wait_sends();
    return {};
  }
  std::map<std::string, Tensor> have(mine.begin(), mine.end());
  nn::StateDict out;
  std::vector<int64_t> next_tag(mesh_->shape().pp, 0);
  for (const FullTensor& f : full_layout_) {
    int owner = 0;
    while (f.layer >= bounds_[owner + 1]) ++owner;
    if (owner == 0) {
      auto it = have.find(f.name);
      TESSERA_ASSERT(it != have.end(), "stage 0 holds ", f.name);
      out.emplace_back(f.name, it->second);
      continue;
    }
    const int peer = parallel::mesh_rank(mesh_->shape(), {0, owner, 0});
    Tensor t = link.recv_tensor(peer, next_tag[owner]++, "parameter " + f.name + " of stage " + std::to_string(owner));
    TESSERA_CHECK(t.shape() == f.shape && t.dtype() == f.dtype, "[model parallel] stage ", owner, " sent ", f.name,
                  " as ", shape_str(t.shape()), ", expected ", shape_str(f.shape));
    out.emplace_back(f.name, t);
  }
  return out;
}

std::string ModelParallelTrainer::save_checkpoint() {
  nn::StateDict state = full_state_dict();
  if (rank() != 0) return "";
  io::SafetensorsFile model, trainer;
  model.tensors = std::move(state);
  model.metadata = {{"format", "pt"}, {"tessera.config", to_toml(config_)}};
  if (vocab_) model.metadata["tessera.vocabulary"] = vocab_->to_string();
  // Optimizer state stays sharded on the ranks and is not saved: a model-parallel run is not resumable
  // yet (tessera train --resume refuses it), but its checkpoint evaluates and generates as any other.
  trainer.metadata = {{"tessera.step", std::to_string(step_)},
                      {"tessera.epoch", std::to_string(epoch_)},
                      {"tessera.batch_in_epoch", std::to_string(batch_in_epoch_)},
                      {"tessera.rng", default_generator().state()},
                      {"tessera.model_parallel", "1"},
                      {"tessera.config", to_toml(config_)}};
  return io::save_checkpoint((fs::path(config_.train.output_dir) / "checkpoints").string(), step_, model, trainer,
                             config_.train.keep_checkpoints);
}

}  // namespace tessera::train
