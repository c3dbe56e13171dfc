#include "tessera/parallel/zero/zero_data_parallel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/parallel/ddp/bucket.h"

namespace tessera::parallel::zero {

using tessera::detail::concat;

namespace {

// The model as consecutive layers, where it is one (stage 3 gathers around each); empty otherwise.
nn::LayerChain chain_of(nn::Module& model) {
  if (auto* t = dynamic_cast<nn::CharTransformer*>(&model)) return t->layer_chain();
  if (auto* s = dynamic_cast<nn::Sequential*>(&model)) return s->layer_chain();
  return {};
}

int64_t bytes_of(const Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) : 0; }

}  // namespace

class ZeroDataParallel::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(std::shared_ptr<nn::Module> model, dist::ProcessGroupPtr group, ZeroOptions options);
  void register_hooks();

  Tensor forward(const Tensor& input);
  void step(optim::Optimizer& optimizer);
  void attach(optim::Optimizer& optimizer);
  double clip_grad_norm(double max_norm);
  void zero_grad();
  void hold_gathered(bool on);
  void publish_pieces();
  nn::StateDict full_state_dict();
  void load_full_state_dict(const nn::StateDict& state);
  nn::StateDict full_optimizer_state(const optim::Optimizer& optimizer);
  void load_full_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state);
  ZeroMemory memory(const optim::Optimizer* optimizer) const;

  std::shared_ptr<nn::Module> model_;
  dist::ProcessGroupPtr group_;
  ZeroOptions options_;
  int rank_ = 0, world_ = 1;
  nn::StateDict params_;
  std::vector<FlatUnit> units_;
  std::vector<size_t> unit_of_, position_in_unit_;  // per parameter
  std::vector<Tensor> pieces_;                      // per parameter: views of shard_
  std::vector<Tensor> full_;                        // per unit: the whole flat values (params view it)
  std::vector<Tensor> shard_;                       // per unit: this rank's chunk of the values
  std::vector<Tensor> grad_shard_;                  // per unit: this rank's chunk of the averaged gradient
  int64_t bytes_communicated_ = 0;

  // Stage 3: the chain cut into segments of consecutive layers, each with its unit (-1: no parameters).
  struct Segment {
    std::vector<std::shared_ptr<nn::Module>> layers;
    int unit = -1;
  };
  std::vector<Segment> segments_;
  bool whole_model_unit_ = false;  // stage 3 on a model that is not a chain
  std::vector<dist::WorkPtr> gathering_;  // per unit: an all-gather in flight
  std::vector<bool> resident_;
  bool held_ = false;                      // hold_gathered: nothing is released
  const optim::Optimizer* attached_ = nullptr;

 private:
  void plan(const ZeroOptions& options);
  void bind_parameters_to_units();
  // Stage 3.
  void start_gather(size_t unit);
  void ensure_gathered(size_t unit);
  void release(size_t unit);
  void gather_all();
  void release_all();
  Tensor mark_backward(const Tensor& output, size_t unit);
  void before_backward_of(size_t unit);
  // Gradients.
  void on_grad_ready(size_t index);
  void begin_backward();
  void copy_gradients_of(size_t unit);
  void launch_ready_units();
  // Folds finished reductions into the gradient pieces, oldest first, until at most `in_flight` are
  // left: a unit's whole gradients are freed as soon as its reduce-scatter is done, not at the end
  // of backward (which would hold every unit's at once: 4Ψ at the peak).
  void drain_reductions(size_t in_flight);
  void finish_backward();
  Tensor gather_chunks(const Tensor& chunk, size_t unit);

  std::vector<size_t> launch_order_;  // units in the order their gradients are expected ready
  bool in_backward_ = false;
  std::vector<bool> ready_;
  std::vector<size_t> pending_;       // per unit: gradients not yet ready
  size_t next_to_launch_ = 0;
  size_t next_to_drain_ = 0;          // position in launch_order_ of the oldest reduction not folded in
  std::vector<Tensor> grad_flat_, received_;
  std::vector<dist::WorkPtr> reducing_;
};

