// LARS: layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, "Large Batch Training of
// Convolutional Networks"), in the form of the paper's Algorithm 1 as NVIDIA's and torchlars'
// implementations use it. Per parameter tensor w with gradient g:
//
//   trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + eps)   (1 when ||w|| or ||g|| is 0)
//   v     = momentum * v + lr * trust * (g + weight_decay * w)
//   w    -= v
//
// The learning rate sits inside the momentum buffer (the paper's form, not torch.optim.SGD's), so a
// schedule changes the step at once rather than through the buffer. With eta = 0.001 a step moves
// each tensor by about lr * 0.001 of its norm, so LARS wants much larger lr than SGD (the paper
// uses 2–30 for ResNet-50 at 8k–32k batch).
#pragma once
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct LARSOptions {
  double lr = 1.0;
  double momentum = 0.9;
  double weight_decay = 0.0;
  double trust_coefficient = 0.001;  // eta
  double eps = 1e-8;
  // 1-D (and 0-D) parameters — biases and norm weights — get neither weight decay nor the trust
  // ratio (plain momentum SGD), as in the large-batch ResNet and SimCLR/BYOL recipes: their norms
  // say little about a safe step, and decaying them hurts accuracy.
  bool exclude_bias_and_norm = true;
};

class LARS : public Optimizer {
 public:
  LARS(std::vector<Tensor> params, LARSOptions options);
  void step() override;
  LARSOptions options;
};

}  // namespace tessera::optim
