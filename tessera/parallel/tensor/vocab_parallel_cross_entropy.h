// Cross-entropy over logits whose vocabulary is split over the tensor-parallel group, without ever
// gathering them (Megatron-LM's vocab_parallel_cross_entropy): for each row, the max is all-reduced
// (max), then Σ exp(logit - max) and the target's logit (held by one rank, zero on the others) are
// all-reduced (sum) together, and loss = log Σ + max - logit[target]. Stable for large logits.
// One recorded op; its backward needs no communication: (softmax - one-hot) / N on the local shard.
#pragma once
#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"

namespace tessera::parallel::tensor {

// local_logits (N, V_local) float32: this rank's vocabulary columns (rank r's are after ranks < r's,
// any sizes); targets (N) int64 in [0, Σ V_local). Returns the mean loss over N, a 0-dim tensor, the
// same on every rank. Every rank of `group` calls it.
Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets,
                                    const dist::ProcessGroupPtr& group);

}  // namespace tessera::parallel::tensor