ZeroDataParallel::Impl::Impl(std::shared_ptr<nn::Module> model, dist::ProcessGroupPtr group, ZeroOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(std::move(options)) {
  TESSERA_CHECK(model_ != nullptr, "[zero] model is null");
  TESSERA_CHECK(group_ != nullptr, "[zero] process group is null");
  TESSERA_CHECK(options_.stage >= 1 && options_.stage <= 3, "[zero] stage must be 1, 2 or 3, got ", options_.stage);
  TESSERA_CHECK(options_.wrap_policy == "layer" || options_.wrap_policy == "size",
                "[zero] wrap_policy must be \"layer\" or \"size\", got \"", options_.wrap_policy, "\"");
  rank_ = group_->rank(), world_ = group_->size();
  params_ = model_->named_parameters();
  for (const auto& [name, p] : params_) {
    TESSERA_CHECK(p.dtype() == DType::Float32 && p.is_contiguous(), "[zero] parameter ", name, " is ",
                  dtype_name(p.dtype()), p.is_contiguous() ? "" : " and not contiguous",
                  "; ZeRO shards contiguous float32 parameters");
    TESSERA_CHECK(p.requires_grad(), "[zero] parameter ", name, " is frozen (requires_grad false); ZeRO needs every "
                  "parameter to take part in every backward pass: register it as a buffer instead");
  }
  plan(options_);
  bind_parameters_to_units();
  ready_.assign(params_.size(), false);
  grad_flat_.resize(units_.size());
  received_.resize(units_.size());
  reducing_.resize(units_.size());
  gathering_.resize(units_.size());
  resident_.assign(units_.size(), true);
  if (options_.stage == 3) release_all();
}

void ZeroDataParallel::Impl::plan(const ZeroOptions& options) {
  std::vector<int64_t> sizes;
  std::vector<size_t> bytes;
  std::unordered_map<const TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) {
    sizes.push_back(params_[i].second.numel());
    bytes.push_back(static_cast<size_t>(params_[i].second.numel()) * 4);
    index_of[params_[i].second.impl()] = i;
  }
  std::vector<std::vector<size_t>> groups;
  if (options.stage < 3) {
    std::vector<size_t> reverse(params_.size());
    std::iota(reverse.rbegin(), reverse.rend(), size_t{0});
    groups = ddp::assign_buckets(reverse, bytes, options.bucket_cap_bytes, options.bucket_cap_bytes);
  } else {
    // Segments of the chain: a layer's parameters must be its own (no parameter in two layers, every
    // parameter in one); otherwise the whole model is one unit.
    nn::LayerChain chain = chain_of(*model_);
    std::vector<int> seen(params_.size(), 0);
    bool usable = !chain.empty();
    for (const auto& layer : chain)
      for (const Tensor& p : layer.module->parameters()) {
        auto it = index_of.find(p.impl());
        if (it == index_of.end()) usable = false;
        else ++seen[it->second];
      }
    for (int s : seen) usable = usable && s == 1;
    if (!usable) {
      whole_model_unit_ = true;
      std::vector<size_t> all(params_.size());
      std::iota(all.begin(), all.end(), size_t{0});
      groups.push_back(all);
      segments_.push_back({{model_}, 0});
    } else {
      Segment current;
      std::vector<size_t> current_group;
      size_t current_bytes = 0;
      auto close = [&] {
        if (current.layers.empty()) return;
        current.unit = current_group.empty() ? -1 : static_cast<int>(groups.size());
        if (!current_group.empty()) groups.push_back(current_group);
        segments_.push_back(std::move(current));
        current = {}, current_group.clear(), current_bytes = 0;
      };
      for (const auto& layer : chain) {
        current.layers.push_back(layer.module);
        for (const Tensor& p : layer.module->parameters()) {
          current_group.push_back(index_of.at(p.impl()));
          current_bytes += static_cast<size_t>(p.numel()) * 4;
        }
        const bool big_enough = options.wrap_policy == "layer" ? !current_group.empty()
                                                               : current_bytes >= options.min_unit_bytes;
        if (big_enough) close();
      }
      if (!current.layers.empty()) {
        // Trailing layers without enough parameters join the last unit (or stand alone without any).
        if (!segments_.empty() && segments_.back().unit >= 0 && !current_group.empty() ) {
          Segment& last = segments_.back();
          for (auto& l : current.layers) last.layers.push_back(l);
          auto& g = groups[static_cast<size_t>(last.unit)];
          g.insert(g.end(), current_group.begin(), current_group.end());
          current = {}, current_group.clear();
        } else {
          close();
        }
      }
    }
  }
  units_ = plan_units(groups, sizes, world_);
  // plan_units keeps the groups' order and drops only empty ones, which segments never name.
  unit_of_.assign(params_.size(), 0);
  position_in_unit_.assign(params_.size(), 0);
  std::vector<bool> covered(params_.size(), false);
  for (size_t u = 0; u < units_.size(); ++u)
    for (size_t k = 0; k < units_[u].params.size(); ++k) {
      unit_of_[units_[u].params[k]] = u;
      position_in_unit_[units_[u].params[k]] = k;
      covered[units_[u].params[k]] = true;
    }
  for (size_t i = 0; i < params_.size(); ++i)
    TESSERA_CHECK(covered[i], "[zero] parameter ", params_[i].first, " is in no unit");
  launch_order_.resize(units_.size());
  std::iota(launch_order_.begin(), launch_order_.end(), size_t{0});
  // Stage 3's units are in forward order; their gradients become ready last unit first.
  if (options.stage == 3) std::reverse(launch_order_.begin(), launch_order_.end());
}

