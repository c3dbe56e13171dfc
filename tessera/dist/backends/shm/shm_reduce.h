// The n-way reduction of the shm backend: out = op(src[0], src[1], ..., src[n-1]) folded left in
// rank order, in one pass over memory (reduce_pair n-1 times would read and write `out` n-1 times).
#pragma once
#include <cstdint>

#include "tessera/dist/types.h"

namespace tessera::dist::detail {

// `count` elements from each of `n` >= 1 sources into `out` and, when not null, also into
// `out_copy`. `out` may alias one of the sources (an in-place allreduce reads its own input).
// bfloat16 accumulates in float32 and rounds once at the end. Avg divides the sum by n in the
// same pass.
void shm_reduce(void* out, void* out_copy, const void* const* src, int n, int64_t count, DType dtype, ReduceOp op);
// The same fold, each finished block written to all `n_outs` outputs, any of which may alias a
// source (the symmetric-memory all-reduce writes every rank's buffer, shm_symmetric.cpp).
void shm_reduce_into(void* const* outs, int n_outs, const void* const* src, int n, int64_t count, DType dtype,
                     ReduceOp op);

}  // namespace tessera::dist::detail
