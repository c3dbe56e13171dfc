#include "tessera/parallel/ddp/reducer.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/ddp/bucket.h"

namespace tessera::parallel::ddp {

using tessera::detail::concat;

std::shared_ptr<Reducer> Reducer::create(nn::StateDict parameters, dist::ProcessGroupPtr group,
                                         ReducerOptions options, std::unique_ptr<CommHook> hook) {
  std::shared_ptr<Reducer> reducer(
      new Reducer(std::move(parameters), std::move(group), options, std::move(hook)));
  std::weak_ptr<Reducer> weak = reducer;
  for (size_t i = 0; i < reducer->parameters_.size(); ++i) {
    reducer->parameters_[i].second.register_grad_ready_hook([weak, i](const Tensor&) {
      if (auto r = weak.lock()) r->mark_ready(i);
    });
  }
  return reducer;
}

size_t auto_bucket_cap(size_t gradient_bytes) {
  constexpr size_t kMin = size_t(1) << 20, kMax = size_t(25) << 20;
  return std::clamp(gradient_bytes / 4, kMin, kMax);
}

size_t bucket_cap_from_mb(double mb) {
  TESSERA_CHECK(mb >= 0, "[DistributedDataParallel] the bucket cap must be positive, or 0 for auto; got ", mb, " MiB");
  return mb == 0 ? kAutoBucketCap : std::max<size_t>(1, static_cast<size_t>(mb * (1 << 20)));
}

Reducer::Reducer(nn::StateDict parameters, dist::ProcessGroupPtr group, ReducerOptions options,
                 std::unique_ptr<CommHook> hook)
    : parameters_(std::move(parameters)), group_(std::move(group)), options_(options), hook_(std::move(hook)) {
  TESSERA_CHECK(group_ != nullptr, "[DistributedDataParallel] process group is null");
  TESSERA_CHECK(hook_ != nullptr, "[DistributedDataParallel] comm hook is null");
  for (const auto& [name, p] : parameters_) {
    TESSERA_CHECK(p.dtype() == DType::Float32, "[DistributedDataParallel] parameter ", name, " is ",
                  dtype_name(p.dtype()), "; DDP averages float32 parameters");
    bytes_.push_back(static_cast<size_t>(p.numel()) * 4);
  }
  if (options_.bucket_cap_bytes == kAutoBucketCap) {
    options_.bucket_cap_bytes = auto_bucket_cap(std::accumulate(bytes_.begin(), bytes_.end(), size_t{0}));
    options_.first_bucket_cap_bytes = std::min(options_.first_bucket_cap_bytes, options_.bucket_cap_bytes);
  }
  std::vector<size_t> reverse(parameters_.size());
  std::iota(reverse.rbegin(), reverse.rend(), size_t{0});
  build_buckets(assign_buckets(reverse, bytes_, options_.first_bucket_cap_bytes, options_.bucket_cap_bytes));
  ready_.assign(parameters_.size(), false);
}

void Reducer::build_buckets(std::vector<std::vector<size_t>> layout) {
  layout_ = std::move(layout);
  views_.clear();
  bucket_of_.assign(parameters_.size(), 0);
  offset_of_.assign(parameters_.size(), 0);
  for (size_t b = 0; b < layout_.size(); ++b) {
    BucketView view;
    view.index = static_cast<int>(b);
    int64_t offset = 0;
    for (size_t i : layout_[b]) {
      bucket_of_[i] = b;
      offset_of_[i] = offset;
      view.shapes.push_back(parameters_[i].second.shape());
      view.offsets.push_back(offset);
      offset += parameters_[i].second.numel();
    }
    // Symmetric memory where the backend has it (shm) and the hook all-reduces the bucket itself:
    // the all-reduce then reads and writes the peers' buckets directly instead of copying through
    // its own buffers (shm_symmetric.h). Every rank has the same hook, so all call the collective.
    view.flat = hook_->reduces_bucket_in_place() ? group_->symmetric_zeros({offset}) : zeros({offset});
    views_.push_back(std::move(view));
  }
  // Backward writes a gradient that has no .grad yet straight into its slot (Tensor::set_grad_buffer).
  if (options_.gradient_as_bucket_view)
    for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].second.set_grad_buffer(slot(i));
}