void ZeroDataParallel::Impl::bind_parameters_to_units() {
  autograd::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    const FlatUnit& unit = units_[u];
    Tensor full = zeros({unit.padded()});
    for (size_t k = 0; k < unit.params.size(); ++k) {
      Tensor slot = full.slice(0, unit.offsets[k], unit.offsets[k] + unit.sizes[k]);
      copy_(slot, params_[unit.params[k]].second.view({unit.sizes[k]}));
    }
    // Every rank starts from rank 0's values (its model may have been built from another seed).
    group_->blocking_broadcast(full, 0);
    // The parameters become views of the flat buffer (their handles, held by the layers, stay valid).
    for (size_t k = 0; k < unit.params.size(); ++k)
      rebind_storage(params_[unit.params[k]].second, full.impl()->storage, full.impl()->offset + unit.offsets[k]);
    Tensor mine = full.slice(0, rank_ * unit.chunk, (rank_ + 1) * unit.chunk);
    // Stages 1 and 2 keep the whole parameters: this rank's chunk is a view of them. Stage 3 keeps
    // the chunk on its own, so the whole buffer can be freed.
    shard_.push_back(options_.stage == 3 ? clone(mine) : mine);
    grad_shard_.push_back(zeros({unit.chunk}));
    full_.push_back(full);
  }
  pieces_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t u = unit_of_[i];
    const Piece piece = piece_of(units_[u], position_in_unit_[i], rank_);
    pieces_[i] = shard_[u].slice(0, piece.chunk_offset, piece.chunk_offset + piece.size());
  }
}

void ZeroDataParallel::Impl::register_hooks() {
  std::weak_ptr<Impl> weak = weak_from_this();
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].second.register_grad_ready_hook([weak, i](const Tensor&) {
      if (auto z = weak.lock()) z->on_grad_ready(i);
    });
}

// ---- stage 3: gathering units ----

void ZeroDataParallel::Impl::start_gather(size_t unit) {
  if (resident_[unit] || gathering_[unit]) return;
  full_[unit].impl()->storage->restore_memory();
  gathering_[unit] = group_->allgather(shard_[unit], full_[unit]);
  bytes_communicated_ += bytes_of(shard_[unit]) * (world_ - 1);
}

