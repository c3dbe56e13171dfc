// The four region mappings of Megatron-LM (Shoeybi et al. 2019, §3, the f and g operators) as
// differentiable ops over the tensor-parallel group. A tensor-parallel layer enters a "parallel
// region" where each rank holds a shard of the last dimension (or a partial sum), and leaves it
// again; each mapping's backward is the adjoint communication of its forward:
//
//   copy_to      identity            | all-reduce sum of the gradient   (Megatron's f)
//   reduce_from  all-reduce sum      | identity                         (Megatron's g)
//   gather_from  all-gather last dim | own slice of the gradient
//   scatter_to   own slice last dim  | all-gather of the gradient
//
// The loss is the same on every rank (replicated), and gradients are those of that one loss: the
// gradient of a replicated input is complete on every rank after copy_to's backward. Every rank of
// `group` must call the mappings (and run their backward) in the same order; the group must outlive
// the backward. Shards of the last dim are uneven when it does not divide: shard_range below.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"

namespace tessera::parallel::tensor {

// Rank `rank`'s part [begin, end) of `size` items split over `world` ranks: begin = size·rank/world,
// so the parts differ by at most one item and the later ranks hold the larger ones.
std::pair<int64_t, int64_t> shard_range(int64_t size, int rank, int world);
// end - begin of every rank's part.
std::vector<int64_t> shard_sizes(int64_t size, int world);

// The type the all-reduces of copy_to (backward) and reduce_from (forward), and sequence
// parallelism's all-gathers and reduce-scatters, send on this thread: float32, or bfloat16 while a
// TensorParallelWire(DType::BFloat16) scope is open (mixed precision: the mesh strategy opens one
// around its steps when distributed.reduce_dtype says bf16). The value at a mapping's forward also
// holds for its backward.
class TensorParallelWire {
 public:
  explicit TensorParallelWire(DType wire);
  ~TensorParallelWire();
  TensorParallelWire(const TensorParallelWire&) = delete;
  TensorParallelWire& operator=(const TensorParallelWire&) = delete;

 private:
  DType previous_;
};

// What a step spent on tensor-parallel communication, as the compute thread saw it: the time it
// spent issuing and waiting for the collectives (the region mappings' all-reduces, and sequence
// parallelism's all-gathers and reduce-scatters, whose chunks may hide behind the matmuls), their
// bytes and count, forward and backward.
struct TensorParallelCommTally {
  double exposed_seconds = 0.0;
  int64_t bytes = 0, calls = 0;
};

// While open, the tensor-parallel collectives issued on this thread (and their backwards, which keep
// the tally they were issued under) add to `tally`, which must outlive the backward.
class TensorParallelCommTallyScope {
 public:
  explicit TensorParallelCommTallyScope(TensorParallelCommTally* tally);
  ~TensorParallelCommTallyScope();
  TensorParallelCommTallyScope(const TensorParallelCommTallyScope&) = delete;
  TensorParallelCommTallyScope& operator=(const TensorParallelCommTallyScope&) = delete;

 private:
  TensorParallelCommTally* previous_;
};

// The tally open on this thread, or null.
TensorParallelCommTally* tensor_parallel_tally();

// The type tensor-parallel values travel as on this thread now (TensorParallelWire).
DType tensor_parallel_wire();

Tensor copy_to_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group);
Tensor reduce_from_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group);
// (..., n_rank) on each rank -> (..., Σ n_r), rank order. The sizes n_r may differ; without
// `last_dim_sizes` they are exchanged first (one more small all-gather).
Tensor gather_from_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group);
Tensor gather_from_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group,
                                          const std::vector<int64_t>& last_dim_sizes);
// (..., n) -> (..., shard_range(n, rank, world)).
Tensor scatter_to_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group);

}  // namespace tessera::parallel::tensor
