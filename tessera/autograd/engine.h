// Runs backward over the recorded graph.
#pragma once
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

// Back-propagates from `roots`; a root without a gradient must hold one element (gradient 1).
// Gradients accumulate into the .grad of leaves that require grad. Without retain_graph the graph's
// saved tensors are freed, and a second backward through it raises an error.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// A backward run from inside the backward pass now running (activation checkpointing's recompute):
// gradients accumulate and grad-ready hooks fire as in backward(), but callbacks queued meanwhile
// (DDP's and ZeRO's end-of-pass work) run when the outer pass ends, not when this one does. Outside
// a backward pass it is backward().
void backward_within_pass(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);

// From a grad-ready hook: runs `callback` once the backward pass now running has finished (before
// backward() returns), as PyTorch's queue_callback. DDP's reducer waits for its last buckets here,
// so a training loop's loss.backward() returns with averaged gradients. ValueError outside backward.
void queue_callback(std::function<void()> callback);

}  // namespace tessera::autograd
