#include "tessera/optim/lars.h"

#include <cmath>

namespace tessera::optim {

namespace {
// L2 norm accumulated in double: a layer's norm sums up to millions of squares.
double l2_norm(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t k = 0; k < n; ++k) s += static_cast<double>(x[k]) * x[k];
  return std::sqrt(s);
}
}  // namespace

LARS::LARS(std::vector<Tensor> params, LARSOptions o) : Optimizer(std::move(params), o.lr), options(o) {
  TESSERA_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "[LARS] momentum and weight_decay must be >= 0, got ",
                o.momentum, ", ", o.weight_decay);
  TESSERA_CHECK(o.trust_coefficient > 0 && o.eps >= 0, "[LARS] trust_coefficient must be > 0 and eps >= 0, got ",
                o.trust_coefficient, ", ", o.eps);
}

void LARS::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g_t = gradient_to_apply(i);
    if (!g_t.defined()) continue;
    float* p = params_[i].data<float>();
    const float* g = g_t.data<float>();
    const int64_t n = params_[i].numel();
    const bool adapt = !(options.exclude_bias_and_norm && params_[i].dim() <= 1);
    const double wd = adapt ? options.weight_decay : 0.0;
    double trust = 1.0;
    if (adapt) {
      const double w_norm = l2_norm(p, n), g_norm = l2_norm(g, n);
      if (w_norm > 0.0 && g_norm > 0.0)
        trust = options.trust_coefficient * w_norm / (g_norm + wd * w_norm + options.eps);
    }
    // lr as float32, the precision state_dict keeps it in, so a resumed run takes identical steps.
    const float local_lr = static_cast<float>(lr_) * static_cast<float>(trust), wdf = static_cast<float>(wd),
                mu = static_cast<float>(options.momentum);
    if (mu == 0.0f) {
      for (int64_t k = 0; k < n; ++k) p[k] -= local_lr * (g[k] + wdf * p[k]);
      continue;
    }
    float* v = state(i, "momentum_buffer").data<float>();
    for (int64_t k = 0; k < n; ++k) {
      v[k] = mu * v[k] + local_lr * (g[k] + wdf * p[k]);
      p[k] -= v[k];
    }
  }
  ++step_count_;
}

}  // namespace tessera::optim
