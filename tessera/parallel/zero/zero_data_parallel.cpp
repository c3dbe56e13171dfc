#include "tessera/parallel/zero/zero_data_parallel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/parallel/zero/zero_data_parallel_impl.h"

namespace tessera::parallel::zero {

using tessera::detail::concat;

ZeroDataParallel::Impl::Impl(std::shared_ptr<nn::Module> model, dist::ProcessGroupPtr group, ZeroOptions options)
    : model_(std::move(model)), options_(std::move(options)) {
  TESSERA_CHECK(model_ != nullptr, "[zero] model is null");
  TESSERA_CHECK(group != nullptr, "[zero] process group is null");
  TESSERA_CHECK(options_.stage >= 1 && options_.stage <= 3, "[zero] stage must be 1, 2 or 3, got ", options_.stage);
  TESSERA_CHECK(options_.wrap_policy == "layer" || options_.wrap_policy == "size",
                "[zero] wrap_policy must be \"layer\" or \"size\", got \"", options_.wrap_policy, "\"");
  z_.group = std::move(group);
  z_.rank = z_.group->rank(), z_.world = z_.group->size();
  z_.params = model_->named_parameters();
  for (const auto& [name, p] : z_.params) {
    TESSERA_CHECK(p.dtype() == DType::Float32 && p.is_contiguous(), "[zero] parameter ", name, " is ",
                  dtype_name(p.dtype()), p.is_contiguous() ? "" : " and not contiguous",
                  "; ZeRO shards contiguous float32 parameters");
    TESSERA_CHECK(p.requires_grad(), "[zero] parameter ", name, " is frozen (requires_grad false); ZeRO needs every "
                  "parameter to take part in every backward pass: register it as a buffer instead");
  }
  layout_ = make_parameter_layout(z_, options_);
  reduce_during_backward_ = options_.stage >= 2;
  plan();
  bind_parameters_to_units();
  ready_.assign(z_.params.size(), false);
  grad_flat_.resize(z_.units.size());
  received_.resize(z_.units.size());
  reducing_.resize(z_.units.size());
  layout_->start();
}

void ZeroDataParallel::Impl::plan() {
  std::vector<int64_t> sizes;
  for (const auto& [name, p] : z_.params) sizes.push_back(p.numel());
  z_.units = plan_units(layout_->group_parameters(*model_, z_), sizes, z_.world);
  // plan_units keeps the groups' order and drops only empty ones.
  const size_t count = z_.params.size();
  unit_of_.assign(count, 0);
  position_in_unit_.assign(count, 0);
  std::vector<bool> covered(count, false);
  for (size_t u = 0; u < z_.units.size(); ++u)
    for (size_t k = 0; k < z_.units[u].params.size(); ++k) {
      unit_of_[z_.units[u].params[k]] = u;
      position_in_unit_[z_.units[u].params[k]] = k;
      covered[z_.units[u].params[k]] = true;
    }
  for (size_t i = 0; i < count; ++i)
    TESSERA_CHECK(covered[i], "[zero] parameter ", z_.params[i].first, " is in no unit");
  launch_order_ = layout_->gradient_order(z_.units.size());
}

void ZeroDataParallel::Impl::bind_parameters_to_units() {
  autograd::NoGradGuard no_grad;
  for (size_t u = 0; u < z_.units.size(); ++u) {
    const FlatUnit& unit = z_.units[u];
    Tensor full = zeros({unit.padded()});
    for (size_t k = 0; k < unit.params.size(); ++k) {
      Tensor slot = full.slice(0, unit.offsets[k], unit.offsets[k] + unit.sizes[k]);
      copy_(slot, z_.params[unit.params[k]].second.view({unit.sizes[k]}));
    }
    // Every rank starts from rank 0's values (its model may have been built from another seed).
    if (options_.broadcast_initial_state) {
      z_.group->blocking_broadcast(full, 0);
      if (options_.replicas) options_.replicas->blocking_broadcast(full, 0);  // and every replica from the first
    }
    // The parameters become views of the flat buffer (their handles, held by the layers, stay valid).
    for (size_t k = 0; k < unit.params.size(); ++k)
      rebind_storage(z_.params[unit.params[k]].second, full.impl()->storage, full.impl()->offset + unit.offsets[k]);
    z_.full.push_back(full);
    // The layout keeps this rank's chunk as a view of the whole values, or apart from them.
    z_.shard.push_back(layout_->keep_chunk(z_.chunk_of_full(u)));
    grad_shard_.push_back(zeros({unit.chunk}));
  }
  pieces_.resize(z_.params.size());
  for (size_t i = 0; i < z_.params.size(); ++i) {
    const size_t u = unit_of_[i];
    const Piece piece = piece_of(z_.units[u], position_in_unit_[i], z_.rank);
    pieces_[i] = z_.shard[u].slice(0, piece.chunk_offset, piece.chunk_offset + piece.size());
  }
}

void ZeroDataParallel::Impl::register_hooks() {
  std::weak_ptr<Impl> weak = weak_from_this();
  for (size_t i = 0; i < z_.params.size(); ++i)
    z_.params[i].second.register_grad_ready_hook([weak, i](const Tensor&) {
      if (auto z = weak.lock()) z->on_grad_ready(i);
    });
}

Tensor ZeroDataParallel::Impl::forward(const Tensor& input) { return layout_->forward(*model_, input); }

// ---- gradients ----

void ZeroDataParallel::Impl::begin_backward() {
  in_backward_ = true;
  std::fill(ready_.begin(), ready_.end(), false);
  pending_.clear();
  for (const auto& unit : z_.units) pending_.push_back(unit.params.size());
  next_to_launch_ = 0;
  next_to_drain_ = 0;
  std::weak_ptr<Impl> weak = weak_from_this();
  autograd::queue_callback([weak] {
    if (auto z = weak.lock()) z->finish_backward();
  });
}

void ZeroDataParallel::Impl::on_grad_ready(size_t index) {
  if (!in_backward_) begin_backward();
  TESSERA_CHECK(!ready_[index], "[zero] rank ", z_.rank, ": parameter ", z_.params[index].first,
                " got its gradient twice in one backward pass; ZeRO takes one gradient per parameter per pass");
  ready_[index] = true;
  const size_t u = unit_of_[index];
  if (--pending_[u] == 0 && reduce_during_backward_) launch_ready_units();
}

void ZeroDataParallel::Impl::copy_gradients_of(size_t u) {
  autograd::NoGradGuard no_grad;
  const FlatUnit& unit = z_.units[u];
  grad_flat_[u] = zeros({unit.padded()});
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const Tensor& p = z_.params[unit.params[k]].second;
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
    received_[u] = Tensor::empty({z_.units[u].chunk}, wire);
    reducing_[u] = z_.group->reduce_scatter(grad_flat_[u], received_[u], dist::ReduceOp::Sum);
    z_.bytes_communicated += bytes_of(received_[u]) * (z_.world - 1);
    layout_->after_gradients_sent(u);  // stage 3: its values are not needed in this pass any more
  }
  // Two in flight keep the wire busy while the next unit's gradients are copied.
  if (reduce_during_backward_) drain_reductions(2);
}

