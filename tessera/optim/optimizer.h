// Optimizer base: the parameters it updates, the learning rate (schedulers set it), a step count,
// and per-parameter state saved as "<index>.<buffer>" tensors in state_dict (world-size independent).
#pragma once
#include <functional>
#include <vector>

#include "tessera/nn/module.h"
#include "tessera/ops/ops.h"

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
  // A layout change under live membership (ZeRO's pieces are cut again at a new world size): the
  // optimizer updates `params` from now on. Its per-parameter state and partition are dropped;
  // load_state_dict gives it the state of the new pieces.
  void replace_params(std::vector<Tensor> params);

  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

  // Sharded data parallelism (ZeRO) gives each rank's optimizer one piece of every model parameter
  // (a 1-D slice, possibly empty). The per-tensor norms LARS and LAMB scale by are then those of the
  // whole tensors: `sum_over_pieces` adds a vector of per-parameter sums of squares over every
  // rank's pieces in place (an all-reduce), and `whole_dims` gives each model parameter's number of
  // dimensions (LARS leaves 1-D ones alone). Element-wise optimizers (SGD, Adam, AdamW) ignore it.
  struct Partition {
    std::function<void(std::vector<double>&)> sum_over_pieces;
    std::vector<int64_t> whole_dims;
  };
  void set_partition(Partition partition);

 protected:
  // Per-parameter state buffer `name` (allocated zero, on the parameter's device, on first use): a
  // handle sharing the buffer's storage, so that it stays valid as more buffers are added.
  Tensor state(size_t index, const std::string& name);
  bool has_state(size_t index, const std::string& name) const;
  // The contiguous gradient of parameter `index`, undefined when it has none. (The fused update ops
  // of ops.h mark the parameter modified, autograd's version counter, as they write it.)
  Tensor gradient_to_apply(size_t index);
  // The whole-tensor sums of per-parameter sums of squares (unchanged without a partition), and a
  // parameter's number of dimensions as the model has it.
  void sum_over_pieces(std::vector<double>& sums) const;
  int64_t whole_dim(size_t index) const;
  std::vector<Tensor> params_;
  double lr_;
  int64_t step_count_ = 0;

 private:
  std::vector<std::vector<std::pair<std::string, Tensor>>> state_;
  Partition partition_;
};

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before.
// Scales every gradient of `params` by max_norm / (norm + 1e-6) when norm, their global norm
// however it was summed (over ranks, shards), is above max_norm.
void clip_grads_to(const std::vector<Tensor>& params, double norm, double max_norm);
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace tessera::optim
