#include "tessera/optim/lamb.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "tessera/ops/ops.h"

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
  const LambStep constants{static_cast<float>(options.beta1),         static_cast<float>(options.beta2),
                           static_cast<float>(1.0 - options.beta1),   static_cast<float>(1.0 - options.beta2),
                           static_cast<float>(1.0 - std::pow(options.beta1, t)),
                           static_cast<float>(1.0 - std::pow(options.beta2, t)),
                           static_cast<float>(options.eps),           static_cast<float>(options.weight_decay)};
  // lr as float32, the precision state_dict keeps it in, so a resumed run takes identical steps.
  const float lr = static_cast<float>(lr_);
  // Two passes, so that the norms can be whole-tensor ones where the parameters are ZeRO pieces
  // (Optimizer::Partition): the first updates the moments and sums ||w||² and ||u||² per tensor; the
  // second recomputes u from the same values (bit for bit) and applies it. Recomputing costs less
  // than keeping u for every parameter.
  const size_t count = params_.size();
  std::vector<Tensor> grads(count);
  std::vector<double> sums(2 * count, 0.0);  // ||w||², ||u||² per parameter
  for (size_t i = 0; i < count; ++i) {
    grads[i] = gradient_to_apply(i);
    if (!grads[i].defined()) continue;
    Tensor exp_avg = state(i, "exp_avg"), exp_avg_sq = state(i, "exp_avg_sq");
    std::tie(sums[2 * i], sums[2 * i + 1]) = lamb_moments_(params_[i], grads[i], exp_avg, exp_avg_sq, constants);
  }
  sum_over_pieces(sums);
  for (size_t i = 0; i < count; ++i) {
    if (!grads[i].defined()) continue;
    double w_norm = std::sqrt(sums[2 * i]), u_norm = std::sqrt(sums[2 * i + 1]);
    if (options.weight_norm_max > 0) w_norm = std::min(w_norm, options.weight_norm_max);
    const double ratio = w_norm > 0.0 && u_norm > 0.0 ? w_norm / u_norm : 1.0;
    lamb_apply_(params_[i], state(i, "exp_avg"), state(i, "exp_avg_sq"), constants, lr * static_cast<float>(ratio));
  }
}

}  // namespace tessera::optim
