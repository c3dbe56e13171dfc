#include "tessera/optim/lars.h"

#include <cmath>

#include "tessera/ops/ops.h"

namespace tessera::optim {

LARS::LARS(std::vector<Tensor> params, LARSOptions o) : Optimizer(std::move(params), o.lr), options(o) {
  TESSERA_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "[LARS] momentum and weight_decay must be >= 0, got ",
                o.momentum, ", ", o.weight_decay);
  TESSERA_CHECK(o.trust_coefficient > 0 && o.eps >= 0, "[LARS] trust_coefficient must be > 0 and eps >= 0, got ",
                o.trust_coefficient, ", ", o.eps);
}

void LARS::step() {
  // Norms first, for every tensor, so that they can be whole-tensor ones where the parameters are
  // ZeRO pieces (Optimizer::Partition); then the updates.
  const size_t count = params_.size();
  std::vector<Tensor> grads(count);
  std::vector<double> sums(2 * count, 0.0);  // ||w||², ||g||² per parameter
  for (size_t i = 0; i < count; ++i) {
    grads[i] = gradient_to_apply(i);
    if (!grads[i].defined()) continue;
    sums[2 * i] = squared_norm(params_[i]);
    sums[2 * i + 1] = squared_norm(grads[i]);
  }
  sum_over_pieces(sums);
  for (size_t i = 0; i < count; ++i) {
    if (!grads[i].defined()) continue;
    const bool adapt = !(options.exclude_bias_and_norm && whole_dim(i) <= 1);
    const double wd = adapt ? options.weight_decay : 0.0;
    double trust = 1.0;
    if (adapt) {
      const double w_norm = std::sqrt(sums[2 * i]), g_norm = std::sqrt(sums[2 * i + 1]);
      if (w_norm > 0.0 && g_norm > 0.0)
        trust = options.trust_coefficient * w_norm / (g_norm + wd * w_norm + options.eps);
    }
    // lr as float32, the precision state_dict keeps it in, so a resumed run takes identical steps.
    const float local_lr = static_cast<float>(lr_) * static_cast<float>(trust), mu = static_cast<float>(options.momentum);
    Tensor buffer = mu == 0.0f ? Tensor() : state(i, "momentum_buffer");
    lars_update_(params_[i], grads[i], buffer, local_lr, static_cast<float>(wd), mu);
  }
  ++step_count_;
}

}  // namespace tessera::optim