void ZeroDataParallel::Impl::ensure_gathered(size_t unit) {
  start_gather(unit);
  if (gathering_[unit]) {
    // No version bump: gathered again before backward, the values are those the forward saved.
    gathering_[unit]->wait();
    gathering_[unit].reset();
  }
  resident_[unit] = true;
}

void ZeroDataParallel::Impl::release(size_t unit) {
  if (options_.stage < 3 || held_) return;
  if (gathering_[unit]) {  // a prefetch nobody used: finish it before its buffer goes
    gathering_[unit]->wait();
    gathering_[unit].reset();
  }
  full_[unit].impl()->storage->release_memory();
  resident_[unit] = false;
}

void ZeroDataParallel::Impl::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u) start_gather(u);
  for (size_t u = 0; u < units_.size(); ++u) ensure_gathered(u);
}

void ZeroDataParallel::Impl::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

Tensor ZeroDataParallel::Impl::mark_backward(const Tensor& output, size_t unit) {
  // The identity, recorded: its backward runs when the gradient of the unit's output is complete,
  // which is before any of the unit's own backward nodes (they need that gradient).
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = output.detach();
  }
  std::weak_ptr<Impl> weak = weak_from_this();
  return autograd::record(y, "ZeroGatherBeforeBackward", {output}, [weak, unit](const Tensor& grad) {
    if (auto z = weak.lock()) z->before_backward_of(unit);
    return std::vector<Tensor>{grad};
  }, autograd::Saves::Nothing);
}

void ZeroDataParallel::Impl::before_backward_of(size_t unit) {
  autograd::NoGradGuard no_grad;
  ensure_gathered(unit);
  if (options_.prefetch && unit > 0) start_gather(unit - 1);
}

Tensor ZeroDataParallel::Impl::forward(const Tensor& input) {
  if (options_.stage < 3) return model_->forward(input);
  const bool recording = autograd::grad_enabled();
  // The last unit stays gathered after a recorded forward: its backward comes first.
  int last_unit = -1;
  for (const auto& s : segments_) last_unit = std::max(last_unit, s.unit);
  Tensor h = input;
  for (const Segment& segment : segments_) {
    if (segment.unit >= 0) {
      const auto u = static_cast<size_t>(segment.unit);
      {
        autograd::NoGradGuard no_grad;
        ensure_gathered(u);
        if (options_.prefetch && u + 1 < units_.size()) start_gather(u + 1);
      }
      for (const auto& layer : segment.layers) h = layer->forward(h);
      if (recording && h.requires_grad()) {
        h = mark_backward(h, u);
        if (segment.unit != last_unit) release(u);
      } else {
        release(u);
      }
    } else {
      for (const auto& layer : segment.layers) h = layer->forward(h);
    }
  }
  return h;
}

// ---- gradients ----

void ZeroDataParallel::Impl::begin_backward() {
  in_backward_ = true;
  std::fill(ready_.begin(), ready_.end(), false);
  pending_.clear();
  for (const auto& unit : units_) pending_.push_back(unit.params.size());
  next_to_launch_ = 0;
  next_to_drain_ = 0;
  std::weak_ptr<Impl> weak = weak_from_this();
  autograd::queue_callback([weak] {
    if (auto z = weak.lock()) z->finish_backward();
  });
}

void ZeroDataParallel::Impl::on_grad_ready(size_t index) {
  if (!in_backward_) begin_backward();
  TESSERA_CHECK(!ready_[index], "[zero] rank ", rank_, ": parameter ", params_[index].first,
                " got its gradient twice in one backward pass; ZeRO takes one gradient per parameter per pass");
  ready_[index] = true;
  const size_t u = unit_of_[index];
  if (--pending_[u] == 0 && options_.stage >= 2) launch_ready_units();
}

