// Sequence parallelism for the tensor-parallel transformer (Korthikanti et al. 2022, "Reducing
// activation recomputation in large transformer models", §4.2.2; Megatron's --sequence-parallel).
// Outside the tensor-parallel regions (LayerNorms, dropout, residual adds) each rank of the group
// holds only its tokens [T·r/world, T·(r+1)/world) of every sequence, (B, T/world, C), so the
// activations kept there take 1/world of the memory. Each of Megatron's all-reduces becomes an
// all-gather of the tokens on the way into a column-parallel Linear and a reduce-scatter over the
// tokens on the way out of a row-parallel one: the same bytes, now in pieces that can overlap.
//
// Those pieces let the communication hide behind the matmuls (a "collective matmul", Wang et al.
// 2023, "Overlap communication with dependent computation via decomposition in large deep learning
// models"). The local rows are cut in `chunks`; every chunk's all-gather is queued at once on the
// group's worker thread, this rank's own rows are multiplied first, and each chunk's rows as it
// arrives. On the way out chunk k's reduce-scatter travels while chunk k+1's rows are computed, and
// this rank's own part last. The backward
// of each is the other: all_gather_linear's input gradient leaves by reduce-scatter, and
// linear_reduce_scatter's output gradient arrives by all-gather. chunks = 1 is the plain sequence
// (communicate, then compute), the reference for what the overlap hides.
//
// Their time, bytes and count go to the open TensorParallelCommTally (mappings.h). With one chunk the
// time is all of theirs; with more, what the matmuls did not hide.
//
// The parameters used on the token shards (the LayerNorms', the row-parallel biases) get partial
// gradients on each rank: sum_partial_gradients adds them up over the group after the backward.
// The sequence length must divide by the group's size. Float32 CPU tensors; every rank of `group`
// calls these in the same order (forward and backward), and the group outlives the backward.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/tensor/mappings.h"

namespace tessera::parallel::tensor {

struct SequenceParallel {
  bool enabled = false;
  int64_t chunks = 1;  // pieces each all-gather / reduce-scatter is cut into, to overlap with the matmuls
};

// x (B, T, C), the same on every rank -> this rank's tokens (B, T/world, C). Backward: the token
// gradients all-gathered, so the input's gradient is whole on every rank.
Tensor scatter_to_sequence_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group);

// x (B, T/world, in), this rank's tokens -> linear(all-gather of x over the tokens, weight, bias),
// (B, T, out_local): a column-parallel Linear. weight (out_local, in); bias (out_local) or undefined.
Tensor all_gather_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const dist::ProcessGroupPtr& group,
                         int64_t chunks);

// x (B, T, in_local) -> the sum over the group of linear(x, weight), this rank's tokens only,
// (B, T/world, out): a row-parallel Linear (its bias is added by the caller, to the shard).
Tensor linear_reduce_scatter(const Tensor& x, const Tensor& weight, const dist::ProcessGroupPtr& group, int64_t chunks);

// Dropout of this rank's tokens x (B, T/world, C) with the mask the whole (B, T, C) tensor would
// draw: every rank draws the same mask (ranks are seeded alike) and keeps its own tokens' part, so
// the ranks' masks are independent, as one process's are.
Tensor sequence_parallel_dropout(const Tensor& x, float p, bool training, const dist::ProcessGroupPtr& group);

// A layer's dropout `drop` of its output y: on this rank's tokens with the whole tensor's mask under
// sequence parallelism, else as the layer would.
Tensor dropout_of(nn::Dropout& drop, const Tensor& y, const SequenceParallel& sequence,
                  const dist::ProcessGroupPtr& group);

// Adds each parameter's gradient up over `group`, in one all-reduce (a missing gradient counts as
// zeros and is made).
void sum_partial_gradients(const std::vector<Tensor>& parameters, dist::ProcessGroup& group);

}  // namespace tessera::parallel::tensor
