#include "tessera/parallel/ps/shard_optimizer.h"

#include "tessera/backend/cpu/optimizer_update.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/sgd.h"

namespace tessera::parallel::ps {

namespace {
// The servers' optimizer as the workers' optim:: options (lr 1: each step's lr comes with the push).
optim::SGDOptions sgd_options(const OptimizerSpec& spec) {
  return optim::SGDOptions{1.0, spec.momentum, 0.0, spec.weight_decay, spec.nesterov};
}
optim::AdamOptions adam_options(const OptimizerSpec& spec) {
  return optim::AdamOptions{1.0, spec.beta1, spec.beta2, spec.eps, spec.weight_decay};
}
}  // namespace

ShardOptimizer::ShardOptimizer(const OptimizerSpec& spec, std::vector<Tensor> dense, std::vector<Tensor> sparse)
    : spec_(spec), sparse_(std::move(sparse)) {
  TESSERA_CHECK(spec.name == "sgd" || spec.name == "adam" || spec.name == "adamw", "[ps] the servers run sgd, adam "
                "or adamw; got optimizer '", spec.name, "'");
  if (spec.name == "sgd") dense_ = std::make_unique<optim::SGD>(std::move(dense), sgd_options(spec));
  else dense_ = std::make_unique<optim::Adam>(std::move(dense), adam_options(spec), spec.name == "adamw");
  momentum_.resize(sparse_.size());
  exp_avg_.resize(sparse_.size());
  exp_avg_sq_.resize(sparse_.size());
  sparse_steps_.assign(sparse_.size(), 0);
}

ShardOptimizer::~ShardOptimizer() = default;

void ShardOptimizer::step_dense(double lr) {
  if (dense_->params().empty()) return;
  dense_->set_lr(lr);
  dense_->step();
}

// The rows go through the fused updates' own arithmetic (backend/cpu/optimizer_update.h), one row
// at a time: a server's shards are in host memory.
void ShardOptimizer::step_rows(size_t index, const std::vector<int64_t>& rows, const float* grads, double lr) {
  Tensor& values = sparse_.at(index);
  const int64_t row_size = values.shape()[1];
  float* p = values.data<float>();
  if (spec_.name == "sgd") {
    const optim::SGDOptions options = sgd_options(spec_);
    if (options.momentum > 0 && !momentum_[index].defined()) momentum_[index] = zeros(values.shape());
    float* buf = options.momentum > 0 ? momentum_[index].data<float>() : nullptr;
    // A zero buffer makes the first step torch's buf = g, so no row needs `first`.
    const SgdStep step = optim::sgd_step(options, lr, false);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t off = rows[i] * row_size;
      cpu::sgd_update(p + off, grads + static_cast<int64_t>(i) * row_size, buf ? buf + off : nullptr, row_size, step);
    }
    return;
  }
  // Adam / AdamW on the touched rows only, with this tensor's own step count.
  if (!exp_avg_[index].defined()) {
    exp_avg_[index] = zeros(values.shape());
    exp_avg_sq_[index] = zeros(values.shape());
  }
  const AdamStep step = optim::adam_step(adam_options(spec_), lr, ++sparse_steps_[index], spec_.name == "adamw");
  float* m = exp_avg_[index].data<float>();
  float* v = exp_avg_sq_[index].data<float>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t off = rows[i] * row_size;
    cpu::adam_update(p + off, grads + static_cast<int64_t>(i) * row_size, m + off, v + off, row_size, step);
  }
}

nn::StateDict ShardOptimizer::state_dict() const {
  nn::StateDict out;
  for (auto& [name, t] : dense_->state_dict()) out.emplace_back("dense." + name, t);
  for (size_t i = 0; i < sparse_.size(); ++i) {
    const std::string prefix = "sparse." + std::to_string(i) + ".";
    out.emplace_back(prefix + "step", from_vector(std::vector<int64_t>{sparse_steps_[i]}, {}));
    if (momentum_[i].defined()) out.emplace_back(prefix + "momentum_buffer", momentum_[i]);
    if (exp_avg_[i].defined()) {
      out.emplace_back(prefix + "exp_avg", exp_avg_[i]);
      out.emplace_back(prefix + "exp_avg_sq", exp_avg_sq_[i]);
    }
  }
  return out;
}

void ShardOptimizer::load_state_dict(const nn::StateDict& state) {
  nn::StateDict dense;
  for (const auto& [key, t] : state) {
    if (key.rfind("dense.", 0) == 0) {
      dense.emplace_back(key.substr(6), t);
      continue;
    }
    TESSERA_CHECK(key.rfind("sparse.", 0) == 0, "[ps] unexpected optimizer state '", key, "' in a server checkpoint");
    size_t dot = key.find('.', 7);
    TESSERA_CHECK(dot != std::string::npos, "[ps] unexpected optimizer state '", key, "'");
    size_t i = std::stoul(key.substr(7, dot - 7));
    std::string what = key.substr(dot + 1);
    TESSERA_CHECK(i < sparse_.size(), "[ps] optimizer state '", key, "' for sparse piece ", i, " of ", sparse_.size());
    if (what == "step") {
      sparse_steps_[i] = t.item<int64_t>();
      continue;
    }
    TESSERA_CHECK(t.shape() == sparse_[i].shape(), "[ps] optimizer state '", key, "' has the wrong shape");
    Tensor copy = clone(t);
    if (what == "momentum_buffer") momentum_[i] = copy;
    else if (what == "exp_avg") exp_avg_[i] = copy;
    else if (what == "exp_avg_sq") exp_avg_sq_[i] = copy;
    else TESSERA_CHECK(false, "[ps] unexpected optimizer state '", key, "'");
  }
  dense_->load_state_dict(dense);
}

}  // namespace tessera::parallel::ps