void ZeroDataParallel::Impl::copy_gradients_of(size_t u) {
  autograd::NoGradGuard no_grad;
  const FlatUnit& unit = units_[u];
  grad_flat_[u] = zeros({unit.padded()});
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const Tensor& p = params_[unit.params[k]].second;
    Tensor slot = grad_flat_[u].slice(0, unit.offsets[k], unit.offsets[k] + unit.sizes[k]);
    Tensor g = p.grad();
    if (g.defined()) copy_(slot, g.contiguous().view({unit.sizes[k]}));
    p.set_grad(Tensor());  // the whole gradient goes: this rank keeps only its piece
  }
}

void ZeroDataParallel::Impl::launch_ready_units() {
  // In the same order on every rank: a unit waits for those before it in launch_order_.
  while (next_to_launch_ < launch_order_.size() && pending_[launch_order_[next_to_launch_]] == 0) {
    const size_t u = launch_order_[next_to_launch_++];
    copy_gradients_of(u);
    const DType wire = options_.reduce_dtype;
    if (wire != DType::Float32) grad_flat_[u] = grad_flat_[u].to(wire);
    received_[u] = Tensor::empty({units_[u].chunk}, wire);
    reducing_[u] = group_->reduce_scatter(grad_flat_[u], received_[u], dist::ReduceOp::Sum);
    bytes_communicated_ += bytes_of(received_[u]) * (world_ - 1);
    // Stage 3: the unit's values are no longer needed in this backward pass.
    if (options_.stage == 3) release(u);
  }
  // Two in flight keep the wire busy while the next unit's gradients are copied.
  if (options_.stage >= 2) drain_reductions(2);
}

void ZeroDataParallel::Impl::drain_reductions(size_t in_flight) {
  const float scale = 1.0f / static_cast<float>(world_);
  while (next_to_launch_ - next_to_drain_ > in_flight) {
    const size_t u = launch_order_[next_to_drain_++];
    reducing_[u]->wait();
    reducing_[u].reset();
    add_(grad_shard_[u], received_[u].dtype() == DType::Float32 ? received_[u] : received_[u].to(DType::Float32), scale);
    grad_flat_[u] = Tensor(), received_[u] = Tensor();
  }
}

void ZeroDataParallel::Impl::finish_backward() {
  autograd::NoGradGuard no_grad;
  in_backward_ = false;
  std::string missing;
  size_t missing_count = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i] && missing_count++ < 10) missing += (missing.empty() ? "" : ", ") + params_[i].first;
  if (missing_count > 0) {
    // The collectives of this pass cannot be matched on the other ranks; the error says which
    // parameter broke it.
    for (size_t u = 0; u < units_.size(); ++u) {
      if (reducing_[u]) reducing_[u]->wait(), reducing_[u].reset();
      grad_flat_[u] = Tensor(), received_[u] = Tensor();
    }
    if (options_.stage == 3) release_all();
    throw ValueError(concat("[zero] rank ", rank_, ": parameter(s) ", missing,
                            missing_count > 10 ? concat(" and ", missing_count - 10, " more") : std::string(),
                            " received no gradient in this backward pass; ZeRO needs every parameter to take part "
                            "in every pass (use DDP with find_unused_parameters for a model that skips some)"));
  }
  launch_ready_units();  // stage 1: every unit now; stages 2 and 3: none left
  drain_reductions(0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t u = unit_of_[i];
    const Tensor& piece = pieces_[i];
    const int64_t begin = piece.impl()->offset - shard_[u].impl()->offset;
    pieces_[i].set_grad(grad_shard_[u].slice(0, begin, begin + piece.numel()));
  }
  if (options_.stage == 3) release_all();
}

// ---- the step ----

