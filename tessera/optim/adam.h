// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay, Loshchilov &
// Hutter 2019) — the updates of torch.optim.Adam / AdamW with amsgrad=False.
#pragma once
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled_weight_decay = false);
  void step() override;
  AdamOptions options;

 private:
  bool decoupled_;
};

// The fused update's constants for step `step` (1-based) at `lr`.
AdamStep adam_step(const AdamOptions& options, double lr, int64_t step, bool decoupled_weight_decay);

class AdamW : public Adam {
 public:
  // PyTorch's AdamW default weight decay is 0.01.
  AdamW(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, true) {}
};

}  // namespace tessera::optim
