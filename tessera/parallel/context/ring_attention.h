// Context parallelism by ring attention (Liu et al. 2023; Megatron's and Llama 3's context
// parallelism): each rank of the group keeps its queries, and the keys and values travel around the
// ring, one hop a step, so that every rank's queries meet every rank's keys in N steps. A step's
// attention is folded into the running output with the online softmax (FlashAttention's), and the
// next block is already on its way while the step computes (sent before, waited for after). So a
// rank holds three blocks of keys and values at most (its own, the one it computes with, the one
// arriving), and its scores are one chunk × chunk block at a time.
// Backward recomputes each block's probabilities from the saved log-sum-exp, and the gradients of
// the keys and values travel the ring with them, arriving home after N hops.
//
// The causal mask is by the tokens' positions in the whole sequence (layout.h): with ring's two
// chunks per rank every rank has the same share of visible scores, and a pair of chunks the mask
// hides entirely is skipped. A masked score is −1e30, not −∞:
// each query sees its own key in the first step, so its running maximum is finite from then on.
#pragma once
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"
#include "tessera/parallel/context/layout.h"
#include "tessera/parallel/functional.h"

namespace tessera::parallel::context {

// q, k, v (B, H, t, d): this rank's tokens, the runs runs[rank] of the whole sequence (runs[j] for
// rank j's) -> (B, H, t, d): causal attention of this rank's queries over the whole sequence.
// `tally` adds the time spent waiting for blocks after the compute they overlapped (the exposed
// communication) and their bytes. Differentiable; every rank of `group` calls it, and runs its
// backward, in the same order.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<std::vector<TokenRun>>& runs,
                      dist::ProcessGroup& group, ExchangeTally* tally = nullptr);

}  // namespace tessera::parallel::context
