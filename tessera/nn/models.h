// The reference models used by the benchmarks, the examples and `tessera train`.
#pragma once
#include <vector>

#include "tessera/nn/layers.h"

namespace tessera::nn {

// Linear-ReLU stack: sizes {784, 512, 256, 10} gives 784-512-256-10 with ReLU between layers.
std::shared_ptr<Sequential> make_mlp(const std::vector<int64_t>& sizes);
// conv(1→32, 3×3, pad 1)-ReLU-maxpool 2-conv(32→64, 3×3, pad 1)-ReLU-maxpool 2-flatten-
// linear(3136→128)-ReLU-linear(128→classes), for (N, 1, 28, 28) images.
std::shared_ptr<Sequential> make_cnn(int64_t classes = 10);

}  // namespace tessera::nn
