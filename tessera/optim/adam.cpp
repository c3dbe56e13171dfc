#include "tessera/optim/adam.h"

#include <cmath>

namespace tessera::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions o, bool decoupled)
    : Optimizer(std::move(params), o.lr), options(o), decoupled_(decoupled) {
  TESSERA_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "[Adam] betas must be in [0, 1), got ",
                o.beta1, ", ", o.beta2);
  TESSERA_CHECK(o.eps >= 0 && o.weight_decay >= 0, "[Adam] eps and weight_decay must be >= 0");
}

void Adam::step() {
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  const float lr = static_cast<float>(lr_), b1 = static_cast<float>(options.beta1), b2 = static_cast<float>(options.beta2),
              eps = static_cast<float>(options.eps), wd = static_cast<float>(options.weight_decay);
  const float bias1 = static_cast<float>(1.0 - std::pow(options.beta1, t));
  const float bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options.beta2, t)));
  const float step_size = lr / bias1;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g_t = gradient_to_apply(i);
    if (!g_t.defined()) continue;
    float* p = params_[i].data<float>();
    const float* g = g_t.data<float>();
    float* m = state(i, "exp_avg").data<float>();
    float* v = state(i, "exp_avg_sq").data<float>();
    const int64_t n = params_[i].numel();
    for (int64_t k = 0; k < n; ++k) {
      float grad = g[k];
      if (decoupled_) p[k] *= 1.0f - lr * wd;
      else grad += wd * p[k];
      m[k] = b1 * m[k] + (1.0f - b1) * grad;
      v[k] = b2 * v[k] + (1.0f - b2) * grad * grad;
      p[k] -= step_size * m[k] / (std::sqrt(v[k]) / bias2_sqrt + eps);
    }
  }
}

}  // namespace tessera::optim
