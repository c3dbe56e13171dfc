// One element of each fused optimizer update, written once for the CPU's loops
// (backend/cpu/optimizer_update.cpp's arrays, cpu_optimizer.cpp) and the CUDA kernels
// (backend/cuda/elementwise.cu). Callers pass the step's constants by value, so that in a loop they
// are locals the parameter's stores cannot alias.
#pragma once
#include <math.h>

#include "tessera/ops/host_device.h"
#include "tessera/ops/optimizer_steps.h"

namespace tessera {

// SGD (torch.optim.SGD): buf is null without momentum; on the buffer's first step it takes d.
TESSERA_HOST_DEVICE void sgd_element(float& p, float g, float* buf, const SgdStep s) {
  const float d = g + s.weight_decay * p;
  if (buf == nullptr) {
    p -= s.lr * d;
    return;
  }
  *buf = s.first ? d : s.momentum * *buf + (1.0f - s.dampening) * d;
  p -= s.lr * (s.nesterov ? d + s.momentum * *buf : *buf);
}

// Adam, or AdamW where s.decoupled (torch.optim.Adam / AdamW, amsgrad off).
TESSERA_HOST_DEVICE void adam_element(float& p, float g, float& m, float& v, const AdamStep s) {
  float grad = g;
  if (s.decoupled) p *= 1.0f - s.lr * s.weight_decay;
  else grad += s.weight_decay * p;
  m = s.beta1 * m + (1.0f - s.beta1) * grad;
  v = s.beta2 * v + (1.0f - s.beta2) * grad * grad;
  p -= s.step_size * m / (sqrtf(v) / s.bias2_sqrt + s.eps);
}

// LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
// Algorithm 2): the moments, then the direction u, which the second pass recomputes from them bit for
// bit (the same function on one device), so that the norm of u summed in the first pass is the norm
// of the u applied.
TESSERA_HOST_DEVICE void lamb_moments_element(float g, float& m, float& v, const LambStep s) {
  m = s.beta1 * m + s.one_minus_beta1 * g;
  v = s.beta2 * v + s.one_minus_beta2 * g * g;
}
TESSERA_HOST_DEVICE float lamb_direction(float m, float v, float p, const LambStep s) {
  return (m / s.bias1) / (sqrtf(v / s.bias2) + s.eps) + s.weight_decay * p;
}

// LARS with its layer's local lr: v is null without momentum.
TESSERA_HOST_DEVICE void lars_element(float& p, float g, float* v, float local_lr, float weight_decay,
                                      float momentum) {
  if (v == nullptr) {
    p -= local_lr * (g + weight_decay * p);
    return;
  }
  *v = momentum * *v + local_lr * (g + weight_decay * p);
  p -= *v;
}

}  // namespace tessera
