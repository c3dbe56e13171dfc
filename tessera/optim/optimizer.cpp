#include "tessera/optim/optimizer.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : lr_(lr) {
  TESSERA_CHECK(lr >= 0.0, "[Optimizer] learning rate must be >= 0, got ", lr);
  replace_params(std::move(params));
}

void Optimizer::replace_params(std::vector<Tensor> params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    TESSERA_CHECK(p.defined() && p.dtype() == DType::Float32 && p.is_contiguous() && p.is_leaf(),
                  "[Optimizer] parameter ", i, " must be a contiguous float32 leaf tensor");
  }
  params_ = std::move(params);
  state_.assign(params_.size(), {});
  partition_ = {};
}

void Optimizer::zero_grad(bool set_to_none) { nn::zero_grad(params_, set_to_none); }

Tensor Optimizer::state(size_t index, const std::string& name) {
  for (auto& [n, t] : state_[index])
    if (n == name) return t;
  state_[index].emplace_back(name, zeros_like(params_[index]));
  return state_[index].back().second;
}

Tensor Optimizer::gradient_to_apply(size_t index) {
  Tensor g = params_[index].grad();
  return g.defined() ? g.contiguous() : g;
}

void Optimizer::set_partition(Partition partition) {
  TESSERA_CHECK(partition.whole_dims.size() == params_.size(), "[Optimizer::set_partition] ",
                partition.whole_dims.size(), " parameter dimensions for ", params_.size(), " parameters");
  partition_ = std::move(partition);
}

void Optimizer::sum_over_pieces(std::vector<double>& sums) const {
  if (partition_.sum_over_pieces) partition_.sum_over_pieces(sums);
}

int64_t Optimizer::whole_dim(size_t index) const {
  return partition_.whole_dims.empty() ? params_[index].dim() : partition_.whole_dims[index];
}

bool Optimizer::has_state(size_t index, const std::string& name) const {
  for (auto& [n, t] : state_[index])
    if (n == name) return true;
  return false;
}

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict out;
  out.emplace_back("step", from_vector(std::vector<int64_t>{step_count_}, {}));
  out.emplace_back("lr", from_vector(std::vector<float>{static_cast<float>(lr_)}, {}));
  for (size_t i = 0; i < state_.size(); ++i)
    for (auto& [n, t] : state_[i]) out.emplace_back(std::to_string(i) + "." + n, t);
  return out;
}

void Optimizer::load_state_dict(const nn::StateDict& state) {
  NoGradGuard no_grad;
  for (auto& s : state_) s.clear();
  for (const auto& [key, t] : state) {
    if (key == "step") {
      step_count_ = t.item<int64_t>();
      continue;
    }
    if (key == "lr") {
      lr_ = t.item<float>();
      continue;
    }
    size_t dot = key.find('.');
    TESSERA_CHECK(dot != std::string::npos, "[Optimizer::load_state_dict] unexpected key '", key, "'");
    size_t index = std::stoul(key.substr(0, dot));
    TESSERA_CHECK(index < params_.size(), "[Optimizer::load_state_dict] key '", key, "' refers to parameter ", index,
                  " but the optimizer has ", params_.size());
    TESSERA_CHECK(t.shape() == params_[index].shape(), "[Optimizer::load_state_dict] '", key, "' has shape ",
                  shape_str(t.shape()), " but parameter ", index, " has ", shape_str(params_[index].shape()));
    // Onto the parameter's device (a checkpoint is read on the host; the model may train on a GPU).
    const Device device = params_[index].device();
    state_[index].emplace_back(key.substr(dot + 1), t.device() == device ? clone(t) : t.to(device));
  }
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  double total = 0.0;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    total += squared_norm(g);  // the kernel table's, on the gradient's device
  }
  double norm = std::sqrt(total);
  clip_grads_to(params, norm, max_norm);
  return norm;
}

void clip_grads_to(const std::vector<Tensor>& params, double norm, double max_norm) {
  if (norm <= max_norm || norm <= 0.0) return;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (g.defined()) mul_(g, scale);
  }
}

}  // namespace tessera::optim
