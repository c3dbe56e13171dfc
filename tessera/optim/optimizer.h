// Optimizer base: the parameters it updates, the learning rate (schedulers set it), a step count,
// and per-parameter state saved as "<index>.<buffer>" tensors in state_dict (world-size independent).
#pragma once
#include <vector>

#include "tessera/nn/module.h"

namespace tessera::optim {

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // Updates every parameter that has a .grad (no autograd is recorded).
  virtual void step() = 0;
  void zero_grad(bool set_to_none = true);
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_count_; }
  const std::vector<Tensor>& params() const { return params_; }

  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 protected:
  // Per-parameter state buffer `name` (allocated zero on first use).
  Tensor& state(size_t index, const std::string& name);
  bool has_state(size_t index, const std::string& name) const;
  // The contiguous gradient of parameter `index`, undefined when it has none; otherwise the
  // parameter is marked modified (autograd's version counter), since step() is about to write it.
  Tensor gradient_to_apply(size_t index);
  std::vector<Tensor> params_;
  double lr_;
  int64_t step_count_ = 0;

 private:
  std::vector<std::vector<std::pair<std::string, Tensor>>> state_;
};

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace tessera::optim
