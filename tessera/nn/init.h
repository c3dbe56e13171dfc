// Parameter initialisation matching PyTorch's defaults, drawn from the default generator (seeded by
// tessera::manual_seed) so a seed reproduces a model.
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::nn::init {

// U(-bound, bound) with bound = 1/sqrt(fan_in): PyTorch's kaiming_uniform_(a=sqrt(5)) for Linear and
// Conv weights, and its bias rule, reduce to this.
Tensor uniform_fan_in(const Shape& shape, int64_t fan_in);
Tensor normal(const Shape& shape, float mean = 0.0f, float std = 1.0f);

}  // namespace tessera::nn::init
