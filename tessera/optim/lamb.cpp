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
  // Two passes, so that the norms can be whole-tensor ones where the parameters are ZeRO pieces
  // (Optimizer::Partition): the first updates the moments and sums ||w||² and ||u||² per tensor; the
  // second recomputes u from the same values (bit for bit) and applies it. Recomputing costs less
  // than keeping u for every parameter.
  auto update = [&](float m, float v, float p) { return (m / bias1) / (std::sqrt(v / bias2) + eps) + wd * p; };
  const size_t count = params_.size();
  std::vector<Tensor> grads(count);
  std::vector<double> sums(2 * count, 0.0);  // ||w||², ||u||² per parameter, in double: millions of squares
  for (size_t i = 0; i < count; ++i) {
    grads[i] = gradient_to_apply(i);
    if (!grads[i].defined()) continue;
    const float* p = params_[i].data<float>();
    const float* g = grads[i].data<float>();
    float* m = state(i, "exp_avg").data<float>();
    float* v = state(i, "exp_avg_sq").data<float>();
    const int64_t n = params_[i].numel();
    double w_sq = 0.0, u_sq = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      m[k] = b1 * m[k] + one_minus_b1 * g[k];
      v[k] = b2 * v[k] + one_minus_b2 * g[k] * g[k];
      const float u = update(m[k], v[k], p[k]);
      w_sq += static_cast<double>(p[k]) * p[k];
      u_sq += static_cast<double>(u) * u;
    }
    sums[2 * i] = w_sq, sums[2 * i + 1] = u_sq;
  }
  sum_over_pieces(sums);
  for (size_t i = 0; i < count; ++i) {
    if (!grads[i].defined()) continue;
    double w_norm = std::sqrt(sums[2 * i]), u_norm = std::sqrt(sums[2 * i + 1]);
    if (options.weight_norm_max > 0) w_norm = std::min(w_norm, options.weight_norm_max);
    const double ratio = w_norm > 0.0 && u_norm > 0.0 ? w_norm / u_norm : 1.0;
    const float step = lr * static_cast<float>(ratio);
    float* p = params_[i].data<float>();
    const float* m = state(i, "exp_avg").data<float>();
    const float* v = state(i, "exp_avg_sq").data<float>();
    const int64_t n = params_[i].numel();
    for (int64_t k = 0; k < n; ++k) p[k] -= step * update(m[k], v[k], p[k]);
  }
}

}  // namespace tessera::optim
