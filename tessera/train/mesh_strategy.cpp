#include "tessera/train/mesh_strategy.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "tessera/data/data_loader.h"
#include "tessera/data/sampler.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/parallel/functional.h"
#include "tessera/parallel/pipeline/partition.h"
#include "tessera/parallel/tensor/mappings.h"
#include "tessera/parallel/tensor/tensor_parallel_chain.h"
#include "tessera/train/local_strategy.h"

namespace tessera::train {

namespace {

// Names travel between stages as the bytes of one int64 tensor.
Tensor text_tensor(const std::string& text) {
  std::vector<int64_t> bytes(text.begin(), text.end());
  return from_vector(bytes, {static_cast<int64_t>(bytes.size())});
}

std::string text_of(const Tensor& t) {
  std::string text;
  const int64_t* d = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) text.push_back(static_cast<char>(d[i]));
  return text;
}

// The tags of model_state's and optimizer_state's messages, apart (p2p tags stay below 2^30).
constexpr int64_t kModelStateTag = 0;
constexpr int64_t kOptimizerStateTag = int64_t{1} << 24;


nn::LayerChain chain_of(nn::Module& model) {
  if (auto* t = dynamic_cast<nn::CharTransformer*>(&model)) return t->layer_chain();
  if (auto* s = dynamic_cast<nn::Sequential*>(&model)) return s->layer_chain();
  throw ValueError("[model parallel] model " + model.name() + " is not a chain of layers; pipeline parallelism "
                   "needs a Sequential or the transformer");
}

}  // namespace

MeshStrategy::MeshStrategy(const TrainConfig& config, dist::ProcessGroupPtr world,
                           std::shared_ptr<data::Dataset> train_set)
    : config_(config), world_(std::move(world)), train_set_(std::move(train_set)) {
  TESSERA_CHECK(world_, "[model parallel] needs the job's process group");
  const auto& p = config_.parallel;
  mesh_ = std::make_unique<parallel::DeviceMesh>(
      world_, parallel::MeshShape{static_cast<int>(p.dp), static_cast<int>(p.pp), static_cast<int>(p.tp)});
  if (p.cp > 1) {  // collective over the data-parallel group: before the trainer reads the data share
    const auto& shape = mesh_->shape();
    TESSERA_CHECK(shape.dp % p.cp == 0, "[model parallel] parallel.cp = ", p.cp, " cuts each sequence over that many "
                  "data-parallel ranks of the mesh, but it has dp = ", shape.dp, " (world ", world_->size(), " / (pp ",
                  shape.pp, " · tp ", shape.tp, ")); run a multiple of ", p.cp * shape.pp * shape.tp, " processes");
    context_.emplace(mesh_->dp_group(), static_cast<int>(p.cp), parallel::context::context_attention(p.cp_attention));
  }
}

MeshStrategy::~MeshStrategy() = default;