Reducer::~Reducer() {
  if (!options_.gradient_as_bucket_view) return;
  // Only where the buffer is still ours: a newer DDP over the same parameters may have set its own.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& buffer = parameters_[i].second.impl()->grad_buffer;
    if (buffer && in_slot(Tensor(buffer), i)) parameters_[i].second.set_grad_buffer(Tensor());
  }
}

bool Reducer::in_slot(const Tensor& grad, size_t index) const {
  // (A gradient on a device the buckets are not on is never in its slot.)
  return grad.defined() && grad.device() == views_[bucket_of_[index]].flat.device() &&
         grad.data_ptr() == slot(index).data_ptr();
}

void Reducer::move_into_slot(size_t index) {
  const Tensor& p = parameters_[index].second;
  if (in_slot(p.grad(), index)) return;
  Tensor destination = slot(index);
  copy_(destination, p.grad());
  if (options_.gradient_as_bucket_view) p.set_grad(destination);
}

std::vector<Tensor> Reducer::bucket_buffers() const {
  std::vector<Tensor> out;
  for (const auto& view : views_) out.push_back(view.flat);
  return out;
}

Tensor Reducer::slot(size_t index) const {
  const Tensor& p = parameters_[index].second;
  int64_t offset = offset_of_[index];
  return views_[bucket_of_[index]].flat.slice(0, offset, offset + p.numel()).view(p.shape());
}

void Reducer::begin_iteration() {
  in_iteration_ = true;
  busy_at_start_ = group_->busy_seconds();
  std::fill(ready_.begin(), ready_.end(), false);
  pending_.clear();
  for (const auto& bucket : layout_) pending_.push_back(bucket.size());
  next_to_launch_ = 0;
  divisor_ = next_divisor_ > 0 ? next_divisor_ : group_->size();
  next_divisor_ = 0;
  // Finish when this backward pass ends.
  std::weak_ptr<Reducer> weak = weak_from_this();
  autograd::queue_callback([weak] {
    if (auto r = weak.lock()) r->finalize();
  });
}

void Reducer::mark_ready(size_t index) {
  if (!sync_) return;
  if (!in_iteration_) begin_iteration();
  TESSERA_CHECK(!ready_[index], "[DistributedDataParallel] rank ", group_->rank(), ": parameter ", parameters_[index].first,
                " got its gradient twice in one backward pass (is it used through two graphs with "
                "retain_graph?); DDP supports one gradient per parameter per iteration");
  ready_[index] = true;
  if (!rebuilt_) ready_order_.push_back(index);
  move_into_slot(index);  // a .grad from before the buckets (or bucket views off) is copied in
  if (--pending_[bucket_of_[index]] == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_to_launch_ < layout_.size() && pending_[next_to_launch_] == 0) {
    views_[next_to_launch_].divisor = divisor_;
    hook_->start(*group_, views_[next_to_launch_]);
    ++next_to_launch_;
  }
}

