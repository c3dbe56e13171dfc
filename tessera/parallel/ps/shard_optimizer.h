// The optimizer a parameter server runs on its shard. Dense pieces go through tessera's own
// optimizers (optim::SGD, optim::Adam, optim::AdamW), so synchronous PS training does exactly the
// arithmetic of single-process training, element for element. Sparse pieces (embedding rows) are
// updated row by row by the same fused update code (backend/cpu/optimizer_update.h), only where a
// gradient arrived: momentum and Adam's moments of an untouched
// row stay as they are ("lazy" updates, as TensorFlow's sparse apply ops and LazyAdam). With plain
// SGD and no weight decay that equals the dense update; with momentum or Adam it is the standard
// sparse approximation, and what keeps a step's cost proportional to the rows touched.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"

namespace tessera::parallel::ps {

struct OptimizerSpec {
  std::string name = "sgd";  // sgd | adam | adamw
  double momentum = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

class ShardOptimizer {
 public:
  // `dense`: 1-D float32 value tensors; `sparse`: (rows, row_size) value tensors.
  ShardOptimizer(const OptimizerSpec& spec, std::vector<Tensor> dense, std::vector<Tensor> sparse);
  ~ShardOptimizer();

  // Applies the gradients set (set_grad) on the dense tensors.
  void step_dense(double lr);
  // Applies `grads` (rows.size() x row_size) to rows `rows` (local, distinct) of sparse tensor `index`.
  void step_rows(size_t index, const std::vector<int64_t>& rows, const float* grads, double lr);

  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 private:
  OptimizerSpec spec_;
  std::unique_ptr<optim::Optimizer> dense_;
  std::vector<Tensor> sparse_;
  std::vector<Tensor> momentum_, exp_avg_, exp_avg_sq_;  // per sparse tensor, allocated on first use
  std::vector<int64_t> sparse_steps_;                     // Adam's bias correction, per sparse tensor
};

}  // namespace tessera::parallel::ps
