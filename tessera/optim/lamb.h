// LAMB: layer-wise adaptive moments (You et al. 2019, "Large Batch Optimization for Deep Learning:
// Training BERT in 76 minutes", Algorithm 2). Adam's bias-corrected moments, then per parameter
// tensor w a trust ratio that sets the step relative to ||w||:
//
//   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g²,   m̂ = m / (1 - b1^t),   v̂ = v / (1 - b2^t)
//   u = m̂ / (sqrt(v̂) + eps) + weight_decay * w
//   w -= lr * phi(||w||) / ||u|| * u          (ratio 1 when ||w|| or ||u|| is 0)
//
// phi is the identity, or min(||w||, weight_norm_max) when weight_norm_max > 0 (the paper's
// scaling function with lower bound 0; the cybertronai implementation clamps at 10).
#pragma once
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct LAMBOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;  // the paper's and BERT's value
  double weight_decay = 0.0;
  double weight_norm_max = 0.0;  // 0: phi is the identity
};

class LAMB : public Optimizer {
 public:
  LAMB(std::vector<Tensor> params, LAMBOptions options);
  void step() override;
  LAMBOptions options;
};

}  // namespace tessera::optim
