#include "tessera/train/expert_parallelism.h"

#include <cmath>

#include "tessera/nn/mixture_of_experts.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"

namespace tessera::train {
namespace {

std::vector<int> consecutive(int first, int count) {
  std::vector<int> ranks;
  for (int r = first; r < first + count; ++r) ranks.push_back(r);
  return ranks;
}

// "12.exp_avg" -> 12; -1 for "step", "lr" and other keys.
int64_t parameter_index(const std::string& key) {
  const size_t dot = key.find('.');
  if (dot == 0 || dot == std::string::npos) return -1;
  for (size_t i = 0; i < dot; ++i)
    if (key[i] < '0' || key[i] > '9') return -1;
  return std::stoll(key.substr(0, dot));
}

}  // namespace

dist::ProcessGroupPtr pool_routing_over_replicas(nn::Module& model, dist::ProcessGroup& group) {
  const auto mixtures = nn::mixtures_of_experts(model);
  if (mixtures.empty()) return nullptr;
  auto everyone = group.new_group(consecutive(0, group.size()));
  for (const auto& [prefix, moe] : mixtures) moe->pool_routing_over(everyone);
  return everyone;
}

ExpertParallelism::ExpertParallelism(dist::ProcessGroupPtr world, int ranks_per_group)
    : world_(std::move(world)), ranks_(ranks_per_group) {
  const int size = world_->size(), rank = world_->rank();
  TESSERA_CHECK(ranks_ >= 1 && size % ranks_ == 0, "[expert parallel] parallel.ep = ", ranks_,
                " must divide the world size ", size, " (the experts are spread over groups of that many ranks)");
  // Every rank creates every group, in the same order (new_group's contract).
  for (int first = 0; first < size; first += ranks_) {
    auto g = world_->new_group(consecutive(first, ranks_));
    if (rank >= first && rank < first + ranks_) group_ = g;
  }
  for (int column = 0; column < ranks_; ++column) {
    std::vector<int> members;
    for (int r = column; r < size; r += ranks_) members.push_back(r);
    auto g = world_->new_group(members);
    if (rank % ranks_ == column) replicas_ = g;
  }
}

std::set<std::string> ExpertParallelism::place(nn::Module& model) {
  auto mixtures = nn::mixtures_of_experts(model);
  TESSERA_CHECK(!mixtures.empty(), "[expert parallel] parallel.ep = ", ranks_, " but the model has no mixture of "
                "experts (set model.experts)");
  pool_routing_over_replicas(model, *world_);
  for (auto& [prefix, moe] : mixtures) {
    moe->place_experts(group_);
    experts_per_mixture_ = moe->config.experts;
  }
  for (auto& [name, p] : model.named_parameters()) {
    for (auto& [prefix, moe] : mixtures)
      if (name.starts_with(prefix) && nn::MixtureOfExperts::is_expert_parameter(name.substr(prefix.size()))) {
        expert_names_.insert(name);
        experts_.push_back(p);
      }
  }
  const nn::StateDict named = model.named_parameters();  // the optimizer's order
  for (size_t i = 0; i < named.size(); ++i)
    if (expert_names_.contains(named[i].first)) expert_indices_.insert(static_cast<int64_t>(i));
  return expert_names_;
}

void ExpertParallelism::reduce_gradients() {
  NoGradGuard no_grad;
  const float inv_world = 1.0f / static_cast<float>(world_->size());
  std::vector<Tensor> grads;
  int64_t total = 0;
  for (const Tensor& p : experts_) {
    Tensor g = p.grad();
    TESSERA_CHECK(g.defined(), "[expert parallel] an expert parameter has no gradient after backward on rank ",
                  world_->rank());
    grads.push_back(g);
    total += g.numel();
  }
  if (replicas_->size() > 1) {  // one all-reduce over the replicas for every expert tensor
    Tensor flat = Tensor::empty({total}, DType::Float32, grads.front().device());
    int64_t at = 0;
    for (Tensor& g : grads) {
      Tensor part = flat.slice(0, at, at + g.numel()).view(g.shape());
      copy_(part, g);
      at += g.numel();
    }
    replicas_->blocking_allreduce(flat);
    at = 0;
    for (Tensor& g : grads) {
      copy_(g, flat.slice(0, at, at + g.numel()).view(g.shape()));
      at += g.numel();
    }
  }
  for (Tensor& g : grads) mul_(g, inv_world);
}

void ExpertParallelism::clip_gradients(const std::vector<Tensor>& parameters, double max_norm) {
  double experts = 0.0, replicated = 0.0;
  for (size_t i = 0; i < parameters.size(); ++i)
    if (Tensor g = parameters[i].grad(); g.defined())
      (expert_indices_.contains(static_cast<int64_t>(i)) ? experts : replicated) += squared_norm(g);
  Tensor t = from_vector(std::vector<float>{static_cast<float>(experts)}, {1});
  group_->blocking_allreduce(t);
  NoGradGuard no_grad;
  optim::clip_grads_to(parameters, std::sqrt(replicated + t.to_vector<float>()[0]), max_norm);
}

Tensor ExpertParallelism::gathered(const Tensor& local) const {
  NoGradGuard no_grad;
  Tensor host = contiguous(local.detach().to(cpu_device()));
  Shape whole = host.shape();
  whole[0] *= ranks_;
  Tensor out = Tensor::empty(whole, host.dtype());
  group_->allgather(host, out)->wait();
  return out;
}

Tensor ExpertParallelism::own_slice(const Tensor& whole, const std::string& key) const {
  TESSERA_CHECK(whole.dim() >= 1 && whole.shape()[0] % ranks_ == 0, "[expert parallel] ", key, " has shape ",
                shape_str(whole.shape()), ": its experts (dimension 0) do not divide over ", ranks_, " ranks");
  const int64_t per_rank = whole.shape()[0] / ranks_, first = per_rank * group_->rank();
  NoGradGuard no_grad;
  return clone(whole.slice(0, first, first + per_rank));
}

bool ExpertParallelism::is_expert_tensor(const std::string& key) const { return expert_names_.contains(key); }

bool ExpertParallelism::is_expert_state(const std::string& key) const {
  const int64_t index = parameter_index(key);
  return index >= 0 && expert_indices_.contains(index);
}

nn::StateDict ExpertParallelism::gather(const nn::StateDict& local) const {
  nn::StateDict whole;
  for (const auto& [key, t] : local) whole.emplace_back(key, is_expert_tensor(key) ? gathered(t) : t);
  return whole;
}

nn::StateDict ExpertParallelism::cut(const nn::StateDict& whole) const {
  nn::StateDict mine;
  for (const auto& [key, t] : whole) mine.emplace_back(key, is_expert_tensor(key) ? own_slice(t, key) : t);
  return mine;
}

nn::StateDict ExpertParallelism::gather_optimizer(const nn::StateDict& local) const {
  nn::StateDict whole;
  for (const auto& [key, t] : local) whole.emplace_back(key, is_expert_state(key) && t.dim() >= 1 ? gathered(t) : t);
  return whole;
}

nn::StateDict ExpertParallelism::cut_optimizer(const nn::StateDict& whole) const {
  nn::StateDict mine;
  for (const auto& [key, t] : whole) mine.emplace_back(key, is_expert_state(key) && t.dim() >= 1 ? own_slice(t, key) : t);
  return mine;
}

std::string ExpertParallelism::describe() const {
  const int group_index = world_->rank() / ranks_, first_rank = group_index * ranks_;
  const int64_t per_rank = experts_per_mixture_ / ranks_, first = per_rank * group_->rank();
  return "expert group " + std::to_string(group_index) + " of " + std::to_string(world_->size() / ranks_) +
         " (ranks " + std::to_string(first_rank) + "-" + std::to_string(first_rank + ranks_ - 1) + "), experts " +
         std::to_string(first) + "-" + std::to_string(first + per_rank - 1) + " of " +
         std::to_string(experts_per_mixture_) + " per mixture";
}

}  // namespace tessera::train
