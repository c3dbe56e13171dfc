#include "tessera/optim/sgd.h"

#include "tessera/ops/ops.h"

namespace tessera::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : Optimizer(std::move(params), o.lr), options(o) {
  TESSERA_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "[SGD] momentum and weight_decay must be >= 0");
  TESSERA_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "[SGD] Nesterov needs momentum > 0 and dampening 0");
}

SgdStep sgd_step(const SGDOptions& o, double lr, bool first) {
  return {static_cast<float>(lr), static_cast<float>(o.momentum), static_cast<float>(o.dampening),
          static_cast<float>(o.weight_decay), o.nesterov, first};
}

void SGD::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = gradient_to_apply(i);
    if (!g.defined()) continue;
    const bool momentum = static_cast<float>(options.momentum) != 0.0f;
    const bool first = momentum && !has_state(i, "momentum_buffer");
    Tensor buffer = momentum ? state(i, "momentum_buffer") : Tensor();
    sgd_update_(params_[i], g, buffer, sgd_step(options, lr_, first));
  }
  ++step_count_;
}

}  // namespace tessera::optim