void ZeroDataParallel::Impl::drain_reductions(size_t in_flight) {
  const int replicas = options_.replicas ? options_.replicas->size() : 1;
  const float scale = 1.0f / static_cast<float>(z_.world * replicas);
  while (next_to_launch_ - next_to_drain_ > in_flight) {
    const size_t u = launch_order_[next_to_drain_++];
    reducing_[u]->wait();
    reducing_[u].reset();
    if (replicas > 1) {  // HSDP: the piece summed over the replicas too (the only bytes between hosts)
      options_.replicas->blocking_allreduce(received_[u], dist::ReduceOp::Sum);
      z_.bytes_communicated += 2 * bytes_of(received_[u]) * (replicas - 1) / replicas;
    }
    add_(grad_shard_[u], received_[u].dtype() == DType::Float32 ? received_[u] : received_[u].to(DType::Float32), scale);
    grad_flat_[u] = Tensor(), received_[u] = Tensor();
  }
}

void ZeroDataParallel::Impl::finish_backward() {
  autograd::NoGradGuard no_grad;
  in_backward_ = false;
  std::string missing;
  size_t missing_count = 0;
  for (size_t i = 0; i < z_.params.size(); ++i)
    if (!ready_[i] && missing_count++ < 10) missing += (missing.empty() ? "" : ", ") + z_.params[i].first;
  if (missing_count > 0) {
    // The collectives of this pass cannot be matched on the other ranks; the error says which
    // parameter broke it.
    for (size_t u = 0; u < z_.units.size(); ++u) {
      if (reducing_[u]) reducing_[u]->wait(), reducing_[u].reset();
      grad_flat_[u] = Tensor(), received_[u] = Tensor();
    }
    layout_->after_backward();
    throw ValueError(concat("[zero] rank ", z_.rank, ": parameter(s) ", missing,
                            missing_count > 10 ? concat(" and ", missing_count - 10, " more") : std::string(),
                            " received no gradient in this backward pass; ZeRO needs every parameter to take part "
                            "in every pass (use DDP with find_unused_parameters for a model that skips some)"));
  }
  launch_ready_units();  // stage 1: every unit now; stages 2 and 3: none left
  drain_reductions(0);
  for (size_t i = 0; i < z_.params.size(); ++i) {
    const size_t u = unit_of_[i];
    const Tensor& piece = pieces_[i];
    const int64_t begin = piece.impl()->offset - z_.shard[u].impl()->offset;
    pieces_[i].set_grad(grad_shard_[u].slice(0, begin, begin + piece.numel()));
  }
  layout_->after_backward();
}