std::vector<Tensor> MeshStrategy::prepare(std::shared_ptr<nn::Module> full) {
  const auto& p = config_.parallel;
  if (context_) context_->spread(*full);  // before the cut: the shards and stages inherit it
  nn::LayerChain full_chain = chain_of(*full);
  for (size_t i = 0; i < full_chain.size(); ++i)
    for (auto& [name, t] : full_chain[i].module->state_dict())
      full_layout_.push_back({full_chain[i].prefix + name, t.shape(), t.dtype()});
  for (size_t i = 0; i < full_layout_.size(); ++i) full_index_[full_layout_[i].name] = i;

  // Tensor parallelism replaces each layer by its shard; the chain keeps its length and prefixes.
  nn::LayerChain chain = full_chain;
  if (p.tp > 1) {
    auto* transformer = dynamic_cast<nn::CharTransformer*>(full.get());
    TESSERA_CHECK(transformer, "[model parallel] parallel.tp needs the transformer");
    const parallel::tensor::SequenceParallel sequence{p.sequence_parallel, p.tp_overlap_chunks};
    parallel::tensor::TensorParallelChain tp_chain =
        parallel::tensor::tensor_parallel_chain(*transformer, mesh_->tp_group(), sequence);
    chain = tp_chain.layers;
    token_parameters_ = tp_chain.token_parameters;  // all stages' for now; cut to this stage's below
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
      data::DataLoader probe(train_set_, std::make_shared<data::RangeSampler>(0, train_set_->size()), o);
      probe.start_epoch(0);
      sample = probe.next();
    }
    costs = parallel::pipeline::measured_costs(chain, tokens_of_this_rank(*sample).inputs);
    Tensor t = from_vector(std::vector<float>(costs.begin(), costs.end()), {static_cast<int64_t>(costs.size())});
    world_->blocking_allreduce(t, dist::ReduceOp::Sum);
    for (size_t i = 0; i < costs.size(); ++i) costs[i] = t.data<float>()[i] / world_->size();
  }
  // Interleaved, the chain is cut into pp · v chunks and stage s holds chunks s, pp + s, 2pp + s, ...;
  // ZB-V cuts it into 2 pp and stage s holds chunks s and 2pp-1-s.
  const parallel::pipeline::ScheduleKind schedule = parallel::pipeline::parse_schedule(p.schedule);
  const int v = parallel::pipeline::chunks_per_stage(schedule, static_cast<int>(p.virtual_stages));
  bounds_ = parallel::pipeline::balance_stages(costs, static_cast<int>(p.pp) * v);
  parallel::pipeline::PipelineOptions stage_options;
  stage_options.schedule = schedule;
  stage_options.microbatches = p.microbatches;
  stage_options.wire = wire_dtype(config_);
  // Tensor-parallel partners pair their layers' collectives pass by pass: one order for all of them.
  if (mesh_->shape().tp > 1) stage_options.same_order_as = mesh_->tp_group();
  // A context group's ranks sit in different pipelines (different dp coordinates), and their
  // attention pairs pass by pass: zero-bubble orders, planned from each pipeline's measured times,
  // would drift apart, so every pipeline takes rank 0's plan.
  if (context_) stage_options.same_order_as = world_;
  stage_ = std::make_unique<parallel::pipeline::PipelineStage>(
      parallel::pipeline::stage_chunks(chain, bounds_, mesh_->coordinates().pp, static_cast<int>(p.pp),
                                       parallel::pipeline::chunk_order(schedule)),
      mesh_->pp_group(), stage_options,
      [this](const Tensor& out, const Tensor& targets) { return loss_of(out, targets); });
  // A parameter is a shard when it holds fewer elements than the whole tensor of its name.
  for (const auto& [name, t] : stage_->state_dict()) {
    TESSERA_ASSERT(full_index_.count(name), "stage tensor ", name, " has a name of the whole model");
    if (!t.requires_grad()) continue;
    sharded_.push_back(t.numel() < shape_numel(full_tensor(name).shape));
    local_names_.push_back(name);
  }
  {
    int64_t index = 0;
    for (const auto& [name, t] : full->named_parameters()) global_index_[name] = index++;
  }
  for (const auto& layer : stage_->layers())
    for (const auto& [name, spec] : parallel::tensor::collect_shard_specs(*layer.module))
      shard_specs_[layer.prefix + name] = spec;
  {
    std::set<const TensorImpl*> here;
    for (const Tensor& t : stage_->parameters()) here.insert(t.impl());
    std::erase_if(token_parameters_, [&](const Tensor& t) { return !here.count(t.impl()); });
  }
  // The rest of the model (other stages' layers) is dropped with `full` by the caller.
  return stage_->parameters();
}

data::Batch MeshStrategy::tokens_of_this_rank(const data::Batch& batch) const {
  return context_ ? context_->part_of(batch) : batch;
}

Tensor MeshStrategy::loss_of(const Tensor& output, const Tensor& targets) const {
  if (config_.parallel.tp > 1) {  // logits sharded over the vocabulary
    const int64_t v = output.shape().back();
    return tp_loss_(reshape(output, {-1, v}), reshape(targets, {-1}));
  }
  return default_loss(output, targets);
}

