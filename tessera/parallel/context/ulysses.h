// Context parallelism by Ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023): each rank of the context
// group holds a contiguous part of every sequence (T / N tokens), and attention swaps the cut: one
// all-to-all takes each rank's q, k and v for its tokens and all heads to the whole sequence and
// H / N heads, causal attention runs there as on one process, and a second all-to-all brings each
// head's output back to the ranks that hold its tokens. Rank r holds tokens [r·T/N, (r+1)·T/N) and
// heads [r·H/N, (r+1)·H/N). Both exchanges are differentiable (parallel::all_to_all), so backward
// sends the gradients the same two ways. Every rank of the group calls them in the same order with
// the same shapes; the heads must divide over the group.
#pragma once
#include <array>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"
#include "tessera/parallel/functional.h"

namespace tessera::parallel::context {

// qkv (B, T/N, 3·H·d): [q | k | v], each H heads of d, for this rank's tokens -> q, k and v, each
// (B, H/N, T, d): this rank's heads over the whole sequence.
std::array<Tensor, 3> sequence_to_heads(const Tensor& qkv, int64_t heads, dist::ProcessGroup& group,
                                        ExchangeTally* tally = nullptr);
// y (B, H/N, T, d), this rank's heads -> (B, T/N, H·d): every head for this rank's tokens.
Tensor heads_to_sequence(const Tensor& y, dist::ProcessGroup& group, ExchangeTally* tally = nullptr);

}  // namespace tessera::parallel::context
