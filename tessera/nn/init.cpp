#include "tessera/nn/init.h"

#include <cmath>

#include "tessera/ops/ops.h"

namespace tessera::nn::init {

Tensor uniform_fan_in(const Shape& shape, int64_t fan_in) {
  float bound = fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f;
  return uniform(shape, -bound, bound);
}

Tensor normal(const Shape& shape, float mean, float std) {
  Tensor t = randn(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = mean + std * p[i];
  return t;
}

}  // namespace tessera::nn::init
