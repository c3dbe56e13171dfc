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

// (n_r, ...) on rank r -> (Σ_r n_r, ...), the ranks' rows in rank order, on every rank: the negatives
// of a contrastive loss (CLIP, MIL-NCE) drawn from every rank's batch. The row counts n_r may differ;
// the trailing shapes must agree (ValueError naming both ranks' shapes otherwise). Backward: every
// rank's loss reads every rank's rows, so dL/dx_r = Σ_s dL_s/dy[rows of r], a reduce-scatter of the
// gradient: the gradient of the SUM of every rank's loss, as for all_reduce_sum. (Megatron's gather
// in parallel/tensor takes its own slice instead, because there every rank computes the same loss.)
// Two collectives forward (the row counts, then the rows) and one backward; every rank calls it and
// runs its backward in the same order; `group` must outlive the backward.
Tensor all_gather_with_grad(const Tensor& x, dist::ProcessGroup& group);

// (n, ...) on every rank, n a multiple of the group's size, cut into size() equal blocks of rows:
// block j goes to rank j, and block r of the result comes from rank r (the dispatch and combine of
// expert parallelism, nn/mixture_of_experts.h). Backward: the same all-to-all of the gradient (an
// all-to-all of equal blocks is its own adjoint). Every rank calls it with the same shape, and runs
// its backward, in the same order; `group` must outlive the backward.
// `tally`, where given, adds each exchange's wall time (the wait for the slowest peer included) and
// its buffer's bytes, forward and backward: what a step spends in its all-to-alls. It must outlive
// the backward.
struct ExchangeTally {
  double seconds = 0.0;
  int64_t bytes = 0, calls = 0;
  ExchangeTally& operator+=(const ExchangeTally& other) {
    seconds += other.seconds, bytes += other.bytes, calls += other.calls;
    return *this;
  }
};
Tensor all_to_all(const Tensor& x, dist::ProcessGroup& group, ExchangeTally* tally = nullptr);

// Refuses a type for values on the wire other than float32 or bfloat16 (mixed precision's), naming
// `what` travels (e.g. "[pipeline] activations").
void check_wire_dtype(DType wire, const char* what);

// Σ_ranks x as a new tensor, outside autograd (x is not modified, and may be a gradient the engine
// also hands to other nodes): the forward and backward of the differentiable collectives here and
// in parallel/tensor/mappings.h. With `wire` bfloat16 the values travel (and are summed by the
// backend) as bf16, half the bytes; the result is float32 either way.
Tensor summed_over_ranks(const Tensor& x, dist::ProcessGroup& group, DType wire = DType::Float32);

}  // namespace tessera::parallel
