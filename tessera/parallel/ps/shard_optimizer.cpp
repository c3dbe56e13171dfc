#include "tessera/parallel/ps/shard_optimizer.h"

#include <cmath>

#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/sgd.h"

namespace tessera::parallel::ps {

ShardOptimizer::ShardOptimizer(const OptimizerSpec& spec, std::vector<Tensor> dense, std::vector<Tensor> sparse)
    : spec_(spec), sparse_(std::move(sparse)) {
  TESSERA_CHECK(spec.name == "sgd" || spec.name == "adam" || spec.name == "adamw", "[ps] the servers run sgd, adam "
                "or adamw; got optimizer '", spec.name, "'");
  if (spec.name == "sgd")
    dense_ = std::make_unique<optim::SGD>(std::move(dense),
                                          optim::SGDOptions{1.0, spec.momentum, 0.0, spec.weight_decay, spec.nesterov});
  else
    dense_ = std::make_unique<optim::Adam>(std::move(dense),
                                           optim::AdamOptions{1.0, spec.beta1, spec.beta2, spec.eps, spec.weight_decay},
                                           spec.name == "adamw");
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

void ShardOptimizer::step_rows(size_t index, const std::vector<int64_t>& rows, const float* grads, double lr_d) {
  Tensor& values = sparse_.at(index);
  const int64_t row_size = values.shape()[1];
  float* p = values.data<float>();
  const float lr = static_cast<float>(lr_d), wd = static_cast<float>(spec_.weight_decay);
  if (spec_.name == "sgd") {
    const float mu = static_cast<float>(spec_.momentum);
    if (mu > 0 && !momentum_[index].defined()) momentum_[index] = zeros(values.shape());
    float* buf = mu > 0 ? momentum_[index].data<float>() : nullptr;
    for (size_t i = 0; i < rows.size(); ++i) {
      float* pr = p + rows[i] * row_size;
      const float* g = grads + static_cast<int64_t>(i) * row_size;
      float* br = buf ? buf + rows[i] * row_size : nullptr;
      for (int64_t k = 0; k < row_size; ++k) {
        float d = g[k] + wd * pr[k];
        if (!br) {
          pr[k] -= lr * d;
          continue;
        }
        br[k] = mu * br[k] + d;  // a zero buffer makes the first step torch's buf = d
        pr[k] -= lr * (spec_.nesterov ? d + mu * br[k] : br[k]);
      }
    }
    return;
  }
  // Adam / AdamW, as optim::Adam, on the touched rows only.
  if (!exp_avg_[index].defined()) {
    exp_avg_[index] = zeros(values.shape());
    exp_avg_sq_[index] = zeros(values.shape());
  }
  const double t = static_cast<double>(++sparse_steps_[index]);
  const float b1 = static_cast<float>(spec_.beta1), b2 = static_cast<float>(spec_.beta2),
              eps = static_cast<float>(spec_.eps);
  const float step_size = lr / static_cast<float>(1.0 - std::pow(spec_.beta1, t));
  const float bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(spec_.beta2, t)));
  const bool decoupled = spec_.name == "adamw";
  float* m = exp_avg_[index].data<float>();
  float* v = exp_avg_sq_[index].data<float>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t off = rows[i] * row_size;
    const float* g = grads + static_cast<int64_t>(i) * row_size;
    for (int64_t k = 0; k < row_size; ++k) {
      float grad = g[k];
      if (decoupled) p[off + k] *= 1.0f - lr * wd;
      else grad += wd * p[off + k];
      m[off + k] = b1 * m[off + k] + (1.0f - b1) * grad;
      v[off + k] = b2 * v[off + k] + (1.0f - b2) * grad * grad;
      p[off + k] -= step_size * m[off + k] / (std::sqrt(v[off + k]) / bias2_sqrt + eps);
    }
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
