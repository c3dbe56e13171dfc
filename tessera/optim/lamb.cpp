#include "tessera/optim/lamb.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::optim {

LAMB::LAMB(std::vector<Tensor> params, LAMBOptions o) : Optimizer(std::move(params), o.lr), options(o) {
  TESSERA_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "[LAMB] betas must be in [0, 1), got ",
                o.beta1, ", ", o.beta2);
  TESSERA_CHECK(o.eps >= 0 && o.weight_decay >= 0 && o.weight_norm_max >= 0,
                "[LAMB] eps, weight_decay and weight_norm_max must be >= 0, got ", o.eps, ", ", o.weight_decay, ", ",
                o.weight_norm_max);
}

void LAMB::step() {
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  // 1 - beta computed in double: 1 - 0.999f is off by 1e-5 relative, which would bias v by as much.
  const float b1 = static_cast<float>(options.beta1), b2 = static_cast<float>(options.beta2),
              one_minus_b1 = static_cast<float>(1.0 - options.beta1), one_minus_b2 = static_cast<float>(1.0 - options.beta2),
              eps = static_cast<float>(options.eps), wd = static_cast<float>(options.weight_decay);
  // lr as float32, the precision state_dict keeps it in, so a resumed run takes identical steps.
  const float lr = static_cast<float>(lr_);
  const float bias1 = static_cast<float>(1.0 - std::pow(options.beta1, t));
  const float bias2 = static_cast<float>(1.0 - std::pow(options.beta2, t));
  std::vector<float> u;  // the update direction, kept because the ratio needs its norm first
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g_t = gradient_to_apply(i);
    if (!g_t.defined()) continue;
    float* p = params_[i].data<float>();
    const float* g = g_t.data<float>();
    float* m = state(i, "exp_avg").data<float>();
    float* v = state(i, "exp_avg_sq").data<float>();
    const int64_t n = params_[i].numel();
    u.resize(static_cast<size_t>(n));
    double w_sq = 0.0, u_sq = 0.0;  // norms in double: a layer sums up to millions of squares
    for (int64_t k = 0; k < n; ++k) {
      m[k] = b1 * m[k] + one_minus_b1 * g[k];
      v[k] = b2 * v[k] + one_minus_b2 * g[k] * g[k];
      u[k] = (m[k] / bias1) / (std::sqrt(v[k] / bias2) + eps) + wd * p[k];
      w_sq += static_cast<double>(p[k]) * p[k];
      u_sq += static_cast<double>(u[k]) * u[k];
    }
    double w_norm = std::sqrt(w_sq), u_norm = std::sqrt(u_sq);
    if (options.weight_norm_max > 0) w_norm = std::min(w_norm, options.weight_norm_max);
    const double ratio = w_norm > 0.0 && u_norm > 0.0 ? w_norm / u_norm : 1.0;
    const float step = lr * static_cast<float>(ratio);
    for (int64_t k = 0; k < n; ++k) p[k] -= step * u[k];
  }
}

}  // namespace tessera::optim