void Reducer::finalize() {
  autograd::NoGradGuard no_grad;
  const auto backward_done = std::chrono::steady_clock::now();
  in_iteration_ = false;
  std::vector<size_t> unused;
  for (size_t i = 0; i < parameters_.size(); ++i)
    if (!ready_[i]) unused.push_back(i);
  if (!unused.empty()) {
    if (!options_.find_unused_parameters) {
      std::string names;
      for (size_t k = 0; k < unused.size() && k < 10; ++k) names += (k ? ", " : "") + parameters_[unused[k]].first;
      if (unused.size() > 10) names += concat(" and ", unused.size() - 10, " more");
      throw ValueError(concat("[DistributedDataParallel] rank ", group_->rank(), ": parameter(s) ", names,
                              " received no gradient in this backward pass. If some parameters are unused by "
                              "design, construct DistributedDataParallel with find_unused_parameters = true"));
    }
    for (size_t i : unused) {
      // Unused in this backward, but a gradient accumulated under no_sync still takes part (as in
      // PyTorch); with bucket views it may be the slot itself, which must not be zeroed.
      if (parameters_[i].second.grad().defined()) {
        move_into_slot(i);
      } else {
        Tensor s = slot(i);
        fill_(s, 0.0f);
      }
      --pending_[bucket_of_[i]];
    }
    launch_ready_buckets();
  }
  // Which parameters some rank used: .grad stays unset for the others, as in PyTorch.
  std::vector<bool> used = used_anywhere(ready_);
  for (size_t b = 0; b < layout_.size(); ++b) {
    hook_->finish(*group_, views_[b]);
    for (size_t i : layout_[b]) {
      if (!used[i]) continue;
      const Tensor& p = parameters_[i].second;
      Tensor grad = p.grad();
      if (in_slot(grad, i)) continue;  // the average is already there
      Tensor averaged = slot(i);
      if (grad.defined()) {
        copy_(grad, averaged);  // from the host bucket to a device's .grad, where it lives there
      } else if (options_.gradient_as_bucket_view) {
        p.set_grad(averaged);
      } else {
        p.set_grad(p.device() == averaged.device() ? clone(averaged) : averaged.to(p.device()));
      }
    }
  }
  trace_.exposed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - backward_done).count();
  trace_.comm_seconds = group_->busy_seconds() - busy_at_start_;
  ++iterations_;
  if (!rebuilt_) rebuild_buckets();
}

std::vector<bool> Reducer::used_anywhere(const std::vector<bool>& used_here) {
  if (!options_.find_unused_parameters) return std::vector<bool>(parameters_.size(), true);
  Tensor used = Tensor::empty({static_cast<int64_t>(parameters_.size())}, DType::Int64);
  for (size_t i = 0; i < parameters_.size(); ++i) used.data<int64_t>()[i] = used_here[i] ? 1 : 0;
  group_->blocking_allreduce(used, dist::ReduceOp::Max);
  std::vector<bool> out(parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) out[i] = used.data<int64_t>()[i] != 0;
  return out;
}

void Reducer::shadow_iteration() {
  autograd::NoGradGuard no_grad;
  // The same collectives, in the same order, as begin_iteration .. finalize on an active rank:
  // every bucket's start in index order, the used-flags all-reduce, every bucket's finish, and the
  // one-time rebuild.
  for (auto& view : views_) {
    fill_(view.flat, 0.0f);
    view.divisor = group_->size();  // the result is discarded; any divisor will do
    hook_->start(*group_, view);
  }
  used_anywhere(std::vector<bool>(parameters_.size(), false));
  for (auto& view : views_) hook_->finish(*group_, view);
  next_divisor_ = 0;
  if (!rebuilt_) rebuild_buckets();
}

void Reducer::rebuild_buckets() {
  // Rank 0's ready order (unused parameters last, in reverse registration order), broadcast so
  // every rank builds the same buckets.
  std::vector<size_t> order = ready_order_;
  std::vector<bool> seen(parameters_.size(), false);
  for (size_t i : order) seen[i] = true;
  for (size_t i = parameters_.size(); i-- > 0;)
    if (!seen[i]) order.push_back(i);
  Tensor shared = Tensor::empty({static_cast<int64_t>(order.size())}, DType::Int64);
  for (size_t k = 0; k < order.size(); ++k) shared.data<int64_t>()[k] = static_cast<int64_t>(order[k]);
  group_->blocking_broadcast(shared, 0);
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<size_t>(shared.data<int64_t>()[k]);
  build_buckets(assign_buckets(order, bytes_, options_.first_bucket_cap_bytes, options_.bucket_cap_bytes));
  ready_order_.clear();
  rebuilt_ = true;
}

}  // namespace tessera::parallel::ddp