void ZeroDataParallel::Impl::step(optim::Optimizer& optimizer) {
  TESSERA_CHECK(!in_backward_, "[zero] step() during a backward pass");
  if (attached_ != &optimizer) attach(optimizer);  // LARS and LAMB need the whole tensors' norms
  optimizer.step();
  autograd::NoGradGuard no_grad;
  // Whatever graph was recorded before this step read the old values (autograd's version check).
  for (auto& f : full_) f.impl()->storage->bump_version();
  publish_pieces();
  zero_grad();
}

void ZeroDataParallel::Impl::publish_pieces() {
  autograd::NoGradGuard no_grad;
  if (options_.stage == 3) {
    // A unit still gathered (a forward without backward, or held) holds the old values.
    const bool held = held_;
    held_ = false;
    release_all();
    if (held) hold_gathered(true);
    return;
  }
  // Each rank's chunk (a view of the whole buffer, so sent from a copy) to every rank.
  std::vector<Tensor> sent(units_.size());
  std::vector<dist::WorkPtr> works(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    sent[u] = clone(shard_[u]);
    works[u] = group_->allgather(sent[u], full_[u]);
    bytes_communicated_ += bytes_of(sent[u]) * (world_ - 1);
  }
  for (size_t u = 0; u < units_.size(); ++u) works[u]->wait();
}

void ZeroDataParallel::Impl::hold_gathered(bool on) {
  if (options_.stage < 3 || on == held_) return;
  if (on) {
    gather_all();
    held_ = true;
  } else {
    held_ = false;
    release_all();
  }
}

void ZeroDataParallel::Impl::zero_grad() {
  for (auto& g : grad_shard_) fill_(g, 0.0f);
}

void ZeroDataParallel::Impl::attach(optim::Optimizer& optimizer) {
  TESSERA_CHECK(optimizer.params().size() == pieces_.size(), "[zero] the optimizer has ", optimizer.params().size(),
                " parameters; build it over ZeroDataParallel::parameters() (", pieces_.size(), ")");
  for (size_t i = 0; i < pieces_.size(); ++i)
    TESSERA_CHECK(optimizer.params()[i].impl() == pieces_[i].impl(), "[zero] optimizer parameter ", i,
                  " is not this rank's piece of ", params_[i].first, "; build it over ZeroDataParallel::parameters()");
  optim::Optimizer::Partition partition;
  for (const auto& [name, p] : params_) partition.whole_dims.push_back(p.dim());
  dist::ProcessGroupPtr group = group_;
  partition.sum_over_pieces = [group](std::vector<double>& sums) {
    // float32 on the wire (the backends reduce float32): 7 digits are plenty for a trust ratio.
    std::vector<float> values(sums.begin(), sums.end());
    Tensor t = from_vector(values, {static_cast<int64_t>(values.size())});
    group->blocking_allreduce(t, dist::ReduceOp::Sum);
    const float* r = t.data<float>();
    for (size_t k = 0; k < sums.size(); ++k) sums[k] = r[k];
  };
  optimizer.set_partition(std::move(partition));
  attached_ = &optimizer;
}

double ZeroDataParallel::Impl::clip_grad_norm(double max_norm) {
  autograd::NoGradGuard no_grad;
  double local = 0.0;
  for (const auto& g : grad_shard_) {
    const float* d = g.data<float>();
    for (int64_t k = 0; k < g.numel(); ++k) local += static_cast<double>(d[k]) * d[k];
  }
  Tensor total = from_vector(std::vector<float>{static_cast<float>(local)}, {1});
  group_->blocking_allreduce(total, dist::ReduceOp::Sum);
  const double norm = std::sqrt(static_cast<double>(total.data<float>()[0]));
  if (norm > max_norm && norm > 0.0) {
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (auto& g : grad_shard_) mul_(g, scale);
  }
  return norm;
}

// ---- whole states ----

nn::StateDict ZeroDataParallel::Impl::full_state_dict() {
  autograd::NoGradGuard no_grad;
  if (options_.stage == 3) gather_all();
  nn::StateDict out;
  for (const auto& [name, t] : model_->state_dict()) out.emplace_back(name, clone(t));
  if (options_.stage == 3) release_all();
  return out;
}

