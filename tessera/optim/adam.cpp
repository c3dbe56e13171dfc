#include "tessera/optim/adam.h"

#include <cmath>

#include "tessera/ops/ops.h"

namespace tessera::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions o, bool decoupled)
    : Optimizer(std::move(params), o.lr), options(o), decoupled_(decoupled) {
  TESSERA_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "[Adam] betas must be in [0, 1), got ",
                o.beta1, ", ", o.beta2);
  TESSERA_CHECK(o.eps >= 0 && o.weight_decay >= 0, "[Adam] eps and weight_decay must be >= 0");
}

AdamStep adam_step(const AdamOptions& o, double lr_d, int64_t step, bool decoupled) {
  const double t = static_cast<double>(step);
  const float lr = static_cast<float>(lr_d);
  const float bias1 = static_cast<float>(1.0 - std::pow(o.beta1, t));
  const float bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, t)));
  return {lr / bias1, bias2_sqrt, static_cast<float>(o.beta1), static_cast<float>(o.beta2),
          static_cast<float>(o.eps), static_cast<float>(o.weight_decay), lr, decoupled};
}

void Adam::step() {
  ++step_count_;
  const AdamStep constants = adam_step(options, lr_, step_count_, decoupled_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = gradient_to_apply(i);
    if (!g.defined()) continue;
    Tensor exp_avg = state(i, "exp_avg"), exp_avg_sq = state(i, "exp_avg_sq");
    adam_update_(params_[i], g, exp_avg, exp_avg_sq, constants);
  }
}

}  // namespace tessera::optim