double MeshStrategy::forward_backward(const data::Batch& batch) {
  stage_->set_loss_scale(loss_scale_);
  parallel::tensor::TensorParallelWire wire(wire_dtype(config_));
  tp_comm_ = {};
  parallel::tensor::TensorParallelCommTallyScope tally(&tp_comm_);
  const data::Batch mine = tokens_of_this_rank(batch);
  last_step_ = stage_->train_step(mine.inputs, mine.targets);
  // Under sequence parallelism the LayerNorms saw only this rank's tokens: their gradients add up.
  if (!token_parameters_.empty()) parallel::tensor::sum_partial_gradients(token_parameters_, *mesh_->tp_group());
  return average_gradients_and_loss(last_step_.loss);
}

double MeshStrategy::average_gradients_and_loss(double loss) {
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
  if (wire_dtype(config_) != DType::Float32) {  // the gradients on the wire type, the loss alone in float32
    const Tensor summed = parallel::summed_over_ranks(grad_flat_.slice(0, 0, total - 1), *mesh_->dp_group(),
                                                      wire_dtype(config_));
    std::copy_n(summed.data<float>(), total - 1, f);
    Tensor loss_sum = grad_flat_.slice(0, total - 1, total);
    mesh_->dp_group()->blocking_allreduce(loss_sum, dist::ReduceOp::Sum);
  } else {
    mesh_->dp_group()->blocking_allreduce(grad_flat_, dist::ReduceOp::Sum);
  }
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

void MeshStrategy::clip_gradients(double max_norm) {
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
  if (mesh_->shape().tp > 1) mesh_->tp_group()->blocking_allreduce(t, dist::ReduceOp::Sum);
  if (mesh_->shape().pp > 1) mesh_->pp_group()->blocking_allreduce(t, dist::ReduceOp::Sum);
  const double norm = std::sqrt(static_cast<double>(t.data<float>()[0]));
  if (norm <= max_norm) return;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));  // torch's clip_grad_norm_ epsilon
  NoGradGuard no_grad;
  for (auto& p : params)
    if (p.grad().defined()) p.set_grad(mul(p.grad(), scale));
}

bool MeshStrategy::unscale_gradients(double inv_scale) {
  return any_rank(optim::unscale_gradients(stage_->parameters(), inv_scale));
}

int64_t MeshStrategy::max_over_job(int64_t value) { return train::max_over_job(*world_, value); }

std::optional<EvalContribution> MeshStrategy::evaluate_batch(const data::Batch& batch) {
  // Only the output stage (the last; the first under ZB-V) sees outputs, and its tensor-parallel
  // ranks all compute the loss (a collective with tensor parallelism): the one at tp 0 reports.
  parallel::tensor::TensorParallelWire wire(wire_dtype(config_));
  const data::Batch mine = tokens_of_this_rank(batch);
  Tensor out = stage_->forward(mine.inputs);
  if (!stage_->holds_output()) return std::nullopt;
  Tensor loss = loss_of(out, mine.targets);
  if (mesh_->coordinates().tp != 0) return std::nullopt;
  EvalContribution c{loss, {}};
  if (out.dim() == 2) c.output = out;
  return c;
}

void MeshStrategy::sum_over_job(EvalSums& sums) {
  Tensor t = from_vector(std::vector<float>{static_cast<float>(sums.loss_sum), static_cast<float>(sums.correct),
                                            static_cast<float>(sums.weight), static_cast<float>(sums.samples)},
                         {4});
  world_->blocking_allreduce(t, dist::ReduceOp::Sum);
  const float* s = t.data<float>();
  sums.loss_sum = s[0];
  sums.correct = static_cast<int64_t>(s[1]);
  sums.weight = static_cast<int64_t>(s[2]);
  sums.samples = static_cast<int64_t>(s[3]);
  if (context_) context_->count_groups_once(sums);
}

nn::StateDict MeshStrategy::stage_full_state() {
  if (!gather_layer_) return stage_->state_dict();
  nn::StateDict out;
  for (const auto& layer : stage_->layers())
    for (auto& [name, t] : gather_layer_(layer)) out.emplace_back(layer.prefix + name, t);
  return out;
}

