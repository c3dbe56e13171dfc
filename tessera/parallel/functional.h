// Collectives as differentiable ops (MLX's and PyTorch's torch.distributed.nn.functional idea): the
// forward communicates, and autograd knows the adjoint communication, so a model that mixes local
// ops and collectives gets exact gradients from loss.backward().
#pragma once
#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"

namespace tessera::parallel {

// y = Σ_ranks x, on every rank (a new tensor; x is not modified). Backward: dL/dx = Σ_ranks dL/dy,
// the same all-reduce. That is the gradient of the SUM of every rank's loss, since each rank's y
// feeds its own loss; DDP's objective is that sum up to the 1/world factor its reducer applies to
// parameter gradients. Every rank must call it (and run its backward) in the same order as the
// group's other collectives; `group` must outlive the backward.
Tensor all_reduce_sum(const Tensor& x, dist::ProcessGroup& group);

// Σ_ranks x as a new tensor, outside autograd (x is not modified, and may be a gradient the engine
// also hands to other nodes): the forward and backward of the differentiable collectives here and
// in parallel/tensor/mappings.h.
Tensor summed_over_ranks(const Tensor& x, dist::ProcessGroup& group);

}  // namespace tessera::parallel
