// SGD with momentum, dampening, Nesterov and (coupled) weight decay — torch.optim.SGD's update.
#pragma once
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  SGDOptions options;
};

// The fused update's constants for one step at `lr` (`first`: the momentum buffer's first step).
SgdStep sgd_step(const SGDOptions& options, double lr, bool first);

}  // namespace tessera::optim