nn::StateDict MeshStrategy::model_state() {
  const auto& at = mesh_->coordinates();
  if (at.dp != 0) return {};  // the replicas are equal; replica 0 reports
  nn::StateDict mine = stage_full_state();  // collective over the tensor-parallel group
  if (at.tp != 0) return {};
  nn::StateDict gathered = gather_stage_leaders(std::move(mine), kModelStateTag, "parameter");
  if (at.pp != 0) return {};
  // In the whole model's order, each tensor checked against the whole model's shape.
  std::map<std::string, Tensor> have(gathered.begin(), gathered.end());
  nn::StateDict out;
  for (const FullTensor& f : full_layout_) {
    auto it = have.find(f.name);
    TESSERA_CHECK(it != have.end(), "[model parallel] no stage sent ", f.name);
    TESSERA_CHECK(it->second.shape() == f.shape && it->second.dtype() == f.dtype, "[model parallel] ", f.name,
                  " arrived as ", shape_str(it->second.shape()), ", expected ", shape_str(f.shape));
    out.emplace_back(f.name, it->second);
  }
  return out;
}

nn::StateDict MeshStrategy::gather_stage_leaders(nn::StateDict mine, int64_t tag_base, const std::string& what) {
  // Each stage leader (replica 0, tensor-parallel rank 0) sends its names as one message, then its
  // tensors, to world rank 0, which appends them after its own, stage by stage.
  parallel::pipeline::StageLink link(world_);
  if (mesh_->coordinates().pp != 0) {
    std::string names;
    for (const auto& [name, t] : mine) names += name + "\n";
    link.send_tensor(text_tensor(names), 0, tag_base);
    int64_t tag = tag_base + 1;
    for (const auto& [name, t] : mine) link.send_tensor(t, 0, tag++);
    link.wait_sends();
    return {};
  }
  for (int s = 1; s < mesh_->shape().pp; ++s) {
    const int peer = parallel::mesh_rank(mesh_->shape(), {0, s, 0});
    const std::string of_stage = " of stage " + std::to_string(s);
    std::istringstream names(text_of(link.recv_tensor(peer, tag_base, what + " names" + of_stage)));
    int64_t tag = tag_base + 1;
    for (std::string name; std::getline(names, name);)
      mine.emplace_back(name, link.recv_tensor(peer, tag++, what + " " + name + of_stage));
  }
  return mine;
}

void MeshStrategy::load_model_state(const nn::StateDict& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  const int tp_rank = mesh_->coordinates().tp, tp = mesh_->shape().tp;
  for (const auto& layer : stage_->layers()) {
    nn::StateDict mine;  // the layer's tensors, whole, under its own names
    for (const auto& [name, t] : layer.module->state_dict()) {
      auto it = by_name.find(layer.prefix + name);
      TESSERA_CHECK(it != by_name.end(), "[resume] the checkpoint has no ", layer.prefix + name, " (this model has it)");
      mine.emplace_back(name, it->second);
    }
    if (tp > 1) parallel::tensor::load_full_state_dict(*layer.module, mine, tp_rank, tp);  // slices the shards
    else layer.module->load_state_dict(mine, true);
  }
}

namespace {

// "<index>.<buffer>" -> (index, ".<buffer>"); nullopt for the optimizer's scalars ("step", "lr").
std::optional<std::pair<int64_t, std::string>> split_state_key(const std::string& key) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return std::nullopt;
  try {
    return std::make_pair(static_cast<int64_t>(std::stoll(key.substr(0, dot))), key.substr(dot));
  } catch (const std::exception&) {
    throw ValueError("[optimizer state] unexpected key '" + key + "'");
  }
}

}  // namespace

nn::StateDict MeshStrategy::optimizer_state(const optim::Optimizer& optimizer) {
  const auto& at = mesh_->coordinates();
  if (at.dp != 0) return {};  // the replicas are equal; replica 0 reports
  // This rank's state under whole-model indices, shards gathered over the tensor-parallel group
  // (every rank of it holds the same buffers in the same order, so the gathers pair up).
  nn::StateDict scalars, mine;
  for (const auto& [key, t] : optimizer.state_dict()) {
    auto split = split_state_key(key);
    if (!split) {
      scalars.emplace_back(key, t);
      continue;
    }
    const std::string& name = local_names_.at(static_cast<size_t>(split->first));
    auto spec = shard_specs_.find(name);
    Tensor whole = spec == shard_specs_.end() ? t : parallel::tensor::gather_shard(t, spec->second, *mesh_->tp_group());
    mine.emplace_back(std::to_string(global_index_.at(name)) + split->second, whole);
  }
  if (at.tp != 0) return {};
  nn::StateDict gathered = gather_stage_leaders(std::move(mine), kOptimizerStateTag, "optimizer state");
  if (at.pp != 0) return {};
  scalars.insert(scalars.end(), gathered.begin(), gathered.end());
  return scalars;
}

void MeshStrategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  std::map<int64_t, size_t> local_of;  // whole-model index -> this rank's
  for (size_t i = 0; i < local_names_.size(); ++i) local_of[global_index_.at(local_names_[i])] = i;
  const int tp_rank = mesh_->coordinates().tp, tp = mesh_->shape().tp;
  nn::StateDict mine;
  for (const auto& [key, t] : state) {
    auto split = split_state_key(key);
    if (!split) {
      mine.emplace_back(key, t);
      continue;
    }
    TESSERA_CHECK(split->first >= 0 && split->first < static_cast<int64_t>(global_index_.size()), "[resume] optimizer state '",
                  key, "' names parameter ", split->first, " but the model has ", global_index_.size());
    auto local = local_of.find(split->first);
    if (local == local_of.end()) continue;  // another stage's
    auto spec = shard_specs_.find(local_names_[local->second]);
    Tensor part = spec == shard_specs_.end() ? t : parallel::tensor::take_shard(t, spec->second, tp_rank, tp);
    mine.emplace_back(std::to_string(local->second) + split->second, part);
  }
  optimizer.load_state_dict(mine);
}

const MeshStrategy::FullTensor& MeshStrategy::full_tensor(const std::string& whole_name) const {
  auto it = full_index_.find(whole_name);
  if (it == full_index_.end()) throw ValueError("[model parallel] the model has no tensor " + whole_name);
  return full_layout_[it->second];
}

std::vector<std::pair<io::Region, Tensor>> MeshStrategy::boxes_of(const std::string& whole_name, const Tensor& local) const {
  const Shape& full = full_tensor(whole_name).shape;
  auto spec = shard_specs_.find(whole_name);
  if (spec == shard_specs_.end()) return {{io::Region::whole(full), local}};
  const auto& [dim, full_size, blocks] = spec->second;
  const int64_t block = full_size / blocks;
  const auto [begin, end] = parallel::tensor::shard_range(block, mesh_->coordinates().tp, mesh_->shape().tp);
  std::vector<std::pair<io::Region, Tensor>> boxes;
  for (int64_t k = 0; k < blocks; ++k) {
    io::Region region = io::Region::whole(full);
    region.offsets[static_cast<size_t>(dim)] = k * block + begin;
    region.lengths[static_cast<size_t>(dim)] = end - begin;
    boxes.emplace_back(region, local.slice(dim, k * (end - begin), (k + 1) * (end - begin)));
  }
  return boxes;
}

std::vector<io::SavePiece> MeshStrategy::checkpoint_pieces(const optim::Optimizer& optimizer) {
  const auto& at = mesh_->coordinates();
  if (at.dp != 0) return {};  // the replicas are equal; replica 0 writes
  const std::string model = io::kModelTensors, optimizer_prefix = io::kOptimizerTensors;
  std::vector<io::SavePiece> pieces;
  auto add = [&](const std::string& logical, const std::string& whole_name, const Tensor& local) {
    if (at.tp != 0 && !shard_specs_.count(whole_name)) return;  // replicated: tensor-parallel rank 0's
    for (auto& [region, part] : boxes_of(whole_name, local))
      pieces.push_back({logical, full_tensor(whole_name).shape, region, part});
  };
  for (const auto& layer : stage_->layers())
    for (const auto& [name, t] : layer.module->state_dict()) add(model + layer.prefix + name, layer.prefix + name, t);
  for (const auto& [key, t] : optimizer.state_dict()) {
    auto split = split_state_key(key);
    if (!split) {  // step, lr: the same on every rank
      if (rank() == 0) pieces.push_back({optimizer_prefix + key, t.shape(), io::Region::whole(t.shape()), t});
      continue;
    }
    const std::string& name = local_names_.at(static_cast<size_t>(split->first));
    add(optimizer_prefix + std::to_string(global_index_.at(name)) + split->second, name, t);
  }
  return pieces;
}