void ZeroDataParallel::Impl::load_full_state_dict(const nn::StateDict& state) {
  autograd::NoGradGuard no_grad;
  if (options_.stage == 3)
    for (auto& f : full_) f.impl()->storage->restore_memory();
  model_->load_state_dict(state, true);
  for (size_t u = 0; u < units_.size(); ++u) {
    full_[u].impl()->storage->bump_version();
    if (options_.stage == 3) {
      Tensor mine = full_[u].slice(0, rank_ * units_[u].chunk, (rank_ + 1) * units_[u].chunk);
      copy_(shard_[u], mine);
      resident_[u] = true;
    }
  }
  if (options_.stage == 3) release_all();
}

Tensor ZeroDataParallel::Impl::gather_chunks(const Tensor& chunk, size_t unit) {
  Tensor whole = Tensor::empty({units_[unit].padded()});
  group_->allgather(chunk, whole)->wait();
  return whole;
}

nn::StateDict ZeroDataParallel::Impl::full_optimizer_state(const optim::Optimizer& optimizer) {
  autograd::NoGradGuard no_grad;
  nn::StateDict mine = optimizer.state_dict(), out;
  // This rank's buffers per parameter, by name.
  std::vector<std::map<std::string, Tensor>> buffers(params_.size());
  std::set<std::string> names;
  for (const auto& [key, t] : mine) {
    if (key == "step" || key == "lr") {
      out.emplace_back(key, t);
      continue;
    }
    const size_t dot = key.find('.');
    buffers[std::stoul(key.substr(0, dot))][key.substr(dot + 1)] = t;
    names.insert(key.substr(dot + 1));
  }
  // Each rank has a buffer for every piece (every piece gets a gradient), so the names agree.
  std::vector<std::map<std::string, Tensor>> whole(params_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const FlatUnit& unit = units_[u];
    for (const std::string& name : names) {
      Tensor chunk = zeros({unit.chunk});
      for (size_t k = 0; k < unit.params.size(); ++k) {
        const Piece piece = piece_of(unit, k, rank_);
        auto it = buffers[unit.params[k]].find(name);
        TESSERA_CHECK(it != buffers[unit.params[k]].end(), "[zero] rank ", rank_, ": the optimizer has no '", name,
                      "' for parameter ", params_[unit.params[k]].first, " although it has one for others");
        Tensor dst = chunk.slice(0, piece.chunk_offset, piece.chunk_offset + piece.size());
        copy_(dst, it->second);
      }
      Tensor all = gather_chunks(chunk, u);
      for (size_t k = 0; k < unit.params.size(); ++k) {
        const Tensor& p = params_[unit.params[k]].second;
        whole[unit.params[k]][name] =
            clone(all.slice(0, unit.offsets[k], unit.offsets[k] + unit.sizes[k])).view(p.shape());
      }
    }
  }
  for (size_t i = 0; i < params_.size(); ++i)
    for (const auto& [name, t] : whole[i]) out.emplace_back(std::to_string(i) + "." + name, t);
  return out;
}

void ZeroDataParallel::Impl::load_full_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  autograd::NoGradGuard no_grad;
  nn::StateDict mine;
  for (const auto& [key, t] : state) {
    if (key == "step" || key == "lr") {
      mine.emplace_back(key, t);
      continue;
    }
    const size_t dot = key.find('.');
    TESSERA_CHECK(dot != std::string::npos && dot > 0 &&
                      key.find_first_not_of("0123456789") == dot,
                  "[zero] unexpected optimizer state key '", key, "' (expected step, lr or <index>.<buffer>)");
    const size_t i = std::stoul(key.substr(0, dot));
    TESSERA_CHECK(i < params_.size() && t.numel() == params_[i].second.numel(), "[zero] optimizer state '", key,
                  "' has ", t.numel(), " elements but parameter ", i < params_.size() ? params_[i].first : "?",
                  " has ", i < params_.size() ? params_[i].second.numel() : 0);
    const Piece piece = piece_of(units_[unit_of_[i]], position_in_unit_[i], rank_);
    mine.emplace_back(key, clone(t.contiguous().view({t.numel()}).slice(0, piece.begin, piece.end)));
  }
  optimizer.load_state_dict(mine);
}

