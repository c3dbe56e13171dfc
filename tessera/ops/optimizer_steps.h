// The constants of one step of the fused optimizer updates (ops.h: sgd_update_, adam_update_,
// lamb_moments_, lamb_apply_), in float32 as the state is; optim/ computes them from its options.
// Plain C++ (no tensor header), as the CUDA sources compile it too.
#pragma once

namespace tessera {

struct SgdStep {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first;  // the momentum buffer's first step: it takes the gradient (torch's rule)
};
struct AdamStep {
  float step_size;   // lr / (1 - beta1^t)
  float bias2_sqrt;  // sqrt(1 - beta2^t)
  float beta1, beta2, eps, weight_decay, lr;
  bool decoupled;    // AdamW: weight decay on the parameter, not added to the gradient
};
struct LambStep {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;  // 1 - beta computed in double
  float bias1, bias2, eps, weight_decay;
};

}  // namespace tessera