std::vector<std::string> MeshStrategy::checkpoint_order() const {
  std::vector<std::string> order;
  for (const FullTensor& f : full_layout_) order.push_back(io::kModelTensors + f.name);
  return order;
}

void MeshStrategy::load_pieces(io::PieceReader& reader, optim::Optimizer& optimizer) {
  autograd::NoGradGuard no_grad;
  const std::string model = io::kModelTensors, optimizer_prefix = io::kOptimizerTensors;
  // Fills `local` (this rank's tensor named whole_name) from the boxes it holds of `logical`.
  auto fill = [&](const std::string& logical, const std::string& whole_name, Tensor& local) {
    const io::LogicalTensor& saved = reader.tensor(logical);
    const FullTensor& full = full_tensor(whole_name);
    if (saved.shape != full.shape || saved.dtype != full.dtype)
      throw IoError("[resume] " + reader.dir() + " holds " + logical + " as " + shape_str(saved.shape) + " " +
                    dtype_name(saved.dtype) + ", the model as " + shape_str(full.shape) + " " + dtype_name(full.dtype));
    for (auto& [region, part] : boxes_of(whole_name, local)) copy_(part, reader.read(logical, region).view(part.shape()));
  };
  for (const auto& layer : stage_->layers())
    for (auto& [name, t] : layer.module->state_dict()) fill(model + layer.prefix + name, layer.prefix + name, t);
  nn::StateDict state;
  for (const std::string& name : reader.names_with_prefix(optimizer_prefix))
    if (name.find('.') == std::string::npos) state.emplace_back(name.substr(optimizer_prefix.size()), reader.read_whole(name));
  const std::vector<Tensor> params = stage_->parameters();  // local_names_'s order
  for (size_t i = 0; i < local_names_.size(); ++i) {
    const std::string buffers = optimizer_prefix + std::to_string(global_index_.at(local_names_[i])) + ".";
    for (const std::string& buffer : reader.names_with_prefix(buffers)) {
      Tensor local = Tensor::empty(params[i].shape(), reader.tensor(buffer).dtype);
      fill(buffer, local_names_[i], local);
      state.emplace_back(std::to_string(i) + "." + buffer.substr(buffers.size()), local);
    }
  }
  optimizer.load_state_dict(state);
}

void MeshStrategy::add_step_metrics(nlohmann::json& record) const {
  record["bubble_fraction"] = last_step_.bubble_fraction();
  record["peak_activations"] = last_step_.peak_activations;
  record["pipeline_bytes_sent"] = last_step_.bytes_sent;
  record_peak_allocated_bytes(record);
  if (mesh_->shape().tp > 1) {
    // The compute thread's time in the tensor-parallel collectives (the token embedding's all-reduce
    // included): under sequence parallelism with tp_overlap_chunks > 1, the part the matmuls did not hide.
    record["tp_comm_exposed_ms"] = 1e3 * tp_comm_.exposed_seconds;
    record["tp_comm_calls"] = tp_comm_.calls;
    record["tp_comm_bytes"] = tp_comm_.bytes;
  }
}

std::string MeshStrategy::describe() const {
  return "[model parallel] dp " + std::to_string(mesh_->shape().dp) + " × pp " + std::to_string(mesh_->shape().pp) +
         " × tp " + std::to_string(mesh_->shape().tp) + (context_ ? " (" + context_->describe() + ")" : "") + ", " +
         config_.parallel.schedule + " schedule, " +
         std::to_string(config_.parallel.microbatches) + " micro-batches; " +
         (stage_->chunks() > 1
              ? std::to_string(stage_->chunks()) + " chunks per stage, " +
                    (config_.parallel.schedule == "zb-v" ? "chunks s and 2pp-1-s on stage s (a V): "
                                                         : "chunk c on stage c mod pp: ")
              : "stages: ") +
         parallel::pipeline::describe_stages(bounds_);
}

}  // namespace tessera::train
