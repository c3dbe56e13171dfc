#include "tessera/train/local_sgd_strategy.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::train {

namespace {

constexpr const char* kOuterMomentum = "outer_momentum";

}  // namespace

LocalSgdStrategy::LocalSgdStrategy(const TrainConfig& config, dist::ProcessGroupPtr group)
    : config_(config), group_(std::move(group)) {
  TESSERA_CHECK(group_, "[local sgd] needs the job's process group");
  TESSERA_CHECK(config_.distributed.local_sgd >= 1, "[local sgd] distributed.local_sgd must be at least 1");
}

std::vector<Tensor> LocalSgdStrategy::prepare(std::shared_ptr<nn::Module> model) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : model->state_dict()) group_->blocking_broadcast(t, 0);  // buffers too
  params_ = LocalStrategy::prepare(std::move(model));
  int64_t total = 0;
  for (const Tensor& p : params_) {
    TESSERA_CHECK(p.dtype() == DType::Float32, "[local sgd] parameters must be float32");
    shared_.push_back(clone(p));
    momentum_.push_back(zeros(p.shape()));
    total += p.numel();
  }
  flat_ = zeros({total});
  return params_;
}

void LocalSgdStrategy::optimizer_step(optim::Optimizer& optimizer) {
  optimizer.step();
  if (++inner_steps_ >= config_.distributed.local_sgd) meet();
}

void LocalSgdStrategy::meet() {
  if (inner_steps_ == 0) return;  // every replica still holds the shared parameters
  autograd::NoGradGuard no_grad;
  // Δ = θ − mean_r θ_r: each rank's θ − θ_r, summed and divided by the world.
  int64_t at = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor slot = flat_.slice(0, at, at + params_[i].numel());
    copy_(slot, sub(shared_[i], params_[i]).view({params_[i].numel()}));
    at += params_[i].numel();
  }
  group_->blocking_allreduce(flat_, dist::ReduceOp::Sum);
  bytes_ += flat_.numel() * static_cast<int64_t>(sizeof(float));
  const float inv_world = 1.0f / static_cast<float>(world_size());
  const float lr = static_cast<float>(config_.distributed.outer_lr);
  const float mu = static_cast<float>(config_.distributed.outer_momentum);
  at = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor delta = mul(flat_.slice(0, at, at + params_[i].numel()).view(params_[i].shape()), inv_world);
    at += params_[i].numel();
    // v = μ v + Δ;  θ -= lr (Δ + μ v)  (Nesterov; with μ = 0, θ -= lr Δ)
    mul_(momentum_[i], mu);
    add_(momentum_[i], delta);
    add_(shared_[i], delta, -lr);
    add_(shared_[i], momentum_[i], -lr * mu);
    Tensor p = params_[i];
    copy_(p, shared_[i]);
  }
  inner_steps_ = 0;
  ++meetings_;
}

nn::StateDict LocalSgdStrategy::model_state() {
  meet();
  return LocalStrategy::model_state();
}

nn::StateDict LocalSgdStrategy::optimizer_state(const optim::Optimizer& optimizer) {
  nn::StateDict state = optimizer.state_dict();
  for (size_t i = 0; i < momentum_.size(); ++i) state.emplace_back(std::to_string(i) + "." + kOuterMomentum, momentum_[i]);
  return state;
}

void LocalSgdStrategy::load_model_state(const nn::StateDict& state) {
  LocalStrategy::load_model_state(state);
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) copy_(shared_[i], params_[i]);
  inner_steps_ = 0;
}

void LocalSgdStrategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  autograd::NoGradGuard no_grad;
  nn::StateDict inner;
  const std::string suffix = std::string(".") + kOuterMomentum;
  for (const auto& [key, t] : state) {
    if (key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const size_t i = std::stoul(key.substr(0, key.size() - suffix.size()));
      TESSERA_CHECK(i < momentum_.size() && t.shape() == momentum_[i].shape(), "[local sgd] '", key,
                    "' does not match the model's parameters");
      copy_(momentum_[i], t);
      continue;
    }
    inner.emplace_back(key, t);
  }
  optimizer.load_state_dict(inner);
}

void LocalSgdStrategy::add_step_metrics(nlohmann::json& record) const {
  LocalStrategy::add_step_metrics(record);
  record["comm_bytes_total"] = bytes_;
  record["local_sgd_meetings"] = meetings_;
}

std::string LocalSgdStrategy::describe() const {
  const auto& d = config_.distributed;
  return detail::concat("[local sgd] ", world_size(), " replicas meet every ", d.local_sgd,
                        " steps: outer SGD, lr ", d.outer_lr, ", Nesterov momentum ", d.outer_momentum);
}

}  // namespace tessera::train