// ---- the step ----

void ZeroDataParallel::Impl::step(optim::Optimizer& optimizer) {
  TESSERA_CHECK(!in_backward_, "[zero] step() during a backward pass");
  if (attached_ != &optimizer) attach(optimizer);  // LARS and LAMB need the whole tensors' norms
  optimizer.step();
  autograd::NoGradGuard no_grad;
  // Whatever graph was recorded before this step read the old values (autograd's version check).
  for (auto& f : z_.full) f.impl()->storage->bump_version();
  publish_pieces();
  zero_grad();
}

void ZeroDataParallel::Impl::publish_pieces() { layout_->publish(); }

void ZeroDataParallel::Impl::hold_gathered(bool on) { layout_->hold_gathered(on); }

void ZeroDataParallel::Impl::zero_grad() {
  for (auto& g : grad_shard_) fill_(g, 0.0f);
}

void ZeroDataParallel::Impl::attach(optim::Optimizer& optimizer) {
  TESSERA_CHECK(optimizer.params().size() == pieces_.size(), "[zero] the optimizer has ", optimizer.params().size(),
                " parameters; build it over ZeroDataParallel::parameters() (", pieces_.size(), ")");
  for (size_t i = 0; i < pieces_.size(); ++i)
    TESSERA_CHECK(optimizer.params()[i].impl() == pieces_[i].impl(), "[zero] optimizer parameter ", i,
                  " is not this rank's piece of ", z_.params[i].first, "; build it over ZeroDataParallel::parameters()");
  optim::Optimizer::Partition partition;
  for (const auto& [name, p] : z_.params) partition.whole_dims.push_back(p.dim());
  dist::ProcessGroupPtr group = z_.group;
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
  z_.group->blocking_allreduce(total, dist::ReduceOp::Sum);
  const double norm = std::sqrt(static_cast<double>(total.data<float>()[0]));
  if (norm > max_norm && norm > 0.0) {
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (auto& g : grad_shard_) mul_(g, scale);
  }
  return norm;
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
  for (auto& f : impl_->z_.full) f.impl()->storage->bump_version();
  impl_->publish_pieces();
}
Piece ZeroDataParallel::piece(size_t index) const {
  TESSERA_CHECK(index < impl_->z_.params.size(), "[zero] parameter index ", index, " out of range (",
                impl_->z_.params.size(), ")");
  return piece_of(impl_->z_.units[impl_->unit_of_[index]], impl_->position_in_unit_[index], impl_->z_.rank);
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
const std::vector<FlatUnit>& ZeroDataParallel::units() const { return impl_->z_.units; }
nn::Module& ZeroDataParallel::module() { return *impl_->model_; }
const dist::ProcessGroupPtr& ZeroDataParallel::group() const { return impl_->z_.group; }
int64_t ZeroDataParallel::bytes_communicated() const { return impl_->z_.bytes_communicated; }

}  // namespace tessera::parallel::zero
