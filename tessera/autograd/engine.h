// Runs backward over the recorded graph.
#pragma once
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

// Back-propagates from `roots`; a root without a gradient must hold one element (gradient 1).
// Gradients accumulate into the .grad of leaves that require grad. Without retain_graph the graph's
// saved tensors are freed, and a second backward through it raises an error.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

}  // namespace tessera::autograd
