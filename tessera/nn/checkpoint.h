// Activation checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost";
// torch.utils.checkpoint): checkpoint(fn, x) runs fn without recording, so none of its intermediate
// activations are kept, and records one node that, in backward, runs fn again with recording on (from
// x and the random-number state of the first run, so dropout draws the same mask) and back-propagates
// through that. Memory of a chain of checkpointed blocks: their inputs only, plus one block's
// activations at a time; cost: one more forward of each block.
//
// fn's parameters get their gradients from the recompute (their grad-ready hooks fire there, inside
// the pass: autograd::backward_within_pass), so DDP and ZeRO work unchanged.
#pragma once
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::nn {

// `parameters`: the tensors fn reads that need gradients (a block's parameters); they make the node
// recorded even when x needs no gradient.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Tensor>& parameters);

}  // namespace tessera::nn