ZeroMemory ZeroDataParallel::Impl::memory(const optim::Optimizer* optimizer) const {
  ZeroMemory m;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (full_[u].impl()->storage->resident()) m.parameters += bytes_of(full_[u]);
    if (options_.stage == 3) m.parameters += bytes_of(shard_[u]);
    m.gradients += bytes_of(grad_shard_[u]) + bytes_of(grad_flat_[u]) + bytes_of(received_[u]);
  }
  for (const auto& [name, p] : params_) m.gradients += bytes_of(p.grad());
  if (optimizer != nullptr)
    for (const auto& [key, t] : optimizer->state_dict())
      if (key != "step" && key != "lr") m.optimizer_state += bytes_of(t);
  return m;
}

// ---- the public face ----

ZeroDataParallel::ZeroDataParallel(std::shared_ptr<nn::Module> model, dist::ProcessGroupPtr group,
                                   ZeroOptions options)
    : impl_(std::make_shared<Impl>(std::move(model), std::move(group), std::move(options))) {
  impl_->register_hooks();
}
ZeroDataParallel::~ZeroDataParallel() = default;

Tensor ZeroDataParallel::forward(const Tensor& input) { return impl_->forward(input); }
const std::vector<Tensor>& ZeroDataParallel::parameters() const { return impl_->pieces_; }
void ZeroDataParallel::attach(optim::Optimizer& optimizer) { impl_->attach(optimizer); }
void ZeroDataParallel::step(optim::Optimizer& optimizer) { impl_->step(optimizer); }
double ZeroDataParallel::clip_grad_norm(double max_norm) { return impl_->clip_grad_norm(max_norm); }
void ZeroDataParallel::zero_grad() { impl_->zero_grad(); }
bool ZeroDataParallel::unscale_gradients(double inv_scale) { return optim::unscale_tensors(impl_->grad_shard_, inv_scale); }
void ZeroDataParallel::hold_gathered(bool on) { impl_->hold_gathered(on); }
void ZeroDataParallel::publish_pieces() {
  for (auto& f : impl_->full_) f.impl()->storage->bump_version();
  impl_->publish_pieces();
}
Piece ZeroDataParallel::piece(size_t index) const {
  TESSERA_CHECK(index < impl_->params_.size(), "[zero] parameter index ", index, " out of range (",
                impl_->params_.size(), ")");
  return piece_of(impl_->units_[impl_->unit_of_[index]], impl_->position_in_unit_[index], impl_->rank_);
}
nn::StateDict ZeroDataParallel::full_state_dict() { return impl_->full_state_dict(); }
void ZeroDataParallel::load_full_state_dict(const nn::StateDict& state) { impl_->load_full_state_dict(state); }
nn::StateDict ZeroDataParallel::full_optimizer_state(const optim::Optimizer& optimizer) {
  return impl_->full_optimizer_state(optimizer);
}
void ZeroDataParallel::load_full_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  impl_->load_full_optimizer_state(optimizer, state);
}
ZeroMemory ZeroDataParallel::memory(const optim::Optimizer* optimizer) const { return impl_->memory(optimizer); }
int ZeroDataParallel::stage() const { return impl_->options_.stage; }
const std::vector<FlatUnit>& ZeroDataParallel::units() const { return impl_->units_; }
nn::Module& ZeroDataParallel::module() { return *impl_->model_; }
const dist::ProcessGroupPtr& ZeroDataParallel::group() const { return impl_->group_; }
int64_t ZeroDataParallel::bytes_communicated() const { return impl_->bytes_communicated_; }

}  // namespace tessera::parallel::zero
